// The closed-form cost model: step time of a plan, following the step structure of the
// schedule generator (schedule.h) so the simulator's replay agrees on contention-free
// cases. Lockstep per ring step:
//
//   step time = max(compute of the slowest position, transfer incl. latency and link
//               sharing) + CostParams::step_sync_s
//
// (max(c, x) is c + x - transfer_overlap·min(c, x): a calibrated transfer_overlap < 1 says
// the transfer only partly proceeds during compute, e.g. MPI without a progress thread.)
//
// Flat ring, per layer (P >= 2; c_own / c_off: step-0 / later-step compute, x: transfer):
//   forward   max(c_own, x_kv) + (P-2)·max(c_off, x_kv) + c_off            + P·sync
//   backward  max(b_own, x_kv) + (P-2)·(max(b_off, x_kv+dkv) + acc)
//             + max(b_off, x_dkv) + acc + x_dkv (accumulators home)      + P·sync
// with b = backward_factor x forward, acc the fp32 accumulate (memory bound: it adds into
// the accumulator received in the same step, so it follows its arrival), x_kv+dkv the K,V
// block and the accumulator sent in the same step. Bidirectional: ceil((P-1)/2)
// steps after step 0 with two blocks each (one in the last when P is even), transfers in
// both directions, accumulators sent straight home at the end; in the backward only the
// first block's compute hides the step's transfers (the second waits for the first's
// accumulator: one partial buffer). Two-level: n = P/g outer
// steps of g inner steps each; the outer transfer (all rails at once) hides behind the
// inner steps: outer step = max(inner steps, x_outer). kv_subblocks = m sends each
// transfer as m messages posted together: their latencies overlap and they share the
// links, so it is priced as one message (no gain; the search keeps it at 1 unless pinned).
//
// Linear layers (QKV, output projection, FFN) at GPU peak x gemm_efficiency, on the GEMM
// size curve of their micro-step (CostParams::gemm_flops_per_s), on c tokens;
// backward 2x forward, plus the recompute of the checkpointing policy (full: the whole
// layer forward, ring attention included). Logits once per micro-step. FSDP/ZeRO-3 per
// layer: all-gather of the layer's bf16 params before its forward and its backward (over
// every rail and NVSwitch at once, collective_pattern.h),
// reduce-scatter of its bf16 grads after the backward, prefetched so they overlap the
// layer's compute; only what exceeds it is exposed (minus the attention's own transfer
// time, ring steps, all-to-alls or CP all-gathers, when they cross links of the class the
// collectives bottleneck on: on a tie the ring's own bottleneck may be named on another
// class, e.g. a spine link, while it still loads the same NICs); where the attention's
// transfers take more than its compute leaves them (an all-to-all: all of its time), a
// collective running beside them lengthens the pass and advances in the share of the
// links it gets (max-min fair by flows: cost_model.cc PassShare). A step = grad_accum
// micro-steps (micro_batch sequences per ring each, one after another through every layer,
// under one gather and one reduce-scatter per layer) + the optimizer update (memory bound,
// on the GPU's optimizer shard). Other sharding levels (data_parallel.h) run their own
// collectives per micro-step the same way: ddp's all-reduce of each layer's grads in the
// last micro-step's backward, hidden behind the backward like the reduce-scatter (on links
// of another class than the shard group's, hsdp's all-reduce hides beside its
// reduce-scatter: the larger of the two is exposed); zero1 and zero2 gather only in the
// first micro-step's forward.
//
// Prediction fields (plan.h):
//   comm_overhead       exposed communication / step time, where exposed communication =
//                       step time - the same step with free communication (transfers,
//                       latencies, per-step sync and FSDP collectives all zero)
//   scaling_efficiency  free-communication step time / step time (= 1 - comm_overhead):
//                       throughput over what the same GPUs reach with free communication
//   mfu                 model FLOPs / (step time x G x peak), model FLOPs =
//                       6·(L·layer params + V·hidden)·tokens  [matmuls fwd + bwd]
//                       + 3·L·4·d·h·(unmasked pairs: N² or N(N+1)/2)·sequences
//                       [attention fwd + 2x bwd; causal halves it; recompute not counted]
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "planner/attention_work.h"
#include "planner/collective_pattern.h"
#include "planner/cost_params.h"
#include "planner/link_sharing.h"
#include "planner/memory_model.h"
#include "planner/model_spec.h"
#include "planner/pipeline_parallel.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// Transfer time of a traffic pattern, linear in the message size:
// seconds = latency_s + units x s_per_unit. Units are K,V elements of one block
// (2·c·d·h_kv) for ring patterns and bytes for collectives.
struct PatternCost {
  double latency_s = 0;
  double s_per_unit = 0;
  int bottleneck_link = -1;  // -1: no transfer
  int bottleneck_flows = 0;   // of its flows, those crossing that link
  int egress_flows = 0;       // of its flows, the most leaving one GPU by one link
  unsigned link_classes = 0;  // bit 1 << LinkClass for every class its flows cross
  double time(double units) const { return bottleneck_link < 0 ? 0.0 : latency_s + units * s_per_unit; }
};

