// The data-parallel sharding levels (plan.h's Sharding) as the cost model prices them and
// the schedule generator emits them: which collectives each micro-step runs, and over
// which groups. One definition for both (memory_model.h has their bytes).
//
// Per unit (a layer, the embedding, the head) and micro-step k of K (grad_accum):
//   level   forward all-gather   backward all-gather   reduce-scatter   all-reduce
//   fsdp    every k              every k               every k          -
//   hsdp    every k (shard grp)  every k (shard grp)   every k (shard)  k = K-1 (replicas)
//   zero2   k = 0                -                     every k          -
//   zero1   k = 0                -                     k = K-1          -
//   ddp     -                    -                     -                k = K-1
// - fsdp is PyTorch FSDP FULL_SHARD / FSDP2 with reshard_after_forward=True (ZeRO-3).
// - zero2 and zero1 hold the params whole; the updated params are all-gathered once per
//   step, unit by unit ahead of the first micro-step's forward (Megatron's distributed
//   optimizer with --overlap-param-gather, which gathers in the next forward's pre-hooks).
//   zero2 reduce-scatters every micro-step's grads into its shard (ZeRO-2, and FSDP2 with
//   reshard_after_forward=False: no backward all-gather); zero1 accumulates whole grads and
//   reduce-scatters once, in the last micro-step's backward (Megatron --use-distributed-
//   optimizer with --overlap-grad-reduce).
// - ddp all-reduces each unit's grads (a bucket per unit) in the last micro-step's backward,
//   as it leaves the backward (PyTorch DDP's no_sync for the others, buckets overlapped).
// - In a pipeline each chunk's last reduce-scatter (and all-reduce) stays in flight behind
//   the stage's next actions, the next one waiting for it, as Megatron's and FSDP's
//   asynchronous gradient reduction runs; the stage's last is waited for before the
//   optimizer (schedule.cc pipeline_workload; the cost model's chunk_ends).
// - hsdp: FSDP over a shard group of cp·dp_shard GPUs of a TP rank, then each reduce-
//   scattered grad shard all-reduced over the dp / dp_shard replicas holding the same shard
//   (torchtitan's HSDP; once per step as with ddp, after the unit's last reduce-scatter).
// A collective's `bytes` is each member's shard: of one TP member's unit over the shard
// group for the all-gathers and reduce-scatters (unit / (tp·cp·dp) = unit / G, hsdp's
// unit / (tp·cp·dp_shard)); of that shard again over the replicas for hsdp's all-reduce,
// and of the unit over the cp·dp GPUs for ddp's (unit / G both).
// An all-reduce is priced and replayed as NCCL's ring all-reduce: a reduce-scatter then an
// all-gather over the same rings (twice the bytes and twice the ring steps).
#pragma once

#include <string>
#include <vector>

#include "planner/plan.h"

