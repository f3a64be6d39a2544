// The cpu kernels of the transformer's pass (executor/train_kernels.h) against plain fp64
// loops (train_kernels_check.h; the GPU test holds the cuda kernels to the same).
#include <doctest/doctest.h>

#include <cstdio>

#include "executor/train_kernels.h"
#include "tests/executor/train_kernels_check.h"

namespace rm::exec {
namespace {

TEST_CASE("train kernels: every cpu kernel matches its definition in fp64") {
  double worst = 0;
  for (const testing::KernelError& e : testing::check_train_kernels(cpu_train_kernels<float>())) {
    INFO(e.name << ": relative error " << e.rel_err);
    CHECK(e.rel_err < 1e-5);
    worst = std::max(worst, e.rel_err);
  }
  std::printf("cpu train kernels against fp64 loops: largest relative error %.2e\n", worst);
}

}  // namespace
}  // namespace rm::exec
