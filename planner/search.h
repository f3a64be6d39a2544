// The plan search: over the pipeline-parallel degree and its virtual stages (pp, v:
// pipeline_parallel.h; step workloads), the tensor-parallel degree (tp, with sequence
// parallelism, inside a node: tensor_parallel.h), the context-parallel kind (cp_comm_type: the p2p ring, all_gather,
// a2a, a2a+p2p with its a2a degree), ring size and DP degree (tp·cp·dp = G), schedule, ring order, causal load balance, tile sizes,
// KV sub-blocks, checkpointing, micro-batch and data-parallel sharding level (ddp, zero1,
// zero2, fsdp, hsdp: data_parallel.h), the fastest plan (highest tokens/s on the same batch)
// that fits in GPU memory, with the baselines on the same job; and the capacity search
// (--max-seq). Schedule, order, load balance and KV sub-blocks are the ring's (p2p);
// all_gather runs zigzag chunks (causal) and a2a contiguous ones, as Llama 3 and
// DeepSpeed-Ulysses do; a2a+p2p a flat zigzag ring over node-major a2a groups.
//
// Pins restrict the search to the user's choice. A pin that cannot work at all
// (divisibility, heads, tile too big, schedule shape) throws InputError with the reason;
// one that works but does not fit in memory gives the least-memory such plan with
// fits = false and why_not set: never a silent replacement.
//
// Pruning (exact under the cost model, so the pick is the same as the full sweep's):
// checkpointing is tried none -> selective -> full and stops at the first that fits
// (each adds recompute and nothing else), kv_subblocks > 1 only when pinned (more
// messages, the same bytes), micro-batches from 1 up while they fit (each adds stored
// activations), virtual stages for each micro-batch count (each adds in-flight
// activations, and v > 1 needs grad_accum a multiple of pp), sharding levels other than
// fsdp only where their memory fits and fsdp leaves data-parallel time exposed (search.cc's
// offer_micro_batches says why that is exact), a2a+p2p (searched last) only where its bound
// with free ring transfers beats the best plan of the other kinds. With pp > 1 the order is
// the tp-cp-dp-pp rank order. `candidates` counts every combination the search covered,
// `evaluated` those it priced (bounds not counted).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/plan.h"

namespace rm {

struct SearchPins {
  std::optional<Strategy> cp_comm_type;  // kRing (p2p), kAllGatherCp, kUlysses, kUsp (a2a+p2p)
  std::optional<int> tp;  // tensor-parallel degree (tensor_parallel.h); searched over kTensorParallelDegrees
  std::optional<bool> tp_comm_overlap;  // TP collectives overlapped in chunks (tp > 1; both searched)
  std::optional<int> cp;
  std::optional<int> dp;  // data-parallel degree: with tp and pp it sets cp = G / (tp x pp x dp)
  std::optional<int> cp_a2a;  // a2a+p2p's a2a degree (Megatron's first hierarchical CP size)
  std::optional<Schedule> schedule;
  std::optional<std::string> order;  // "node-major", "snake", "searched"
  std::optional<LoadBalance> load_balance;
  std::optional<int> block_q;
  std::optional<int> block_kv;
  std::optional<int> kv_subblocks;
  std::optional<Checkpointing> checkpointing;
  std::optional<int> micro_batch;
  std::optional<Sharding> sharding;  // ddp, zero1, zero2, fsdp, hsdp (data_parallel.h)
  // Pipeline stages and virtual stages per stage (pipeline_parallel.h); searched over
  // kPipelineParallelDegrees and kVirtualStages.
  std::optional<int> pp;
  std::optional<int> virtual_stages;
  // The pipeline split's accounting (PlanChoice); searched neither and both counted.
  std::optional<bool> account_for_embedding_in_pipeline_split;
  std::optional<bool> account_for_loss_in_pipeline_split;
  // Why a framework cannot run a candidate ("" when it can; `plan --target`:
  // export_refusal). Refused candidates are neither priced nor offered, so the search's
  // pick is the best plan the framework runs whichever of its rules (sharding,
  // checkpointing, order, kind) a faster plan breaks; when every candidate is refused the
  // search's error names the refusals. Empty: every candidate runs.
  std::function<std::string(const Job&, const PlanChoice&)> refusal;
};

struct SearchStats {
  int64_t candidates = 0;
  int64_t evaluated = 0;
};

// Tile sizes the search tries for block_q and block_kv (those that also fit on chip):
// the ones every backend really runs. The CUDA forward kernel is instantiated for 64 and
// 128 (executor/cuda/attention_kernels.cuh) and the Eigen kernels run any size, so a
// searched plan never asks for a tile that a GPU would silently round. A pin (--block-q)
// may still ask for another size; measurements record what ran (Backend::tiles_run).
inline constexpr int kTileSizes[] = {64, 128};
inline constexpr int kKvSubblocks[] = {1, 2, 4};
// Sequences per micro-step the search tries for step workloads (those up to the
// sequences each ring has in a step): powers of two, as frameworks' configs use.
inline constexpr int kMicroBatches[] = {1, 2, 4, 8, 16};

class Planner {
 public:
  Planner(const ModelSpec& model, const Fabric& fabric, const CostParams& cost);
  const Fabric& fabric() const { return fabric_; }

