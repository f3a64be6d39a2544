// Float8 linear layers: the QKV, output and FFN projections and the LM head run their GEMMs
// on the fp8 tensor cores, everything else (attention, norms, loss, optimizer, collectives
// but the TP all-gathers, tp_gather_element_bytes) stays bf16. This is what torchtitan's
// `--model.converters=float8` does (its converter skips no module by default, the LM head
// included), what Megatron-LM / NeMo's `--fp8` does with Transformer Engine, and what the
// corpus's `precision: fp8` records
// (validation/README.md).
//
// Priced as torchao's own float8 roofline prices it (pytorch/ao
// torchao/testing/float8/roofline_utils.py @ 042170ff590a18993e2b939a85d7eb3cd8db8d5c, and
// torchao/float8/README.md "Derivation": fp8 linear time = fp8 GEMM time + the memory-bound
// scaling and casting overhead):
//  - the GEMMs at the dense fp8 peak (topology `gpu.fp8.peak_tflops`) times the fp8 GEMMs'
//    efficiency, `gpu.fp8.gemm_efficiency`. The roofline uses one achievable fraction for
//    both types, and so does a topology without the key (the bf16 GEMM efficiency); the
//    shipped Hopper topologies state it, below the bf16 one by the measured ratio of the two
//    types' best matmuls (0.882 on H100, 0.914 on H200: the topologies' notes);
//  - the casts of each GEMM's bf16 operands to fp8 as HBM traffic, by recipe
//    (fp8_cast_bytes_per_token_layer). Weights are cast per shard before FSDP's float8
//    all-gather (torchao) or once per optimizer step (Transformer Engine caches them over
//    micro-batches): per token, negligible, not counted.
// The GEMM rate replaces the GPU's linear-layer rate, so the cost model, the schedule
// generator and the simulator (all read CostParams::gemm_flops_per_s) price the same fp8
// step; the casts ride with the layer's elementwise bytes (attention_work.h), which the
// three share too.
#pragma once

#include <string>

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

enum class LinearPrecision { kBf16, kFp8 };

// Linear-layer FLOP/s of `gpu` at precision `p`: peak x gemm_efficiency for bf16, the fp8
// peak x the same efficiency (or the topology's fp8 gemm_efficiency) for fp8; 0 when the
// GPU has no fp8 tensor cores.
double linear_flops_per_s(const GpuSpec& gpu, LinearPrecision p);

// Sets topology.gpu.gemm_efficiency (a fraction of the bf16 peak, above 1 for fp8) so that
// the linear layers run at linear_flops_per_s(p). Throws InputError "<where>: <field>:
// ..." when the topology's GPU has no fp8 rate.
void apply_linear_precision(Topology& topology, LinearPrecision p, const std::string& where,
                            const std::string& field);

// A plan's linear precision on its topology, as `plan --fp8` and a plan file's fp8_recipe
// price it: nothing for kNone; else the fp8 rate (apply_linear_precision). Refused with a
// calibrated `profile`: its GEMM rate is the one it measured, in the element type it ran.
void apply_plan_precision(Topology& topology, Fp8Recipe recipe, const std::string& profile, const std::string& where,
                          const std::string& field);