// The ring's traffic patterns for one (cp, dp, schedule, order): all rings at once, with
// link sharing. They do not depend on tiles, load balance or checkpointing, so the search
// computes them once per (cp, schedule, order).
struct RingPatterns {
  PatternCost kv;         // a step's K,V transfer(s) (two-level: inner, beside the outer)
  PatternCost kv_dkv;     // a backward step: K,V and the previous step's accumulator
  PatternCost dkv;        // the accumulator alone (last step; flat: also the way home)
  PatternCost kv_single;  // bidirectional: one direction only (last step when P is even)
  // Bidirectional backward steps: [K,V directions][accumulator directions], 0 = none,
  // 1 = clockwise only, 2 = both (the streams start and end a step apart).
  PatternCost bidi[3][3];
  PatternCost home;       // after the last backward step: accumulators to their owners
  PatternCost outer_kv;   // two-level outer transfers
  PatternCost outer_kv_dkv;
  PatternCost outer_dkv;
  bool two_level = false;
  // The forward's K,V transfer (two-level: the outer one, beside the inner steps).
  const PatternCost& forward() const { return two_level ? outer_kv : kv; }
};

// One pass's attention, one sequence's, in order, as the data-parallel collectives see it
// (CostModel::price shares its links with them): each phase lasts `seconds` alone,
// computing `compute` while its transfers (`transfer`'s pattern) keep their links busy
// `busy` seconds (a ring's steps summed; an all-to-all or a CP all-gather computes nothing
// beside it).
struct AttentionPhase {
  double seconds = 0, compute = 0, busy = 0;
  PatternCost transfer;  // none for compute alone
};
struct AttentionPhases {
  // a2a+p2p's: a copy, an all-to-all and a copy each side of the ring, and the ring's two
  // (the backward's: the ring, then its accumulators' way home)
  std::array<AttentionPhase, 8> at{};
  int n = 0;
  void compute(double s) { add({s, s, 0, {}}); }
  void add(const AttentionPhase& p);  // skips empty phases, merges consecutive compute
  double seconds() const;
  double busy_on(unsigned link_class_bits) const;  // of the phases crossing those classes
};

// Per-layer time parts of one micro-step (one sequence per ring), seconds.
struct LayerTimes {
  double attention_fwd = 0, attention_bwd = 0;  // ring attention incl. its transfers
  double attention_compute_fwd = 0;             // compute part of the forward
  double attention_compute = 0;                 // compute parts of the two (and recompute)
  AttentionPhases phases_fwd, phases_bwd;       // one sequence's; the backward's without recompute
  double linear_fwd = 0, linear_bwd = 0;        // incl. recompute
  double tp_fwd = 0, tp_bwd = 0;                // TP all-gathers and reduce-scatters (recompute's too)
  // The layer's time, both passes: ring attention, linear layers, TP collectives.
  double total() const { return attention_fwd + attention_bwd + linear_fwd + linear_bwd + tp_fwd + tp_bwd; }
};

