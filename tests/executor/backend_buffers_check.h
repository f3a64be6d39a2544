// The schedule buffers' contract (executor/buffer_table.h) on one backend: an id allocated
// twice, used before its alloc or after its free, used in a role it was not allocated for,
// or a transfer past its end is refused, naming the backend and the buffer. Shared by the
// cpu backend's test (tests/executor) and the GPU's (tests/cuda): the cpu refusing what the
// cuda backend refuses is what lets CI, with no GPU, catch a schedule or ring loop that
// breaks it.
#pragma once

#include <doctest/doctest.h>

#include <numeric>
#include <string>
#include <vector>

#include "executor/backend.h"

namespace rm::exec::testing {

inline void check_buffer_contract(const std::string& backend) {
  AttentionShape shape;
  shape.c = 64;
  shape.d = 64;
  shape.h = 2;
  shape.h_kv = 1;
  std::vector<int64_t> tokens(static_cast<size_t>(shape.c));
  std::iota(tokens.begin(), tokens.end(), 0);
  auto be = make_backend(backend);
  be->setup(shape, tokens, 1);
  auto error = [&](int id, const char* what) {
    return backend + " backend: buffer " + std::to_string(id) + " " + what + " (schedule error)";
  };

  be->alloc(0, BufferRole::kKv);
  be->alloc(1, BufferRole::kDkv);
  CHECK_THROWS_WITH(be->alloc(0, BufferRole::kKv), error(0, "allocated twice").c_str());
  CHECK_THROWS_WITH(be->zero(0), error(0, "used with the wrong content").c_str());
  CHECK_THROWS_WITH(be->load_own_kv(1), error(1, "used with the wrong content").c_str());
  CHECK_THROWS_WITH(be->accumulate(1, 0), error(0, "used with the wrong content").c_str());
  CHECK_THROWS_WITH(be->load_own_kv(2), error(2, "used before alloc").c_str());
  be->load_own_kv(0);
  be->zero(1);
  const size_t kv_bytes = be->bytes_of(0);
  be->free(0);
  CHECK_THROWS_WITH(be->bytes_of(0), error(0, "used before alloc").c_str());
  CHECK_THROWS_WITH(be->free(0), error(0, "used before alloc").c_str());
  be->alloc(0, BufferRole::kKv);  // an id is free again after its free
  CHECK(be->bytes_of(0) == kv_bytes);
  // A message part reaching past its buffer's end, refused before any transport sees it.
  const std::string past = backend + " backend: transfer of 8 bytes at offset " + std::to_string(kv_bytes - 4) +
                           " exceeds buffer 0 (" + std::to_string(kv_bytes) + " bytes; schedule error)";
  CHECK_THROWS_WITH(be->isend(0, kv_bytes - 4, 8, 0, 1), past.c_str());
  CHECK_THROWS_WITH(be->irecv(0, kv_bytes - 4, 8, 0, 1), past.c_str());
}

}  // namespace rm::exec::testing