// HBM bytes one token's casts to fp8 move in one layer's forward and backward together,
// scaled to the GPU's peak HBM rate (bytes / achieved fraction), as
// elementwise_bytes_per_token charges them:
//  - kTensorwise (torchao dynamic tensorwise scaling, torch.compile): every nn.Linear casts
//    its own input (torchtitan's Llama: wq, wk, wv each cast the normed x; w1 and w3 too)
//    and its output gradient; each cast reads the bf16 tensor for its amax (2), reads it
//    again and writes fp8 twice, row- and column-major (2 + 1 + 1): 6 bytes per element
//    (roofline_utils.py, tensorwise, not fused with the previous op). torchao's README says
//    torch.compile's cast kernels fall short of that roofline; their achieved fraction of
//    HBM peak, kTensorwiseCastEfficiency, is the one constant fitted here (below).
//  - kDelayed (Transformer Engine): scales come from the amax history, so no pass reads a
//    tensor for its amax; QKV and the fused FFN up/gate projection take their input from
//    LayerNormLinear / LayerNormMLP, whose norm kernel writes fp8 itself (the column-major
//    copy for the weight gradient: read 1, write 1); the output projection's and FFN down
//    projection's inputs and every output gradient go through cast_transpose (read 2, write
//    1 + 1). At 0.92 of HBM peak: roofline_utils.py's pct_achievable_mem_bw for pointwise
//    kernels over large inputs.
//  - kCurrent (Transformer Engine's Float8CurrentScaling): the scale comes from the tensor
//    itself, so every quantized tensor is read twice, for its amax and for the cast, and on
//    Hopper written row- and column-major (TransformerEngine docs/features/
//    low_precision_training/fp8_current_scaling/fp8_current_scaling.rst @ 41f6cbf1:
//    "requires reading the tensor twice"; "On Hopper, columnwise usage requires a physical
//    transpose"): 6 bytes per element, the norm no longer writing fp8 itself. TE's fused
//    GEMMs cast each input once (QKV and the FFN up/gate projection each read the normed x
//    once), every output gradient too; at kDelayed's 0.92 (TE's kernels either way).
double fp8_cast_bytes_per_token_layer(const ModelSpec& m, Fp8Recipe recipe);

// Bytes per element of a TP all-gather (tensor_parallel.h; its reduce-scatters keep
// `element_bytes`): 1 under every fp8 recipe, since both stacks cast before they gather.
//  - kTensorwise: torchtitan's float8 TP plan uses torchao's Float8ColwiseParallel,
//    Float8RowwiseParallel and PrepareFloat8ModuleInput (pytorch/ao
//    torchao/float8/float8_tensor_parallel.py @ 0e0fba8f): the input of the QKV and FFN
//    up/gate projections is cast to float8 before its all-gather, and the gradient reaching
//    the output and down projections (_NoopFwToFloat8BwDynamic, after the reduce-scatter in
//    the forward) before the backward's all-gather.
//  - kDelayed, kCurrent: Transformer Engine's sequence-parallel modules (NVIDIA/
//    TransformerEngine transformer_engine/pytorch/module/layernorm_linear.py and linear.py
//    @ 3ec87875, layernorm_mlp.py @ 62a84b3c, base.py @ fecb10bd): the norm writes its
//    output in fp8 (`ln_out_dtype = torch.uint8 if fp8`) before gather_along_first_dim,
//    a Linear casts its input first, and grad_output_preprocess casts the output gradient
//    before the backward's gather; the reduce-scatters take the GEMM output in the
//    activation dtype. With --tp-comm-overlap the all-gather userbuffers are fp8 too
//    (initialize_ub: `fp8_buf = name in layers_all_gather_overlap`). TE 2.x keeps this
//    through its quantizers (gather_along_first_dim(..., quantizer=...), _all_gather_fp8).
int tp_gather_element_bytes(Fp8Recipe recipe, int element_bytes);

// torchao tensorwise casts' achieved fraction of HBM peak: fitted so the whole step model
// gives torchao's published float8 speedup for torchtitan's Llama 3 8B on 8 H100
// (torchao/float8/README.md @ 9519bebbc397d60274982a74c084f9dff18e61a6, "Training
// benchmarks": 6150 -> 7689.5 tokens/s, 1.2503x; priced 1.2492x; tests/planner/
// linear_precision_test.cc holds it to 2 %). Outside validation/published.yaml, so no corpus
// entry is fitted by it. Priced on Meta's 500 W H100 type (grand-teton-h100-96gb) as
// torchtitan's run: the README names no machine, and its bf16 6150 prices at +5 % there,
// -13 % on the H100 SXM type (dgx-h100-ib); validation/README.md has its history.
inline constexpr double kTensorwiseCastEfficiency = 0.30;
// Transformer Engine's casts (delayed and current scaling): roofline_utils.py's
// pct_achievable_mem_bw.
inline constexpr double kTransformerEngineCastEfficiency = 0.92;

}  // namespace rm
