// The schedule buffers' contract on the cpu backend (backend_buffers_check.h).
#include <doctest/doctest.h>

#include "tests/executor/backend_buffers_check.h"

namespace rm::exec {
namespace {

TEST_CASE("cpu backend: a buffer allocated twice, used before alloc or after free, or in another role fails") {
  testing::check_buffer_contract("cpu");
}

}  // namespace
}  // namespace rm::exec
