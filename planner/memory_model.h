// THE memory model: bytes per GPU of a plan (DESIGN.md "Memory model"). The schedule
// generator allocates exactly the buffers of RingBuffers with these sizes, so the
// simulator's tracked peak equals MemoryBreakdown::total().
//
// Shapes: c tokens per rank (N / P), d head dim, h / h_kv heads, e element bytes (2 bf16),
// f FFN hidden, V vocab, L layers.
//
// Lifetimes (what the schedule generator emits, and why the peak is what it is):
//   static        model states + layer buffers + runtime reserve, live all run
//   activations   stored per layer at its forward, freed after its backward; all L
//                 layers' are live when the backward starts (at the logits / last layer)
//   backward of a layer, on top of that, the largest of three phases:
//     attention   recompute (full only) + grad_stream + kv ring buffers + dK,dV
//                 accumulators + partial dK,dV + dQ + dout + delta + score tiles
//     FFN         recompute (full only) + grad_stream + ffn_chunk
//     logits      grad_stream + logits_chunk
//   The forward's transient buffers (kv ring buffers, fp32 out accumulator) are smaller
//   than the backward's, so the peak is the backward of the last layer.
#pragma once

#include <algorithm>
#include <cstdint>

#include "planner/attention_work.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// Tokens per chunk of the blockwise FFN and of the chunked logits + loss: bounded
// transient memory whatever c is (Ring Attention computes its FFN and loss blockwise for
// the same reason; chunked cross-entropy as in Liger's fused linear cross-entropy). With
// Job::chunked_loss false the loss holds the whole micro-step's logits instead, in as many
// copies as the framework's loss keeps at once (whole_loss_bytes_per_logit).
inline constexpr int64_t kFfnChunkTokens = 8192;
inline constexpr int64_t kLogitsChunkTokens = 4096;
// How a whole loss (Job::chunked_loss false) is computed, which decides what it holds at
// its peak: the one place that reads the framework, the compile flag and TP for it.
enum class WholeLoss { kFp32Pair, kEagerPytorch, kLossParallel, kCompiled, kMegatron };
WholeLoss whole_loss(Framework framework, bool compiled, int tp);
// Bytes per logit (token x vocabulary entry of one TP member) at the peak of a whole loss
// over .float() logits, as each framework computes it:
//  - kEagerPytorch, 12: torchtitan's F.cross_entropy(pred.flatten(0, 1).float(), labels) runs
//    eager (its loss is not compiled) and frees the bf16 logits before backward; log_softmax
//    saves its fp32 output (pytorch/pytorch tools/autograd/derivatives.yaml @ d327a787:
//    `_log_softmax: self: _log_softmax_backward_data(grad, result, ...)`), nll_loss's
//    backward writes a dense fp32 gradient of it, and log-softmax's backward a third fp32
//    tensor, the logits' gradient: three fp32 copies at the backward's start.
//  - kLossParallel, PyTorch with TP (`loss_parallel`, torchtitan's default over a TP mesh), 16: DTensor's
//    loss-parallel ops replace both passes (torch/distributed/tensor/parallel/loss.py): the
//    forward's `_log_softmax` writes `shifted` and `result` beside the fp32 input, and the
//    fused `_nll_loss_and_log_softmax_backward` holds the saved log-softmax, `grad_input =
//    zeros_like(x)`, `grad_input + exp(x)` and its product with the output gradient: four
//    fp32 tensors at once.
//  - kCompiled (Job::compiled_loss, any framework but Megatron's), 2e: torch.compile fuses the .float() upcast, the
//    log-softmax and the NLL, so no fp32 copy of the logits is ever written; the bf16
//    logits and their bf16 gradient remain (allenai/open-instruct PR #584: compiled, the
//    log-softmax "requires ... negligible" memory beyond the logits; meta-pytorch/torchtune
//    PR #1390: the upcast compiled with the loss). torchtitan compiles its loss with the
//    model since torchtitan/components/loss.py build_cross_entropy_loss (--compile); its
//    December 2024 train.py did not ("TODO: compiling loss function causes CUDA errors").
//    Megatron-Core's loss is not compiled: compiled is ignored for kMegatron.
//  - kMegatron, 4 + e: Megatron-Core's vocab_parallel_cross_entropy casts the logits to
//    fp32 once and subtracts the max in place ("In-place subtraction reduces memory
//    pressure."), turns that copy into the softmax in place, saves it and writes the
//    gradient into it (NVIDIA/Megatron-LM megatron/core/tensor_parallel/cross_entropy.py,
//    VocabParallelCrossEntropy, which megatron/core/fusions/fused_cross_entropy.py @
//    d086a2e3 calls too): the logits and one fp32 copy. (Before that, @ 8e6e7cd7, the
//    subtraction made a second fp32 copy.)
//  - kFp32Pair, no framework named (Framework::kAny), 8: the fp32 logits and their gradient.
double whole_loss_bytes_per_logit(WholeLoss loss, int element_bytes);
// Mixed-precision Adam's states per parameter, K: the master copy and the moments m and v
// as OptimizerStates (plan.h) says. By default fp32 all, K = 12 (ZeRO paper, Rajbhandari et al. 2020, Sec.
// 3.1; params and grads at the GPU's element bytes e: bf16 2 + 2 + 12 = 16 bytes in all).
// The master as remainders takes 2 bytes (the 16 bits of the fp32 value that the bf16 param
// lacks: Transformer Engine's FusedAdam store_param_remainders, apex DistributedFusedAdam's),
// as fp16 2; a moment 4 (fp32), 2 (fp16, bf16) or 1 (fp8, its per-tensor scale aside).
constexpr double state_dtype_bytes(StateDtype d) {
  return d == StateDtype::kFp32 ? 4 : d == StateDtype::kFp8 ? 1 : 2;
}
constexpr double optimizer_state_bytes(const OptimizerStates& o) {
  return (o.store_param_remainders ? 2 : state_dtype_bytes(o.main_params_dtype)) + state_dtype_bytes(o.exp_avg_dtype) +
         state_dtype_bytes(o.exp_avg_sq_dtype);
}
// What a parameter's states beside its weight take, in bytes: its gradient (`grads`,
// data_parallel.h grad_element_bytes; 0: the GPU's element bytes) and Adam's states
// (`optimizer`, optimizer_state_bytes; fp32 states by default).
struct StateBytes {
  int grads = 0;
  double optimizer = optimizer_state_bytes(OptimizerStates{});
};
// The job's: grad_element_bytes (data_parallel.h) and optimizer_state_bytes.
StateBytes job_state_bytes(const Job& job, const PlanChoice& choice, int element_bytes);
// Why optimizer states cannot be kept so, or "": store_param_remainders needs
// fp32 master params (the remainder completes a bf16 param to fp32) and a GPU whose element
// type is bf16 (`element_bytes` 2; 0: not known yet, as when a plan file is read).
std::string optimizer_states_why_invalid(const OptimizerStates& o, int element_bytes);
// Whether Adam's states are other than all fp32: Megatron-Core's
// precision-aware optimizer (--use-precision-aware-optimizer).
bool precision_aware_optimizer(const OptimizerStates& o);
// PyTorch's caching allocator holds more than the live tensors at their peak: blocks split
// for smaller requests, freed blocks of sizes the next requests cannot reuse. Its peak
// reserve over its peak allocation (torch.cuda.max_memory_reserved / max_memory_allocated)
// in three public readings: NVIDIA/Megatron-LM PR #6885 (Megatron-FSDP, 42 layers:
// 221,706 / 203,504 MiB = 1.089), pytorch/pytorch PR #89457 (FSDP hf_T5 on 2 GPUs, eager
// 18.77 / 17.81 GB = 1.054, inductor 17.03 / 14.72 GB = 1.157). Their median, rounded; not
// fitted on the published corpus (validation/README.md, "The caching allocator's reserve").
// Under pressure the allocator frees its cached blocks and retries before it fails
// (CUDACachingAllocator's release_cached_blocks), so the cache fills at most what the
// device has left and a plan fits on what its tensors need (MemoryBreakdown::total).
inline constexpr double kAllocatorCacheFraction = 0.09;