  // The fastest plan for `job` over every CP kind (fits preferred), with baselines filled.
  // The plan's job.batch_tokens is the effective batch: whole sequences of the requested
  // batch (default 2M tokens), at least one; every candidate is priced on it.
  Plan plan(const Job& job, const SearchPins& pins = {}, SearchStats* stats = nullptr);
  // The best plan over the CP kinds (no baselines): what plan() and the benchmark time.
  // Pipeline stages are searched with the rest (step workloads), as every other dimension.
  Plan best_plan(const Job& job, const SearchPins& pins, SearchStats* stats = nullptr);
  // The p2p ring plan alone; a cp_comm_type pin of another kind is an InputError.
  Plan best_ring_plan(const Job& job, const SearchPins& pins, SearchStats* stats = nullptr);
  // The best all_gather, a2a or a2a+p2p plan (`kind`), over cp >= 2 (a2a+p2p: and its a2a
  // degree), tiles, checkpointing and micro-batches; throws InputError with the reasons when none is valid.
  // `to_beat` > 0: the tokens/s of a fitting plan already found; a2a+p2p candidates that
  // cannot beat it even with free ring transfers are not priced (nor their ring's
  // link-sharing solved): exact pruning, the search's pick is the same.
  Plan best_collective_cp_plan(Strategy kind, const Job& job, const SearchPins& pins,
                               SearchStats* stats = nullptr, double to_beat = 0);
  // Flash-fsdp, all-gather CP and Ulysses on the same job, each at its best degree and
  // checkpointing (tp = 1: the plans without tensor parallelism).
  std::vector<Baseline> baselines(const Job& job);
  // When `picked` has tp > 1 and tp was not pinned: the best plan with tp = 1 under the
  // same pins, so the report shows what tensor parallelism buys (memory or time).
  std::optional<Baseline> best_without_tp(const Plan& picked, const SearchPins& pins);
  // The longest sequence that fits (powers of two, then refined on multiples of 2·G so
  // every ring size and zigzag divide it) and its plan. Throws InputError if not even
  // 2·G tokens fit.
  Plan max_seq(const Job& job, const SearchPins& pins = {}, SearchStats* stats = nullptr);
  // The same search with `plan_of` giving each length's plan (e.g. plan_for_target's);
  // a length it throws InputError for does not fit.
  Plan max_seq(const Job& job, const std::function<Plan(const Job&)>& plan_of);

  // The named orders for a ring size and schedule ("node-major", "snake", "searched").
  std::vector<std::pair<std::string, std::vector<int>>> orders(int cp, Schedule schedule,
                                                               const SearchPins& pins);

  CostModel& cost_model() { return cost_; }

  // Hears, as the search moves to another CP kind, stage shape or ring size, a line for people saying
  // what it prices next, so that a long search (thousands of GPUs) can show progress. None
  // by default.
  void set_progress(std::function<void(const std::string&)> progress) { progress_ = std::move(progress); }

 private:
  // Tells progress_ that the search prices `kind` at ring size cp of stage shape `shape`
  // of `shapes` next.
  void searching(Strategy kind, int pp, int tp, int cp, size_t shape, size_t shapes) const;
  // The TP degrees to search (pinned, or kTensorParallelDegrees that divide the model's
  // heads and the GPUs and fit a node); `note` hears why a pinned one cannot work.
  std::vector<int> tp_degrees(const SearchPins& pins, const std::function<void(const std::string&)>& note) const;
  // The pipeline degrees to search for `job` (pinned, or kPipelineParallelDegrees that
  // divide the GPUs and leave each stage a layer; 1 only for attention and layer workloads).
  std::vector<int> pp_degrees(const Job& job, const SearchPins& pins,
                              const std::function<void(const std::string&)>& note) const;
  ModelSpec model_;  // a copy, as CostModel keeps one: callers may pass a temporary
  const Fabric& fabric_;
  CostModel cost_;
  // Searched orders per (cp, bidirectional).
  std::vector<std::tuple<int, bool, std::vector<int>>> searched_;
  std::function<void(const std::string&)> progress_;
};

// Whether a plan predicted `a` is the better pick over one predicted `b`: one that fits over
// one that does not; of two that fit, the higher tokens/s (by more than a relative 1e-9, so a
// tie keeps `b`, the earlier); of two that do not, the one needing less memory.
bool better_pick(const Prediction& a, const Prediction& b);

// Divisors of n, ascending.
std::vector<int> divisors(int n);

}  // namespace rm
