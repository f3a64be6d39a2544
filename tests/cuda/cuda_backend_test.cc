// The cuda backend through the Backend interface the ring loop drives, on a one-rank
// world (a ring of one: the rank's own block, forward and backward), checked by the
// executor's own verification (verify.h) at the backend's tolerance.
#include <doctest/doctest.h>

#include <cstdio>
#include <vector>

#include "executor/backend.h"
#include "executor/verify.h"
#include "tests/executor/backend_buffers_check.h"

namespace rm::exec {
namespace {

void run_one_rank(AttentionShape shape) {
  std::vector<int64_t> tokens(static_cast<size_t>(shape.c));
  for (int64_t i = 0; i < shape.c; ++i) tokens[i] = i;
  const uint64_t seed = 3;
  auto be = make_backend("cuda");
  be->setup(shape, tokens, seed);
  be->connect({0});  // a ring of one: this rank
  const int kv = 0, acc = 1, partial = 2;
  be->alloc(kv, BufferRole::kKv);
  be->alloc(acc, BufferRole::kDkv);
  be->alloc(partial, BufferRole::kDkv);
  CHECK(be->bytes_of(kv) == static_cast<size_t>(2 * shape.h_kv * shape.c * shape.d * 2));
  CHECK(be->bytes_of(acc) == static_cast<size_t>(2 * shape.h_kv * shape.c * shape.d * 4));
  be->load_own_kv(kv);
  be->begin_forward();
  be->attention_forward(kv, tokens);
  be->begin_backward();
  be->zero(acc);
  be->attention_backward(kv, tokens, partial);
  be->accumulate(acc, partial);
  be->take_own_dkv(acc, false);
  be->synchronize();
  const VerifyResult r = verify_ring({{be->download()}}, shape, seed, true, be->verify_tolerance());
  std::fputs(format_verify_table({r}, be->verify_tolerance()).c_str(), stdout);
  CHECK(r.ok());
}

TEST_CASE("cuda backend, one rank: forward and backward verify against the fp64 reference") {
  AttentionShape s;
  s.c = 256;
  s.d = 64;
  s.h = 4;
  s.h_kv = 2;
  s.block_q = s.block_kv = 64;
  s.causal = true;
  run_one_rank(s);
  s.causal = false;
  s.d = 128;
  s.block_q = s.block_kv = 128;
  run_one_rank(s);
}

TEST_CASE("cuda backend: a buffer allocated twice, used before alloc or after free, or in another role fails") {
  testing::check_buffer_contract("cuda");
}

TEST_CASE("cuda backend refuses a head dim its kernels do not have") {
  AttentionShape s;
  s.c = 64;
  s.d = 80;
  s.h = s.h_kv = 1;
  std::vector<int64_t> tokens(64);
  auto be = make_backend("cuda");
  CHECK_THROWS_WITH(be->setup(s, tokens, 1), doctest::Contains("head_dim 80"));
}

}  // namespace
}  // namespace rm::exec
