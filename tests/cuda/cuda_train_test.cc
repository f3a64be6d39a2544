// The cuda kernels of the transformer's pass (executor/cuda/cuda_train_kernels.h) against
// the same fp64 loops as the cpu kernels (tests/executor/train_kernels_check.h), and a
// few training steps on them against the cpu kernels' losses. fp32 throughout, the
// attention the fp64 reference on the host for both: only summation orders differ.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "executor/cuda/cuda_train_kernels.h"
#include "tests/executor/train_kernels_check.h"
#include "tests/executor/transformer_fixture.h"

namespace rm::exec {
namespace {

TEST_CASE("cuda train kernels: every kernel matches its definition in fp64") {
  const auto kernels = gpu::make_cuda_train_kernels();
  double worst = 0;
  for (const testing::KernelError& e : testing::check_train_kernels(*kernels)) {
    INFO(e.name << ": relative error " << e.rel_err);
    CHECK(e.rel_err < 1e-5);
    worst = std::max(worst, e.rel_err);
  }
  std::printf("cuda train kernels against fp64 loops: largest relative error %.2e\n", worst);
}

TEST_CASE("cuda train kernels: bf16 GEMMs round their products to bf16, nothing else") {
  const auto kernels = gpu::make_cuda_train_kernels(true);
  for (const testing::KernelError& e : testing::check_train_kernels(*kernels)) {
    INFO(e.name << ": relative error " << e.rel_err);
    // bf16 keeps 8 bits of mantissa: about 4e-3 per product, a few of those in a sum.
    CHECK(e.rel_err < (e.name.rfind("gemm", 0) == 0 ? 2e-2 : 1e-5));
    if (e.name.rfind("gemm", 0) == 0) std::printf("bf16 %s: relative error %.2e\n", e.name.c_str(), e.rel_err);
  }
}

TEST_CASE("cuda train kernels: training steps follow the cpu kernels' losses") {
  const auto kernels = gpu::make_cuda_train_kernels();
  const std::vector<double> gpu = testing::train_steps(*kernels, 2);
  const std::vector<double> cpu = testing::train_steps(cpu_train_kernels<float>(), 2);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t s = 0; s < cpu.size(); ++s) {
    const double rel = std::abs(gpu[s] - cpu[s]) / cpu[s];
    INFO("step " << s + 1 << ": cuda " << gpu[s] << ", cpu " << cpu[s]);
    CHECK(rel < 1e-5);
    std::printf("step %zu: loss cuda %.9f, cpu %.9f (rel diff %.1e)\n", s + 1, gpu[s], cpu[s], rel);
  }
}

TEST_CASE("cuda train kernels: bf16 mixed-precision steps follow the cpu kernels' bf16 losses") {
  // The same Bf16Kernels adapter over each device's fp32 kernels (bf16_kernels.h).
  const auto kernels = gpu::make_cuda_train_kernels();
  const std::vector<double> gpu = testing::train_steps(*kernels, 2, true);
  const std::vector<double> cpu = testing::train_steps(cpu_train_kernels<float>(), 2, true);
  REQUIRE(gpu.size() == cpu.size());
  for (size_t s = 0; s < cpu.size(); ++s) {
    const double rel = std::abs(gpu[s] - cpu[s]) / cpu[s];
    INFO("step " << s + 1 << ": cuda " << gpu[s] << ", cpu " << cpu[s]);
    CHECK(rel < 1e-3);  // bf16 rounding of different fp32 sums can flip a last bit
    std::printf("bf16 step %zu: loss cuda %.9f, cpu %.9f (rel diff %.1e)\n", s + 1, gpu[s], cpu[s], rel);
  }
}

}  // namespace
}  // namespace rm::exec
