#include "planner/linear_precision.h"

#include "planner/input_error.h"

namespace rm {

double linear_flops_per_s(const GpuSpec& gpu, LinearPrecision p) {
  if (p == LinearPrecision::kBf16) return gpu.peak_flops * gpu.gemm_efficiency;
  return gpu.fp8_peak_flops * gpu.fp8_gemm_efficiency;
}

void apply_linear_precision(Topology& topology, LinearPrecision p, const std::string& where,
                            const std::string& field) {
  if (p == LinearPrecision::kBf16) return;
  const double rate = linear_flops_per_s(topology.gpu, p);
  if (rate <= 0) {
    fail_input(where, field, "topology " + topology.name + " prices no fp8 linear layers (its gpu has no fp8 block)");
  }
  topology.gpu.gemm_efficiency = rate / topology.gpu.peak_flops;
}

}  // namespace rm