// A pattern's flows per link it crosses, sorted by link.
using LinkFlows = std::vector<std::pair<int, int>>;

// An all-gather or reduce-scatter run by every group of a partition of the GPUs at once
// (collective_pattern.h's two rings per group, links shared): FSDP's groups, or the TP
// groups inside the nodes.
struct GroupCollective {
  PatternCost rail, node;  // the ring across nodes (per rail) and the one inside a node
  int rail_steps = 0, node_steps = 0;
  RingStepLatency step_latency;  // each further ring step's, the slowest group's
  double peers = 0;        // members - 1 of the largest group
  LinkOverride fitted;     // CostParams::collectives: when calibrated, time() is its model
  // Seconds for one collective of `bytes_per_gpu` (each GPU's shard). `passes` 2: NCCL's
  // ring all-reduce, a reduce-scatter then an all-gather over the same rings.
  double time(double bytes_per_gpu, int passes = 1) const;
  double all_reduce_time(double bytes_per_gpu) const { return time(bytes_per_gpu, 2); }
  std::array<LinkFlows, 2> link_flows;  // each ring's (rail, node), by link
  int bottleneck_link() const;
  const PatternCost& bottleneck() const;  // the ring (rail or node) bottleneck_link is of
  // The other ring, whose flows end before the bottleneck ring's: time to spare
  // (bottleneck_link -1 where the group has no such ring).
  const PatternCost& slack() const;
  int flows_on(int link) const { return flows_on(bottleneck(), link); }  // the bottleneck ring's
  int flows_on(const PatternCost& ring, int link) const;                  // `ring`'s flows crossing `link`
  // Whether a flow of this pattern and one of `other` cross a common link.
  bool shares_links(const GroupCollective& other) const;
};

// A micro-step's forward all-gathers of the weights (data_parallel.h's table): each layer's
// exposed remainder behind the previous layer's forward, and at a chunk's or micro-step's
// start the first one's, exposed (`first_end` at the model's start, after the embedding's,
// which runs first on the same communicator). Also what micro-batch 0 pays beyond its mean
// share of them in a pipeline (CostModel::pipeline_step).
struct ForwardGathers {
  double per_layer = 0, first_end = 0, other_end = 0;
  // In a pipeline, a layer's share of them over every micro-step, which the mean share
  // charges each layer: a chunk's last layer prefetches nothing, but on the model's last
  // chunk, the head's (schedule.cc pipeline_workload).
  double mean_per_layer = 0;
  double end(bool first) const { return first ? first_end : other_end; }
};

// What a pipeline's last micro-batch's backward pays in collectives beyond its mean share
// (CostModel::pipeline_step): each layer's, and on the model's last chunk the head's beyond
// a layer's. A chunk's last layer leaves its collectives in flight, and the slot that
// layer's take in that micro-batch beyond the micro-batch before's (the whole slot with
// one micro-batch) is off the path but on the model's first chunk, where the optimizer
// waits for it: `handed_off` on a stage's last backward, which nothing follows; `in_flight`
// on a backward that another action follows, whose passes the collectives still slow
// where they share links (DpCosts::backward_slowed).
struct LastBackward {
  double per_layer = 0, head = 0;
  double handed_off = 0, in_flight = 0;
};

class CostModel {
 public:
  CostModel(const ModelSpec& model, const Fabric& fabric, const CostParams& cost);

  const ModelSpec& model() const { return model_; }
  const Fabric& fabric() const { return fabric_; }
  const CostParams& cost() const { return cost_; }