// How many GPUs each of the model states is split over, per TP rank (the ZeRO paper's N_d;
// Fig. 1 and Sec. 5): data = cp·dp GPUs of the rank; hsdp's shard group = cp·dp_shard.
//            params   grads    optimizer
//   ddp      1        1        1           (2 + 2 + K)·Ψ
//   zero1    1        1        N_d         (2 + 2)·Ψ + K·Ψ / N_d           ZeRO P_os
//   zero2    1        N_d      N_d         2·Ψ + (2 + K)·Ψ / N_d           ZeRO P_os+g
//   fsdp     N_d      N_d      N_d         (2 + 2 + K)·Ψ / N_d             ZeRO P_os+g+p
//   hsdp     N_s      N_s      N_s         (2 + 2 + K)·Ψ / N_s, N_s = cp·dp_shard
struct StateShards {
  int params = 1, grads = 1, optimizer = 1;
};
StateShards state_shards(const PlanChoice& choice);
// hsdp's shard group (cp·dp_shard GPUs of one TP rank), or all cp·dp for the other levels.
int shard_group_gpus(const PlanChoice& choice);

// Sizes in bytes, per GPU, of the buffers one layer's ring attention and its neighbours
// use. Counts say how many of each the schedule allocates.
struct RingBuffers {
  int64_t c = 0;            // tokens of the sequence this GPU computes attention for
  double q = 0;             // c·h·d·e           (stored activation; listed for the generator)
  double kv_block = 0;      // 2·c·h_kv·d·e       one K,V block (own or ring buffer)
  double dkv_block = 0;     // 2·c·h_kv·d·4       one dK,dV accumulator, fp32
  double dkv_partial = 0;   // 2·c·h_kv·d·4       the kernel's partial dK,dV of one block
  double dq = 0;            // c·h·d·4            dQ accumulator, fp32
  double out_acc = 0;       // c·h·d·4            forward running output, fp32
  double lse = 0;           // c·h·4              log-sum-exp, fp32 (stored activation)
  double dout = 0;          // c·h·d·e            gradient of the attention output
  double delta = 0;         // c·h·4              rowsum(dout ∘ out), fp32
  double score_tiles = 0;   // h · tile_bytes(block_q, block_kv, d)
  int kv_ring_buffers = 0;  // flat 2 (held + incoming), bidirectional and two-level 4
  int dkv_accumulators = 0; // traveling + incoming per stream: flat 2, bidi / hier 4
  // Strategy-specific gathered buffers (all-gather CP: the full sequence's K,V and dK,dV;
  // Ulysses: the all-to-all send + receive staging of Q,K,V).
  double gathered = 0;
  double grad_stream = 0;   // 2·c·hidden·e·batch incoming and outgoing residual grads
  double ffn_chunk = 0;     // t·(gated ? 3 : 2)·f·e·2 (values + grads); t = min(c, chunk)
                            // tokens, or all c where a framework runs the FFN whole
  // fp32 logits + their grads: min(c, chunk)·V·4·2 chunked; whole (Job::chunked_loss
  // false): micro_batch·c·V·whole_loss_bytes_per_logit
  double logits_chunk = 0;
  double recompute = 0;     // full checkpointing: the layer's rematerialised activations
  // Sequences whose layer transients are live at once: 1 in ringmaster's own loop over the
  // micro-step's sequences; a framework's (Job::framework) layer runs its whole micro-batch
  // in each kernel, so all micro_batch sequences' are.
  int batch = 1;

