// Float8 linear layers: the QKV, output and FFN projections and the LM head run their GEMMs
// on the fp8 tensor cores, everything else (attention, norms, loss, optimizer, collectives)
// stays bf16. This is what torchtitan's `--model.converters=float8` does (its converter
// skips no module by default, the LM head included) and what the corpus's `precision: fp8`
// records (validation/README.md).
//
// Priced by one rate per GPU: the dense fp8 peak x fp8 gemm_efficiency (topology
// `gpu.fp8`). The efficiency is effective: it includes the dynamic-scaling work (amax,
// scale, cast) that torch.compile fuses around each GEMM, which is why it sits well under
// the bf16 one. The rate replaces the GPU's linear-layer rate, so the cost model, the
// schedule generator and the simulator (all read CostParams::gemm_flops_per_s) price the
// same fp8 step.
#pragma once

#include <string>

#include "planner/topology.h"

namespace rm {

enum class LinearPrecision { kBf16, kFp8 };

// Linear-layer FLOP/s of `gpu` at precision `p`: peak x gemm_efficiency for bf16, the fp8
// peak x fp8 gemm_efficiency for fp8 (0 when the GPU has no fp8 tensor cores).
double linear_flops_per_s(const GpuSpec& gpu, LinearPrecision p);

// Sets topology.gpu.gemm_efficiency (a fraction of the bf16 peak, above 1 for fp8) so that
// the linear layers run at linear_flops_per_s(p). Throws InputError "<where>: <field>:
// ..." when the topology's GPU has no fp8 rate.
void apply_linear_precision(Topology& topology, LinearPrecision p, const std::string& where,
                            const std::string& field);

}  // namespace rm