  // The whole model, or one TP member's share of it (tensor_parallel.h's tp_shard), cached.
  const ModelSpec& shard(int tp);
  // At most how much of `p`'s linear compute (a prediction of `choice`) the GEMM size curve
  // adds, which a level keeping whole weights would not pay: linear_compute_s x (1 - the
  // smallest size factor of its GEMMs, the layer's or the head's); 0 unless `choice`
  // regathers its weights (data_parallel.h). An upper bound, for the search's pruning.
  double regather_bound_s(const Job& job, const PlanChoice& choice, const Prediction& p);
  // FSDP's collective for a TP degree (each TP rank's cp·dp GPUs; all GPUs when tp = 1;
  // with pp > 1 those of each stage, pipeline_parallel.h) and the TP groups' (tp
  // consecutive GPUs), all groups at once; cached.
  const GroupCollective& fsdp_collective(int tp, int pp = 1);
  const GroupCollective& tp_collective(int tp);
  // hsdp's shard groups (replicate = false) or replicate groups of `choice`
  // (data_parallel.h), all at once; cached.
  const GroupCollective& hsdp_collective(const PlanChoice& choice, bool replicate);
  // Cached by (cp, dp, schedule, order).
  const RingPatterns& ring_patterns(int cp, int dp, Schedule schedule, const std::vector<int>& order);
  // The pipeline's stage-to-stage transfers, every boundary at once (units: bytes): both
  // ways (an interleaved steady state's send_forward_backward_recv_forward_backward, each
  // GPU sending to both neighbours), or one way, each GPU sending to one (a warm-up's
  // send_forward_recv_forward, a cool-down's send_backward_recv_backward). No transfer when
  // pp = 1. Cached.
  const PatternCost& pp_p2p_pattern(int pp, bool both_ways = true);
  // The patterns predict() takes for `choice`: its own ring's, or a2a+p2p's ring's (all
  // pipeline stages' rings at once).
  const RingPatterns& ring_patterns_of(const PlanChoice& choice);
  // The FSDP collectives over all G GPUs (collective_pattern.h: every rail across nodes
  // and NVSwitch inside, concurrently): seconds for one all-gather or reduce-scatter of
  // `bytes_per_gpu` (each GPU's shard).
  double fsdp_collective_s(double bytes_per_gpu);

  // Evaluate a ring plan (or the flash-fsdp / all-gather CP / Ulysses baselines, by
  // choice.strategy). `patterns` must be ring_patterns() of the same choice (a2a+p2p: of
  // its usp_ring_choice, usp_plan.h). Checks
  // nothing: the search only builds valid choices; use validate_choice for user input.
  Prediction predict(const Job& job, const PlanChoice& choice, const RingPatterns& patterns);
  // predict() without what only a reader needs (explain): the search prices thousands of
  // candidates and explains the one it returns.
  Prediction price(const Job& job, const PlanChoice& choice, const RingPatterns& patterns);
  // Fills `p`'s (price()'s) reader fields: the ring's overlap threshold and, when the plan
  // does not fit, why (its memory against the GPU's; for a level that keeps states
  // unsharded, what fsdp's would take).
  void explain(const Job& job, const PlanChoice& choice, const RingPatterns& patterns, Prediction& p);
  // Convenience: looks the patterns up.
  Prediction predict(const Job& job, const PlanChoice& choice);

  // Why `choice` cannot run `job` on this fabric (divisibility, heads, tiles, schedule
  // shape), or "" when it can. Memory is not checked here (predict sets fits).
  std::string why_invalid(const Job& job, const PlanChoice& choice) const;