  double attention_backward_bytes() const;
  double ffn_backward_bytes() const { return recompute + grad_stream + ffn_chunk; }
  double logits_bytes() const { return grad_stream + logits_chunk; }
  // One sequence's pass through a layer's backward: its larger phase.
  double sequence_backward_bytes() const { return std::max(attention_backward_bytes(), ffn_backward_bytes()); }
  // A layer's backward over the sequences live at once: the residual gradients (already
  // the batch's) and batch x the rest of one sequence's.
  double layer_backward_bytes() const { return grad_stream + batch * (sequence_backward_bytes() - grad_stream); }
  // The largest phase (the "working set" of MemoryBreakdown).
  double working_set_bytes() const;
};

// Stored activations per token per layer (bytes) under a checkpointing policy:
//   none       attention part + FFN norm in/out + FFN intermediates
//              attention part = e·(2·hidden [norm in, out] + 2·h·d [Q, out] + 2·h_kv·d [K, V])
//                               + 4·h [lse]
//              FFN intermediates = e·(gated ? 3 : 2)·f (gate, up, activation output)
//   selective  the FFN intermediates are not stored but recomputed chunk by chunk in the
//              backward (their up/gate GEMMs again); ring attention is never recomputed
//   full       the layer input only (e·hidden); the backward reruns the whole layer
//              forward, ring attention included
// For llama2-7b (bf16): none ≈ 123 KB, selective ≈ 57 KB, full = 8 KB per token per layer.
// With tensor + sequence parallelism of degree tp every term is divided by tp (Korthikanti
// et al. 2022, Eq. 5; tensor_parallel.h). For a GPT-style layer (plain 4h FFN) `none` is
// Megatron's 34·h bytes per token less its two 1-byte dropout masks, plus our fp32 lse.
// `saved_input_bytes` (tp_saved_input_bytes): where a framework's column-parallel Linears save
// the two gathered norm outputs whole, at these bytes an element, instead of split tp ways.
double activation_bytes_per_token_layer(const ModelSpec& m, Checkpointing ckpt, int element_bytes,
                                        int tp = 1, int saved_input_bytes = 0);

