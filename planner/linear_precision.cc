#include "planner/linear_precision.h"

#include "planner/input_error.h"

namespace rm {

double linear_flops_per_s(const GpuSpec& gpu, LinearPrecision p) {
  if (p == LinearPrecision::kBf16) return gpu.peak_flops * gpu.gemm_efficiency;
  return gpu.fp8_peak_flops * (gpu.fp8_gemm_efficiency > 0 ? gpu.fp8_gemm_efficiency : gpu.gemm_efficiency);
}

double fp8_cast_bytes_per_token_layer(const ModelSpec& m, Fp8Recipe recipe) {
  if (recipe == Fp8Recipe::kNone) return 0;
  const double H = m.hidden, F = m.ffn_hidden;
  const double hd = static_cast<double>(m.heads) * m.head_dim;
  const double kvd = static_cast<double>(m.kv_heads) * m.head_dim;
  const double up = m.gated_ffn ? 2 * F : F;  // FFN up (and gate) outputs
  const double grads = hd + 2 * kvd + H + up + H;  // output gradients of q,k,v, o, up(, gate), down
  if (recipe == Fp8Recipe::kTensorwise) {
    const double inputs = 3 * H + hd + (m.gated_ffn ? 2 : 1) * H + F;  // wq wk wv, wo, w1 (w3), w2
    return 6 * (inputs + grads) / kTensorwiseCastEfficiency;
  }
  if (recipe == Fp8Recipe::kCurrent) return 6 * (H + hd + H + F + grads) / kTransformerEngineCastEfficiency;
  return (2 * (H + H) + 4 * (hd + F) + 4 * grads) / kTransformerEngineCastEfficiency;
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

void apply_plan_precision(Topology& topology, Fp8Recipe recipe, const std::string& profile, const std::string& where,
                          const std::string& field) {
  if (recipe == Fp8Recipe::kNone) return;
  if (!profile.empty())
    fail_input(where, field,
               "fp8 linear layers are priced from the topology's fp8 rate, not with a calibrated profile (" + profile +
                   "), whose GEMM rate is the one it measured: drop one of them");
  apply_linear_precision(topology, LinearPrecision::kFp8, where, field);
}

int tp_gather_element_bytes(Fp8Recipe recipe, int element_bytes) {
  return recipe == Fp8Recipe::kNone ? element_bytes : 1;
}

}  // namespace rm