 private:
  // layer_times, remembered: the pipeline degrees of a (tp, cp, ring, tiles, checkpointing)
  // share it (pp_flattened), as do the baselines and the tp 1 comparison.
  const LayerTimes& layer_times_cached(const Job& job, const PlanChoice& choice, const RingPatterns& pat,
                                       const PatternCost* a2a, bool free_comm);
  // `a2a`: the all-to-all pattern, Ulysses and a2a+p2p only.
  // With tp_comm_overlap: sets t.tp_fwd, t.tp_bwd to what the chunked TP collectives add
  // to their GEMMs (tensor_parallel.h).
  void add_tp_overlap(const Job& job, const PlanChoice& choice, LayerTimes& t);
  // One TP all-gather's and one reduce-scatter's seconds over c tokens in `chunks` pieces
  // (the all-gather in tp_gather_element_bytes, linear_precision.h).
  std::pair<double, double> tp_collective_times(const Job& job, int64_t c, int tp, int chunks);
  // The FLOP/s of a layer's linear GEMMs on c tokens of each of the micro-step's sequences,
  // `lf` one TP member's (the GEMM size curve, CostParams::gemm_flops_per_s).
  double layer_gemm_flops_per_s(const Job& job, const PlanChoice& choice, int64_t c, const LinearFlops& lf) const;
  LayerTimes layer_times(const Job& job, const PlanChoice& choice, const RingPatterns& pat,
                         const PatternCost* a2a, bool free_comm);
  const PatternCost& all_to_all_pattern(int cp, int dp, const std::vector<int>& order);
  // a2a+p2p (usp_plan.cc): the ring's attention (`pat`: its ring patterns) and the
  // all-to-alls over `a2a` (all_to_all_pattern of the cp_a2a groups); linear parts zero.
  LayerTimes usp_attention_times(const Job& job, const PlanChoice& choice, const RingPatterns& pat,
                                 const PatternCost& a2a, bool free_comm);
  std::string usp_why_invalid(const Job& job, const PlanChoice& choice) const;
  // A pass of a2a or a2a+p2p (`backward`: dout in, dQ,dK,dV back; else Q,K,V in, the
  // output back): each all-to-all over `a2a` between its pack and unpack, `middle` between.
  AttentionPhases a2a_phases(const Job& job, const PlanChoice& choice, const PatternCost& a2a, bool free_comm,
                             bool backward, const AttentionPhases& middle) const;
  // a2a+p2p's ring as a cost model of its own (usp_ring_model), by (tp, cp_a2a); cached.
  CostModel& usp_ring(int tp, int cp_a2a);
  std::map<std::pair<int, int>, std::unique_ptr<CostModel>> usp_rings_;
  // A step of a pipelined plan (pipeline_parallel.cc): the stages' per-micro-batch times
  // from one layer's (`real`, `free`: micro_batch sequences, all stages' blocks as one),
  // FSDP's exposed time per layer and per micro-batch's ends, the head and loss on the
  // last stage, over `microbatches` per pipeline; the optimizer on the largest stage.
  struct PipelineStep {
    double time = 0, free_time = 0, bubble = 0, p2p = 0;
    int layers = 0;                   // the slowest stage's layers
    double head_and_optimizer = 0;    // compute of the step outside the layers
    double fsdp_ends = 0;             // the slowest stage's FSDP ends per micro-batch
  };
  // FSDP's exposed time at a chunk's ends, by stage (DpCosts::stage_ends: the first holds
  // the embedding, the last the head), each its mean over the micro-batches.
  struct PipelineEnds {
    double first = 0, middle = 0, last = 0;
    double tail = 0;  // once per step: the stage's last gradients, waited for before the optimizer
    // A chunk's lowest layer prefetches no weights for a backward below it: what a
    // layer's slot counts for that gather (fsdp, hsdp; DpCosts::unprefetched).
    double unprefetched = 0;
  };
  PipelineStep pipeline_step(const Job& job, const PlanChoice& choice, const LayerTimes& real,
                             const LayerTimes& free, double fsdp_layer, const PipelineEnds& fsdp_ends,
                             const ForwardGathers& first_gathers, const LastBackward& last_backward,
                             double logits, int64_t microbatches);
  // A flat ring cut short by a sliding window: every position sends its last fp32
  // accumulator `hops` positions back, to the block's owner (units: K,V elements).
  const PatternCost& ring_home_pattern(int cp, int dp, const std::vector<int>& order, int hops);

