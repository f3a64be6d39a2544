// `run --verify`'s check, in one process: the cpu backend computes a one-rank ring through
// the Backend interface (no transfers, so no MPI), verify_ring passes it, and a result
// perturbed beyond the tolerance fails it, naming the tensor (run then exits 1).
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "executor/backend.h"
#include "executor/verify.h"

namespace rm::exec {
namespace {

const TensorCheck& check_of(const VerifyResult& r, const char* tensor) {
  for (const auto& c : r.checks)
    if (c.tensor == tensor) return c;
  FAIL("no check for " << tensor);
  return r.checks.front();
}

TEST_CASE("verify: a one-rank ring passes: a perturbed dK fails naming it") {
  AttentionShape shape;
  shape.c = 48;
  shape.d = 16;
  shape.h = 4;
  shape.h_kv = 2;
  shape.block_q = 8;
  shape.block_kv = 16;
  shape.causal = true;
  std::vector<int64_t> tokens(static_cast<size_t>(shape.c));
  std::iota(tokens.begin(), tokens.end(), 0);
  const uint64_t seed = 7;

  auto be = make_backend("cpu");
  be->setup(shape, tokens, seed);
  be->alloc(0, BufferRole::kKv);
  be->load_own_kv(0);
  be->begin_forward();
  be->attention_forward(0, tokens);
  be->begin_backward();
  be->alloc(1, BufferRole::kDkv);
  be->attention_backward(0, tokens, 1);
  be->take_own_dkv(1, false);
  HostTensors t = be->download();

  // An attention op whose K,V token list is not the block's is refused, as on the device.
  const std::vector<int64_t> short_list(tokens.begin(), tokens.end() - 1);
  CHECK_THROWS_WITH_AS(be->attention_forward(0, short_list),
                       ("cpu backend: a K,V block of " + std::to_string(shape.c - 1) + " tokens, expected " +
                        std::to_string(shape.c)).c_str(),
                       std::runtime_error);

  const VerifyResult good = verify_ring({{t}}, shape, seed, true);
  CHECK(good.ok());
  CHECK(check_of(good, "dk").rel_err < 1e-5);

  const HostTensors first = t;
  t.dk[5] += 1e-2f * static_cast<float>(check_of(good, "dk").max_abs_ref);
  const VerifyResult bad = verify_ring({{t}}, shape, seed, true);
  CHECK_FALSE(bad.ok());
  CHECK_FALSE(check_of(bad, "dk").ok);
  CHECK(check_of(bad, "dq").ok);
  CHECK(format_verify_table({bad}, kVerifyTolerance).find("FAIL") != std::string::npos);

  // Two iterations (run's warm-up and last): a tensor reports the worse, whichever it was.
  for (const auto& iterations : {std::vector<std::vector<HostTensors>>{{first}, {t}},
                                 std::vector<std::vector<HostTensors>>{{t}, {first}}}) {
    const VerifyResult both = verify_ring(iterations, shape, seed, true);
    CHECK_FALSE(check_of(both, "dk").ok);
    CHECK(check_of(both, "dk").rel_err == doctest::Approx(check_of(bad, "dk").rel_err));
    CHECK(check_of(both, "dq").ok);
  }
}

}  // namespace
}  // namespace rm::exec
