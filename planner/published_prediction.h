// What ringmaster predicts for a published measurement (planner/published_corpus.h): the
// entry mapped to what the planner prices, priced with the shipped (uncalibrated) constants,
// and the prediction converted into the figure the source published.
//
// Mapping, exactly as the source ran it and never guessed:
//   topology   the entry's `topology` when it names one (its cluster), else by `gpu`: one box when the run fits in one (a100-80gb -> a100-nvlink-box),
//              else the multi-node cluster (dgx-a100-ib, dgx-h100-ib, dgx-h200-ib, dgx-b200-ib, dgx-gb200-nvl72,
//              dgx-a100-40gb-ib, grand-teton-h100-96gb); h800 -> h800-nvlink-box (one node only)
//   job        gpus, seq_len, causal, workload (step | attention), passes; batch tokens =
//              global_batch x seq_len (attention: one sequence per DP rank)
//   plan       pinned through the planner's own pin path (SearchPins, best_ring_plan): the
//              ring with cp = the entry's cp (cp 1 is the planner's "no CP" ring), dp =
//              gpus / cp, flat schedule in node-major order, load balance from cp_kind
//              (ring -> contiguous, zigzag, striped), the entry's checkpointing; tiles are
//              the planner's pick (the sources' kernels choose their own; for the attention
//              workload the fastest: the planner's step memory does not apply to a kernel
//              benchmark); a step's micro_batch (sequences per data-parallel replica
//              per micro-step), so grad_accum = global_batch / (dp x micro_batch);
//              precision fp8: float8 linear layers at the GPU's fp8 rate
//              (linear_precision.h).
// An entry the planner cannot express yet is not modelled, with every reason that applies:
// fp8 on a GPU without an fp8 rate, cp_kind a2a+p2p, a GPU without a topology (or more
// GPUs than it holds), sharding other than FSDP, unstated checkpointing of a step, a FLOP
// figure whose formula the entry does not state.
// Where a step's source is silent on something the planner needs (micro-batch: the planner's
// pick; global batch: its 2M-token default; sharding: FSDP), that is used and listed in
// `assumed`.
//
// Metrics from the prediction (G = the entry's GPUs, T = the predicted step, i.e. one
// optimizer step, or one call of the attention function for the attention workload):
//   tokens_per_s_per_gpu  tokens per step / T / G
//   iterations_per_s      1 / T; an attention call over micro_batch sequences takes
//                         micro_batch x the planner's one-sequence time
//   tflops_per_gpu, mfu   the SOURCE's FLOPs per step / T / G (mfu in % of the topology's
//                         peak, as the sources print it); the formula is recognised in the
//                         entry's `definitions` (FlopConvention below)
//   gib_per_gpu           the memory model's total per GPU, in GiB
// error = (published - predicted) / predicted, the one sign convention of every ringmaster
// error ((measured - predicted) / predicted): positive when the real run is the larger figure.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/published_corpus.h"
#include "planner/topology.h"

namespace rm {

// How a source counts FLOPs for its TFLOP/s and MFU figures.
//   kMegatron         Megatron-LM's model FLOPs (llm-foundry, FlashAttention-2's Table 1):
//                     6·N·params + 12·L·hidden·N² per sequence; attention not halved for
//                     the causal mask; params count the embedding once (tied, as GPT-3 XL
//                     and MPT have it); no recompute.
//   kAttentionKernel  the FlashAttention kernel papers: forward 4·N²·d·h per sequence
//                     (halved when causal), backward 2.5x forward.
enum class FlopConvention { kMegatron, kAttentionKernel };

// The convention an entry's `definitions` text states (its formula, spaces ignored), or none.
std::optional<FlopConvention> flop_convention(const std::string& definitions);
double megatron_flops_per_sequence(const ModelSpec& m, int64_t seq_len);
// One layer's attention, `passes` as run.
double attention_kernel_flops_per_sequence(const ModelSpec& m, int64_t seq_len, bool causal, Passes passes);

struct PublishedCheck {
  bool modelled = false;
  std::vector<std::string> not_modelled;  // why not (every reason), when !modelled
  std::vector<std::string> assumed;       // defaults taken where the source is silent
  std::string topology;                   // the shipped topology priced on
  Plan plan;                              // the pinned plan and its prediction
  double predicted = 0;                   // in the entry's metric
  double error = 0;                       // (published - predicted) / predicted
  // What the plan was priced with, when modelled (the entry's kernel and fp8 rate applied
  // to the topology; K,V repeated as the entry says): to show the plan (validate --entry).
  ModelSpec model;
  Topology priced_topology;
  CostParams cost;
};

// The corpus GPU type (a100-80gb, h100-80gb, ...) whose shipped topology (the mapping above)
// has exactly this GPU spec, name and every constant; nullopt for a GPU described or changed
// by hand, which no published run checks.
std::optional<std::string> corpus_gpu_type(const GpuSpec& gpu);

// Maps, prices and converts one entry. Throws InputError (naming the entry) only for a model
// or topology it names that cannot be loaded; what the planner cannot express is a not-modelled reason.
PublishedCheck check_published(const PublishedEntry& e);

}  // namespace rm