  ModelSpec model_;
  const Fabric& fabric_;
  CostParams cost_;
  std::map<std::tuple<int, int, int, std::vector<int>>, std::unique_ptr<RingPatterns>> patterns_;
  std::map<std::tuple<int, int, std::vector<int>>, PatternCost> all_to_all_;
  std::map<std::tuple<int, int, int, std::vector<int>>, PatternCost> ring_home_;
  const GroupCollective& group_collective(const std::vector<std::vector<int>>& groups);
  std::map<std::vector<std::vector<int>>, GroupCollective> collectives_;
  std::map<std::pair<int, int>, const GroupCollective*> fsdp_;  // by (tp, pp)
  std::map<int, const GroupCollective*> tp_;                    // by tp
  std::map<std::pair<int, bool>, PatternCost> pp_p2p_;          // by (pp, both ways)
  // pipeline_schedule.h's programs the unequal pipelines are run through, compiled for
  // timing (PipelineMakespan), by (pp, v, micro-batches, backward, warm-up rule).
  const PipelineMakespan& pp_makespan(int pp, int virtual_stages, int64_t microbatches, bool backward,
                                      InterleavedWarmup warmup);
  std::map<std::tuple<int, int, int64_t, bool, InterleavedWarmup>, PipelineMakespan> pp_makespans_;
  // layer_times_cached's: the patterns' addresses (stable: patterns_ and all_to_all_ are
  // never erased) stand for cp, ring schedule and order.
  struct LayerKey {
    const RingPatterns* pat;
    const PatternCost* a2a;
    int64_t seq_len;
    int fields[13];  // strategy, tp, cp, cp_a2a, balance, tiles, sub-blocks, ckpt, comm+causal+tp overlap, passes+workload,
                     // micro_batch (the GEMMs' size), fp8 recipe + eager elementwise (the layer's bytes)
                     // + whether the weights are regathered (the GEMMs' size curve)
    bool operator==(const LayerKey& o) const;
  };
  struct LayerKeyHash {
    size_t operator()(const LayerKey& k) const;
  };
  std::unordered_map<LayerKey, LayerTimes, LayerKeyHash> layer_memo_;
  std::map<int, ModelSpec> shards_;                  // by tp
  std::map<std::tuple<int, int, int, bool, std::vector<int>>, const GroupCollective*> hsdp_;
};

// Sequences per optimizer step: batch_sequences when set, else batch_tokens / N (2M tokens
// when 0), at least one.
int64_t sequences_per_step(const Job& job);
// Data-parallel replicas that hold a sequence in a step: a batch of fewer sequences than `dp`
// leaves the rest idle (a baseline that cannot split a sequence further, e.g. a2a's cp capped
// by the heads, can need more replicas than the batch fills).
int64_t busy_replicas(const Job& job, int dp);
// Why `micro_batch` sequences per micro-step cannot run on `dp` data-parallel replicas ("" when
// they can): the attention and layer workloads run one sequence, and more than a replica's
// share of a step's batch would price sequences the batch does not have.
std::string micro_batch_why_invalid(const Job& job, int micro_batch, int dp);
inline constexpr int64_t kDefaultBatchTokens = int64_t{2} << 20;  // Ring Attention paper (A100)

// Model FLOPs of one optimizer step (the MFU numerator, see above).
double model_flops_per_step(const ModelSpec& m, const Job& job);

// Overlap threshold in tokens per GPU (the Ring Attention paper's Table 2): the block
// size c at which computing one block pair (4·c²·d·h FLOPs at F FLOP/s) takes as long as
// sending one K,V block (2·c·d·h_kv·e bytes at B bytes/s): c = F·e·h_kv / (2·h·B).
// For MHA in bf16 (e = 2, h_kv = h) this is the paper's c >= F/B.
double overlap_threshold_tokens(double flops_per_s, double bytes_per_s, int element_bytes,
                                int heads, int kv_heads);

// The threshold per link class of a topology at the GPU's peak (the paper's definition),
// for `model`'s heads: what `ringmaster plan` prints. Spine links are left out: they are
// shared uplinks, never one ring hop's own link.
struct LinkThreshold {
  LinkClass cls;
  double bytes_per_s = 0;  // the class's slowest link (override applied)
  double tokens = 0;
};
std::vector<LinkThreshold> overlap_thresholds(const Topology& topo, const CostParams& cost,
                                              const ModelSpec& model);

}  // namespace rm