// Bytes per element of the TP-gathered inputs a PyTorch-native framework's column-parallel
// Linears save whole for their backward, 0 where they are saved split tp ways (Megatron-Core
// gathers them again in the backward, Korthikanti et al. 2022) or tp is 1. torchtitan's TP
// plan hands the attention and the FFN their input all-gathered (PrepareModuleInput(
// input_layouts=Shard(1), desired_input_layouts=Replicate()), parallelize_llama.py), and the
// Linear saves what it received: bf16, or fp8 where torchao's Float8ColwiseParallel cast it
// before the all-gather (torchao float8 matmul_with_hp_or_float8_args saves its input as
// given): tp_gather_element_bytes.
int tp_saved_input_bytes(const Job& job, int tp, int element_bytes);

// The final hidden states a step holds for the head's backward, per token: split tp ways by
// sequence parallelism, or whole where the framework's TP saves its gathered inputs
// (`saved_input_bytes` > 0): torchtitan gathers them for the column-parallel output layer,
// whose Linear saves them in bf16 (torchtitan's float8 leaves `output` out, filter_fqns).
double final_hidden_bytes_per_token(const ModelSpec& m, int element_bytes, int tp, int saved_input_bytes = 0);

// What of the job, beyond the plan's choice, decides the buffers a layer holds; the
// defaults are ringmaster's own loop on full causal attention. layer_holding derives it
// from a Job (the cost model, the search, the schedule and the plan table all go through
// plan_memory or plan_ring_buffers, which ask it).
struct LayerHolding {
  // The job's effective sliding window (attention_work.h), 0 = none. K,V that no step needs
  // are not held: a contiguous ring cut to one step has no ring buffers, and all-gather CP
  // on contiguous chunks gathers only the window_blocks() a position attends to.
  int64_t window = 0;
  bool chunked_loss = true;               // Job::chunked_loss: the logits buffer's size
  Framework framework = Framework::kAny;  // Job::framework: whole micro-batch, whole loss
  bool compiled_loss = false;             // Job::compiled_loss
  int saved_input_bytes = 0;              // tp_saved_input_bytes: TP inputs saved whole
  bool backward = true;                   // Job::passes: a training step (a pipeline's gradient buffers)
};
LayerHolding layer_holding(const ModelSpec& m, const Job& job, int tp, int element_bytes);