namespace rm {

// The searched levels, in the order the search tries them.
inline constexpr Sharding kShardingLevels[] = {Sharding::kFsdp, Sharding::kHsdp, Sharding::kZero2,
                                               Sharding::kZero1, Sharding::kDdp};

// Whether each unit's weights are gathered again in every micro-step: fsdp and hsdp over
// `data_gpus` (the cp·dp GPUs of a TP rank) > 1. Such a plan pays FSDP's per-unit work
// every micro-step, which the GEMM size curve prices (CostParams::gemm_flops_per_s).
bool regathers_weights(Sharding s, int data_gpus);
// The same for a plan: its level over its cp·dp GPUs (the cost model and the schedule
// generator ask it of the pp-flattened plan, dp·pp replicas: a pipeline of FSDP stages
// of one GPU each counts as regathering).
bool regathers_weights(const PlanChoice& ch);

// Whether a plan's linear GEMMs run on the GEMM size curve (CostParams::gemm_flops_per_s)
// rather than at its limit. The corpus says it is the framework's, not the sharding's
// (validation/README.md, "The GEMM size curve is the framework's"): Megatron-Bridge's FSDP run
// reaches the limit while regathering, FlashAttention-2's PyTorch DDP run with ZeRO-1 pays
// the curve with whole weights. So kMegatron never, kPytorch always, and a plan priced for no
// framework (kAny) where it regathers weights: FSDP plans are PyTorch's, whole-weight plans
// Megatron's distributed optimizer, the frameworks that run them.
bool pays_gemm_size_curve(const Job& job, const PlanChoice& ch);

// The level a plan runs with under its framework. PyTorch's pipelining (torchtitan with
// pipeline_parallel_degree > 1) keeps FSDP2's weights gathered through a step (torchtitan's
// apply_fsdp turns reshard_after_forward off with pp) and its gradients unsharded until the
// step's last micro-batch (torch.distributed.pipelining's _configure_data_parallel_mode syncs
// gradients and reshards only in the last backward): fsdp and zero2 then gather each unit
// once a step and reduce-scatter it once a step, as zero1 does. Every other plan runs its own
// level (hsdp takes no pipeline here: CostModel::why_invalid).
Sharding sharding_as_run(const Job& job, const PlanChoice& ch);
// The plan with that level: what the cost model prices, the search checks the memory of and
// the schedule generator emits (the plan file keeps the level the user asked for).
PlanChoice as_run(const Job& job, const PlanChoice& ch);
// Whether `f` accumulates and reduces a bf16 run's gradients in fp32 unless told otherwise:
// Megatron-LM (arguments.py forces accumulate_allreduce_grads_in_fp32 with --bf16 unless
// --grad-reduce-in-bf16; NeMo's and Megatron-Bridge's bf16_mixed set grad_reduce_in_fp32 =
// True) and torchtitan (mixed_precision_reduce = "float32"; Composer's DEFAULT mixed precision
// reduces in fp32 too). kAny: no (the ZeRO paper's accounting). `plan --target` and the
// corpus take it where the job does not say.
bool framework_grad_reduce_in_fp32(Framework f);
// Bytes per gradient element a plan's reduce-scatters and all-reduces move: 4 with
// Job::grad_reduce_in_fp32, else the GPU's element bytes.
int grad_reduce_element_bytes(const Job& job, int element_bytes);
// Bytes per element of the gradients a plan holds (memory_model.h's model states): in the
// reduce dtype (grad_reduce_element_bytes) where the framework keeps them so, Megatron's
// main_grad buffers (its README's 6 + 12/d bytes a parameter with the distributed optimizer
// and fp32 gradients) and FSDP2's unsharded gradients between a PyTorch pipeline's
// micro-batches (FSDPParam.to_accumulated_grad_if_needed: torchtitan's fsdp or zero2 with
// pp > 1, the zero1 it runs as). A PyTorch plan otherwise holds the GPU's element bytes: the
// ZeRO paper's 2 + 2 + 12, which PyTorch FSDP's fp32 shards (4 + 4 + 8) also add up to,
// whatever the reduce dtype. Asked of a plan or of its as_run: the same answer.
int grad_element_bytes(const Job& job, const PlanChoice& ch, int element_bytes);

// What a micro-step runs per unit (see the table above).
struct MicroStepCollectives {
  bool forward_gather = false;
  bool backward_gather = false;
  bool reduce_scatter = false;
  bool all_reduce = false;
  bool any() const { return forward_gather || backward_gather || reduce_scatter || all_reduce; }
};
// `micro` of `micro_steps`; `data_gpus` the cp·dp GPUs of a TP rank (1: no collectives).
MicroStepCollectives micro_step_collectives(Sharding s, int micro, int micro_steps, int data_gpus);

// hsdp's groups over a plan order of tp·cp·dp GPUs (ring d·tp + t at order[(d·tp + t)·cp ..],
// tensor_parallel.h): shard groups (TP rank t, replicas k·dp_shard .. (k+1)·dp_shard - 1:
// cp·dp_shard GPUs), then replicate groups (TP rank t, ring position i, replica offset j:
// the dp / dp_shard GPUs holding the same shard).
std::vector<std::vector<int>> hsdp_shard_groups(const std::vector<int>& order, int tp, int cp, int dp_shard);
std::vector<std::vector<int>> hsdp_replicate_groups(const std::vector<int>& order, int tp, int cp, int dp_shard);

// The dp_shard hsdp takes: the replicas of a TP rank that fill one node (gpus_per_node /
// (tp·cp), at least 1), or 0 when that leaves fewer than 2 replicas or does not divide dp.
int hsdp_dp_shard(int tp, int cp, int dp, int gpus_per_node);

// Why hsdp cannot run `ch` whatever its split, "" when it can: with pipeline stages its
// groups would be one stage's, with a2a+p2p its replica groups would cross the a2a groups;
// neither is priced and generated yet. The search leaves such plans out; the cost model
// refuses them.
std::string hsdp_why_not(const PlanChoice& ch);

}  // namespace rm