// `m` is the whole model; with choice.tp > 1 the buffers are one TP member's (h/tp and
// h_kv/tp heads, f/tp FFN columns, V/tp vocabulary; tensor_parallel.h).
RingBuffers ring_buffers(const ModelSpec& m, const PlanChoice& choice, int64_t seq_len,
                         const GpuSpec& gpu, const LayerHolding& holding = {});

// Memory per GPU of a plan (choice.strategy decides the buffers: the ring, flash-fsdp
// with cp = 1, all-gather CP, Ulysses).
// With choice.tp > 1 every GPU holds one TP member's weights (Ψ = params / tp) and SP
// divides the activations by tp (tensor_parallel.h); the data-parallel sharding then
// splits over the cp·dp GPUs of a TP rank (fsdp: 16 B/param / (tp·cp·dp) in all).
//   model_states   e·Ψ/params + g·Ψ/grads + K·Ψ/optimizer shards (state_shards; g the
//                  gradients' bytes: e, or 4 where held in fp32, grad_element_bytes):
//                  parameters are the same on every rank of a ring (CP splits tokens, not
//                  weights), so ZeRO shards over all cp·dp GPUs, as Ring Attention's FSDP
//                  setup and Megatron's CP (which folds CP into the data-parallel group
//                  for grads and optimizer) do.
//   layer_buffers  fsdp, hsdp: (e + g)·2·max(layer params, V·hidden): the current and the
//                  prefetched unit's gathered params, the gradients being computed and
//                  those in the reduce-scatter; zero2: g·2·max(...): the unit's whole
//                  gradients being computed and those in the reduce-scatter (its params
//                  are held whole); ddp, zero1: 0 (whole gradients are model states).
//   activations    L·c·activation_bytes_per_token_layer + c·final_hidden_bytes_per_token
// With pipeline stages (choice.pp > 1, pipeline_parallel.h) each GPU holds its stage's
// share: model_states of its stage's parameters (pp_stage_params) over its cp·dp GPUs,
// and the stored activations of the micro-batches it has in flight (pp_in_flight chunk
// micro-batches of L / (pp·v) layers each); the stage with the largest sum is reported.
//   working_set    RingBuffers::working_set_bytes()
//   runtime_reserve  gpu.runtime_reserve_bytes
// and beside them, not in total(): allocator_cache, kAllocatorCacheFraction x the four
// above (MemoryBreakdown::live), at most what the device has left after total().
// `state`: the bytes of a gradient and of a parameter's optimizer states (StateBytes).
MemoryBreakdown memory_breakdown(const ModelSpec& m, const PlanChoice& choice, int64_t seq_len,
                                 const GpuSpec& gpu, const LayerHolding& holding = {}, StateBytes state = {});

// A layer's buffers as the job's framework holds them: ring_buffers with the job's
// layer_holding. The plan table asks this one; the schedule generator keeps the
// layer_holding it derives (its window and TP saved inputs too) and calls ring_buffers.
RingBuffers plan_ring_buffers(const ModelSpec& m, const Job& job, const PlanChoice& choice, const GpuSpec& gpu);

// A plan's memory as its framework runs it: memory_breakdown of as_run(job, choice) with the
// job's layer_holding and job_state_bytes. The cost model, the search and
// the schedule generator all ask this one.
MemoryBreakdown plan_memory(const ModelSpec& m, const Job& job, const PlanChoice& choice, const GpuSpec& gpu);

// model_states of pipeline stage `stage` (0 without a pipeline): its TP member's
// parameters (pp_stage_params) as the sharding level holds them, with `state`'s gradient and
// optimizer bytes. The schedule generator allocates each stage's own.
double stage_model_state_bytes(const ModelSpec& m, const PlanChoice& choice, int element_bytes, int stage,
                               StateBytes state = {});

}  // namespace rm
