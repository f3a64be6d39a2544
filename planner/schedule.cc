// The schedule generator's whole-model part (semantics in schedule.h): buffers and
// memory, the workloads (attention, layer, step), FSDP collectives, checkpointing; the
// ring passes themselves come from ring_pass.h.
#include "planner/schedule.h"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <string>
#include <tuple>

#include "planner/attention_work.h"
#include "planner/data_parallel.h"
#include "planner/input_error.h"
#include "planner/linear_precision.h"
#include "planner/memory_model.h"
#include "planner/op_emitter.h"
#include "planner/pipeline_parallel.h"
#include "planner/pipeline_schedule.h"
#include "planner/ring_order.h"
#include "planner/ring_pass.h"
#include "planner/tensor_parallel.h"
#include "planner/usp_plan.h"

namespace rm {

// --- Whole-schedule generation ----------------------------------------------------------

namespace {

// Stored activations of one layer (labels "<name>.L<layer>", see schedule.h).
struct LayerStore {
  int q = -1, kv = -1, out = -1, lse = -1, rest = -1;
};

// `count` alike units run one after another (a step's micro-steps, a micro-step's
// sequences), folded (ScheduleOptions::fold_micro_steps) where there are more than
// `emitted`: the first emitted - 1 and the last are emitted, and `stand_in`, one of the
// first, counts for itself and those not emitted (OpSchedule::*_stand_in_weight).
struct Fold {
  int count = 0, emitted = 0, stand_in = 0;  // count 0: not folded
  int weight() const { return count > emitted ? count - emitted + 1 : 1; }
  bool skips(int i) const { return weight() > 1 && i >= emitted - 1 && i < count - 1; }
  bool stands_in(int i) const { return weight() > 1 && i == stand_in; }
  // "5 of 16 micro-steps emitted (micro-step 2 stands for 12)"
  std::string note(const std::string& units, const std::string& unit) const {
    return std::to_string(emitted) + " of " + std::to_string(count) + " " + units + " emitted (" + unit + " " +
           std::to_string(stand_in) + " stands for " + std::to_string(weight()) + ")";
  }
};

class Generator {
 public:
  Generator(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
            const ScheduleOptions& options)
      : job_(plan.job),
        plan_choice_(as_run(plan.job, plan.choice)),
        choice_(pp_flattened(plan_choice_)),
        pp_(std::max(1, plan.choice.pp)),
        vs_(std::max(1, plan.choice.virtual_stages)),
        m_(model),
        ms_(tp_shard(model, std::max(1, plan.choice.tp))),
        fabric_(fabric),
        opt_(options),
        costs_(options.costs ? *options.costs : CostParams::from_topology(fabric.topology())),
        table_(out_.buffers) {}

  OpSchedule run() {
    validate();
    setup();
    out_.ranks.resize(G_);
    for (int gpu = 0; gpu < G_; ++gpu) out_.ranks[gpu].gpu = gpu;
    const std::vector<char> rings = fold_replicas_ ? rings_on_ring0_nodes() : std::vector<char>(rings_, 1);
    int64_t to_emit = 0, emitted = 0, ops = 0;
    for (int r = 0; r < rings_; ++r) {
      for (int p = 0; p < P_; ++p) to_emit += rings[r] && wanted(order_[r * P_ + p]);
    }
    for (int r = 0; r < rings_; ++r) {
      for (int p = 0; p < P_; ++p) {
        const int gpu = order_[r * P_ + p];
        RankSchedule& rs = out_.ranks[gpu];
        rs.ring = r;
        rs.position = p;
        if (fold_replicas_) {
          for (int to : ring_send_positions(ring_, p)) out_.ring_flows.push_back({gpu, ring_gpus_[r][to]});
        }
        if (!rings[r] || !wanted(gpu)) continue;
        emit_rank(rs, r, p);
        // push_back left up to half of the list's capacity unused: 1.4x the ops' bytes
        // at a replay of 26 M ops (BENCHMARKS.md).
        rs.ops.shrink_to_fit();
        ops += static_cast<int64_t>(rs.ops.size());
        check_op_budget(ops, ++emitted, to_emit);
      }
    }
    if (fold_replicas_) note_replicas(rings);
    return std::move(out_);
  }

 private:
  const Job& job_;
  // The plan's choice with the level its framework runs (data_parallel.h's as_run), and its
  // stages seen as one block of GPUs (pp_flattened: dp·pp replicas), which is what the
  // rings, TP groups and all-to-alls are laid out by; the same when pp = 1.
  const PlanChoice plan_choice_;
  const PlanChoice choice_;
  const int pp_;  // pipeline stages (pipeline_parallel.h)
  const int vs_;  // and the chunks of each (virtual stages)
  const ModelSpec& m_;
  const ModelSpec ms_;  // one TP member's heads, FFN columns, vocabulary (m_ when tp = 1)
  const Fabric& fabric_;
  const ScheduleOptions& opt_;
  CostParams costs_;
  OpSchedule out_;
  BufferTable table_;

  int G_ = 1, P_ = 1, E_ = 1;  // GPUs, ring size, layers emitted
  int T_ = 1;                  // tensor-parallel degree
  int U_ = 1;                  // a2a+p2p: the all-to-all degree (cp = U_ x P_)
  int hsdp_shard_base_ = -1;   // hsdp: first shard group and first replicate group (-1: none)
  int hsdp_replicate_base_ = -1;
  int rings_ = 1;              // rings: dp, or tp·dp (one per TP rank of each replica), x U_
                               // (x pp: every stage's)
  int fsdp_groups_ = 1;        // FSDP groups (then the TP groups): 1, tp, or tp·pp
  bool fold_replicas_ = false; // ScheduleOptions::fold_replicas, where it applies
  Fold micro_fold_, sequence_fold_;  // ScheduleOptions::fold_micro_steps, where it applies
  PipelineProgram pipeline_{}; // pp > 1: each stage's 1F1B program
  int phase_stride_ = 0;       // pp > 1: phases between two exchanges of a stage (see exchange())
  // Ring k is order_[k*P_ .. (k+1)*P_): the plan's order, or a2a+p2p's rings
  // (usp_ring_choice: ring (d·U_ + i)·tp + t, so ring % tp is still the TP rank).
  std::vector<int> order_;
  int64_t c_ = 0;              // tokens per GPU outside attention: N / cp
  LayerHolding holding_{};     // the job's window, loss, framework, TP saved inputs (memory_model.h)
  TokenLayout layout_{};
  RingBuffers rb_{};
  MemoryBreakdown mem_{};
  RingContext ring_{};
  std::vector<std::vector<int>> ring_gpus_;
  LinearFlops lin_{};
  ElementwiseBytes ew_{};
  int mb_ = 1;                // sequences per micro-step (PlanChoice::micro_batch)
  bool on_curve_ = false;     // the GEMM size curve applies (data_parallel.h pays_gemm_size_curve)
  // One member's share of a TP all-gather and reduce-scatter (tensor_parallel.h; the
  // all-gather in tp_gather_element_bytes, linear_precision.h).
  double tp_gather_bytes_ = 0, tp_scatter_bytes_ = 0;
  double act_per_layer_ = 0;  // stored activation bytes of one layer, all mb_ sequences

  // Replica folding: ring 0 and every ring sharing a node with the rings taken so far.
  std::vector<char> rings_on_ring0_nodes() const {
    const int gpn = fabric_.topology().gpus_per_node;
    std::vector<char> ring_taken(rings_, 0), node_taken(fabric_.nodes(), 0);
    std::vector<int> ring_of(G_);
    for (int i = 0; i < G_; ++i) ring_of[order_[i]] = i / P_;
    std::vector<int> todo{0};
    ring_taken[0] = 1;
    while (!todo.empty()) {
      const int r = todo.back();
      todo.pop_back();
      for (int gpu : ring_gpus_[r]) {
        const int node = fabric_.node_of(gpu);
        if (node_taken[node]) continue;
        node_taken[node] = 1;
        for (int g = node * gpn; g < std::min(G_, (node + 1) * gpn); ++g) {
          if (!ring_taken[ring_of[g]]) {
            ring_taken[ring_of[g]] = 1;
            todo.push_back(ring_of[g]);
          }
        }
      }
    }
    return ring_taken;
  }

  void note_replicas(const std::vector<char>& rings) {
    const int taken = static_cast<int>(std::count(rings.begin(), rings.end(), 1));
    if (taken == rings_) return;
    for (int r = 0; r < rings_; ++r) {
      if (rings[r]) out_.emitted_gpus.insert(out_.emitted_gpus.end(), ring_gpus_[r].begin(), ring_gpus_[r].end());
    }
    std::sort(out_.emitted_gpus.begin(), out_.emitted_gpus.end());
    out_.note += std::string(out_.note.empty() ? "" : "; ") + std::to_string(taken) + " of " +
                 std::to_string(rings_) +
                 (T_ > 1 || U_ > 1 ? std::string(" rings (") + (T_ > 1 ? "tp x " : "") + (U_ > 1 ? "a2a x " : "") +
                                         "dp) emitted ("
                                   : std::string(" data-parallel rings emitted (")) +
                 std::to_string(out_.emitted_gpus.size()) + " of " + std::to_string(G_) +
                 " GPUs), each standing for its copies on other nodes";
  }

  // ScheduleOptions::max_ops: the ops of `emitted` op lists of `to_emit`, extrapolated.
  void check_op_budget(int64_t ops, int64_t emitted, int64_t to_emit) const {
    if (opt_.max_ops <= 0) return;
    const auto projected = static_cast<int64_t>(static_cast<double>(ops) / emitted * to_emit);
    if (projected <= opt_.max_ops) return;
    throw ScheduleTooLarge(opt_.where + ": its schedule would hold about " + std::to_string(projected) + " ops (" +
                               std::to_string(ops) + " in the first " + std::to_string(emitted) + " of " +
                               std::to_string(to_emit) + " op lists), more than the " +
                               std::to_string(opt_.max_ops) + " allowed",
                           projected);
  }

  bool wanted(int gpu) const {
    return opt_.only_gpus.empty() ||
           std::find(opt_.only_gpus.begin(), opt_.only_gpus.end(), gpu) != opt_.only_gpus.end();
  }

  void validate() const {
    const std::string& w = opt_.where;
    auto num = [](auto v) { return std::to_string(v); };
    if ((choice_.strategy == Strategy::kAllGatherCp || choice_.strategy == Strategy::kUlysses) &&
        choice_.cp < 2) {
      fail_input(w, "cp", std::string(cp_comm_type(choice_.strategy)) + " needs cp >= 2 (got " +
                              num(choice_.cp) + ")");
    }
    if (choice_.tp < 1 || choice_.tp > job_.gpus) fail_input(w, "tp", "must be in [1, gpus] (got " + num(choice_.tp) + ")");
    if (choice_.tp > 1) {
      const std::string why = tp_why_invalid(m_, choice_.tp, fabric_.topology().gpus_per_node);
      if (!why.empty()) fail_input(w, "tp", why);
      if (choice_.schedule == Schedule::kTwoLevel)
        fail_input(w, "schedule", "a two-level ring runs with tp = 1 (got tp " + num(choice_.tp) + ")");
    }
    const PlanChoice& pc = plan_choice_;
    if (pc.pp != 1 || pc.virtual_stages != 1 || pc.account_for_embedding_in_pipeline_split ||
        pc.account_for_loss_in_pipeline_split) {
      if (pc.pp < 1) fail_input(w, "pp", "must be >= 1 (got " + num(pc.pp) + ")");
      if (job_.workload != Workload::kStep)
        fail_input(w, "workload", "pipeline parallelism (pp " + num(pc.pp) + ") applies to step workloads (got " +
                                      to_string(job_.workload) + ")");
      const std::string why = pp_why_invalid(pp_layout(m_.layers, pc), pc.grad_accum);
      if (!why.empty())
        fail_input(w,
                   pc.virtual_stages != 1 ? "virtual_stages"
                   : pc.pp == 1 && pc.account_for_embedding_in_pipeline_split ? "account_for_embedding_in_pipeline_split"
                   : pc.pp == 1 && pc.account_for_loss_in_pipeline_split      ? "account_for_loss_in_pipeline_split"
                                                                              : "pp",
                   why);
      if (const std::string not_replayed = pp_replay_why_not(pc.pp, pc.virtual_stages); !not_replayed.empty())
        fail_input(w, "virtual_stages", not_replayed + "; such a plan is priced, not simulated: use virtual_stages 1");
      if (pc.cp < 1 || pc.dp < 1 || int64_t{pc.tp} * pc.cp * pc.dp * pc.pp != job_.gpus)
        fail_input(w, "cp, dp, pp", "tp * cp * dp * pp must equal gpus = " + num(job_.gpus) + " (got tp " +
                                        num(pc.tp) + ", cp " + num(pc.cp) + ", dp " + num(pc.dp) + ", pp " +
                                        num(pc.pp) + ")");
      if (const std::string why = pc.sharding == Sharding::kHsdp ? hsdp_why_not(pc) : ""; !why.empty())
        fail_input(w, "sharding", why);
      if (const std::string why = pp_order_why_invalid(pc); !why.empty()) fail_input(w, "order", why);
    }
    if (choice_.strategy == Strategy::kUsp) {
      const std::string why = usp_split_why_invalid(m_, choice_, fabric_.topology().gpus_per_node);
      if (!why.empty()) fail_input(w, "hierarchical_context_parallel_sizes", why);
      if (choice_.schedule == Schedule::kTwoLevel)
        fail_input(w, "schedule", "a2a+p2p's ring is flat or bidirectional (its inner level is the all-to-all)");
    }
    if (choice_.strategy == Strategy::kUlysses &&
        (ms_.heads % choice_.cp != 0 || ms_.kv_heads % choice_.cp != 0)) {
      fail_input(w, "cp", "a2a splits heads: cp must divide the " + num(ms_.heads) + " query heads and the " +
                              num(ms_.kv_heads) + " kv heads" + (choice_.tp > 1 ? " of a TP rank" : "") +
                              " (got " + num(choice_.cp) + ")");
    }
    if (job_.gpus != fabric_.gpus()) {
      fail_input(w, "gpus", "must equal the topology's GPU count " + num(fabric_.gpus()) +
                                " (got " + num(job_.gpus) + ")");
    }
    if (choice_.cp < 1 || choice_.dp < 1 || int64_t{choice_.tp} * choice_.cp * choice_.dp != job_.gpus) {
      fail_input(w, "cp, dp", "tp * cp * dp must equal gpus = " + num(job_.gpus) + " (got tp " + num(choice_.tp) +
                                  ", cp " + num(choice_.cp) + ", dp " + num(choice_.dp) + ")");
    }
    if (choice_.strategy == Strategy::kFlashFsdp && choice_.cp != 1) {
      fail_input(w, "cp", "must be 1 for flash-fsdp (got " + num(choice_.cp) + ")");
    }
    check_order(choice_.order, job_.gpus, w);
    if (choice_.sharding == Sharding::kNone) fail_input(w, "sharding", "expected ddp, zero1, zero2, fsdp or hsdp");
    if (choice_.sharding == Sharding::kHsdp &&
        (choice_.dp_shard < 1 || choice_.dp % choice_.dp_shard != 0 || choice_.dp / choice_.dp_shard < 2)) {
      fail_input(w, "data_parallel_shard_degree", "must divide dp " + num(choice_.dp) +
                                                      " and leave at least 2 replicas (got " + num(choice_.dp_shard) + ")");
    }
    if (const std::string why = choice_.sharding == Sharding::kHsdp ? hsdp_why_not(choice_) : ""; !why.empty())
      fail_input(w, "sharding", why);
    if (choice_.tp > 1 && choice_.order != tp_order(choice_.tp, choice_.cp, choice_.dp))
      fail_input(w, "order", "with tp > 1 the order must be the tp-cp-dp rank order (TP innermost, node-major)");
    TokenLayout::check_divisible(choice_.load_balance, job_.seq_len, choice_.cp, w);
    if (m_.heads < 1 || m_.kv_heads < 1 || m_.heads % m_.kv_heads != 0) {
      fail_input(m_.source, "kv_heads", "must divide heads (" + num(m_.heads) + ")");
    }
    if (choice_.block_q < 1 || choice_.block_kv < 1) {
      fail_input(w, "block_q, block_kv", "must be >= 1");
    }
    if (choice_.kv_subblocks < 1) {
      fail_input(w, "kv_subblocks", "must be >= 1 (got " + num(choice_.kv_subblocks) + ")");
    }
    if (choice_.micro_batch < 1 || (choice_.micro_batch > 1 && job_.workload != Workload::kStep)) {
      fail_input(w, "micro_batch", "must be >= 1, and 1 unless the workload is step (got " +
                                       num(choice_.micro_batch) + ")");
    }
    if (choice_.grad_accum < 1) {
      fail_input(w, "grad_accum", "must be >= 1 (got " + num(choice_.grad_accum) + ")");
    }
    if (choice_.schedule != Schedule::kFlat && choice_.cp > 1 && effective_window(m_, job_) > 0) {
      fail_input(w, "schedule", std::string("a sliding-window model (") + m_.source +
                                    ") runs on the flat ring (got " + to_string(choice_.schedule) + ")");
    }
    const int g = fabric_.topology().gpus_per_node;
    if (choice_.schedule == Schedule::kTwoLevel && (g < 1 || choice_.cp % g != 0)) {
      fail_input(w, "schedule",
                 "two-level needs cp to be a multiple of the GPUs per node " + num(g) +
                     " (got cp " + num(choice_.cp) + ")");
    }
    if (costs_.attention.efficiency(choice_.block_q, choice_.block_kv, ms_.head_dim) <= 0) {
      fail_input(w, "block_q, block_kv",
                 "the attention tile does not fit the GPU's on-chip memory (got " +
                     num(choice_.block_q) + " x " + num(choice_.block_kv) + ")");
    }
  }

  void setup() {
    G_ = job_.gpus;
    T_ = choice_.tp;
    const bool usp = choice_.strategy == Strategy::kUsp;
    U_ = usp ? choice_.cp_a2a : 1;
    P_ = choice_.cp / U_;
    rings_ = T_ * choice_.dp * U_;
    order_ = usp ? usp_ring_choice(choice_).order : choice_.order;
    c_ = job_.seq_len / choice_.cp;
    layout_ = TokenLayout{choice_.load_balance, job_.seq_len, P_};
    const GpuSpec& gpu = fabric_.topology().gpu;
    holding_ = layer_holding(m_, job_, T_, gpu.element_bytes);
    rb_ = ring_buffers(m_, choice_, job_.seq_len, gpu, holding_);  // what plan_ring_buffers gives
    mem_ = plan_memory(m_, job_, plan_choice_, gpu);
    // A TP member's GEMMs and loss (vocabulary-parallel); sequence parallelism splits the
    // layer's memory-bound work tp ways too (CostModel::layer_times).
    lin_ = linear_flops_per_token(ms_);
    ew_ = elementwise_bytes_per_token(ms_, gpu.element_bytes);
    ew_.layer_fwd = elementwise_bytes_per_token(m_, gpu.element_bytes, job_.eager_elementwise, job_.fp8_recipe).layer_fwd / T_;
    tp_gather_bytes_ = tp_collective_bytes(m_, c_, tp_gather_element_bytes(job_.fp8_recipe, gpu.element_bytes), T_);
    tp_scatter_bytes_ = tp_collective_bytes(m_, c_, gpu.element_bytes, T_);
    mb_ = micro_step_sequences(job_, choice_);
    on_curve_ = pays_gemm_size_curve(job_, choice_);  // pp-flattened, as the cost model prices it
    // Every sequence of the micro-step keeps its activations (the memory model's count).
    act_per_layer_ = mb_ * static_cast<double>(c_) *
                     activation_bytes_per_token_layer(m_, choice_.checkpointing, gpu.element_bytes, T_,
                                                      holding_.saved_input_bytes);

    E_ = m_.layers;
    // A pipeline's stages wait on each other's layers: every layer is emitted (no layer
    // stands for others, layer_weights.h), and every stage's rings (no replica folding).
    fold_replicas_ = opt_.fold_replicas && pp_ == 1;
    if (pp_ == 1 && opt_.max_layers > 0) E_ = std::min(opt_.max_layers, m_.layers);
    // The attention and layer workloads are one layer by definition: nothing to extrapolate.
    const bool step = job_.workload == Workload::kStep;
    out_.layers_emitted = step ? E_ : 1;
    out_.layers_modelled = step ? m_.layers : 1;
    if (out_.layers_modelled > out_.layers_emitted) {
      out_.note = std::to_string(out_.layers_emitted) + " of " + std::to_string(m_.layers) +
                  " identical layers emitted";
    }
    if (opt_.fold_micro_steps && step && pp_ == 1) {
      micro_fold_ = {choice_.grad_accum, kFoldedMicroSteps, kMicroStepStandIn};
      sequence_fold_ = {mb_, kFoldedSequences, kSequenceStandIn};
    }
    out_.micro_stand_in_weight = micro_fold_.weight();
    out_.sequence_stand_in_weight = sequence_fold_.weight();
    for (const auto& [fold, units, unit] : {std::tuple{micro_fold_, "micro-steps", "micro-step"},
                                            std::tuple{sequence_fold_, "sequences a micro-step", "sequence"}}) {
      if (fold.weight() > 1) out_.note += std::string(out_.note.empty() ? "" : "; ") + fold.note(units, unit);
    }

    ring_gpus_.assign(rings_, {});
    for (int r = 0; r < rings_; ++r) {
      ring_gpus_[r].assign(order_.begin() + r * P_, order_.begin() + (r + 1) * P_);
    }
    // FSDP shards over all cp·dp GPUs; NCCL's ring for it is rail-aligned (the snake), as
    // in CostModel::fsdp_collective_s.
    // With tp > 1: one FSDP group per TP rank (groups 0..tp-1), then the TP groups
    // (tensor_parallel.h; group tp + d·cp + i for replica d, ring position i).
    // With pp > 1: one FSDP group per (stage, TP rank), group s·tp + t (pp_fsdp_groups, as
    // CostModel::fsdp_collective prices them).
    if (pp_ > 1) {
      for (auto& g : pp_fsdp_groups(G_, T_, pp_)) out_.groups.push_back(std::move(g));
    } else if (T_ == 1 && G_ > 1) {
      out_.groups.push_back(snake_order(fabric_));
    } else if (T_ > 1) {
      for (auto& g : fsdp_groups(order_, T_, P_)) out_.groups.push_back(std::move(g));
    }
    fsdp_groups_ = static_cast<int>(out_.groups.size());
    if (T_ > 1) {
      for (auto& g : tp_groups(order_, T_, P_)) out_.groups.push_back(std::move(g));
    }
    // hsdp (data_parallel.h): its shard groups, then its replicate groups.
    if (choice_.sharding == Sharding::kHsdp && G_ / T_ > 1) {
      hsdp_shard_base_ = static_cast<int>(out_.groups.size());
      for (auto& g : hsdp_shard_groups(choice_.order, T_, P_, choice_.dp_shard)) out_.groups.push_back(std::move(g));
      hsdp_replicate_base_ = static_cast<int>(out_.groups.size());
      for (auto& g : hsdp_replicate_groups(choice_.order, T_, P_, choice_.dp_shard)) out_.groups.push_back(std::move(g));
    }

    ring_.kind = choice_.strategy;
    if (ring_.kind == Strategy::kRing || ring_.kind == Strategy::kUsp) out_.lockstep_slowdown = costs_.lockstep_slowdown(P_);
    ring_.P = P_;
    ring_.steps = ring_attention_work(layout_, job_.causal, ms_.heads, ms_.head_dim,
                                      {choice_.block_q, choice_.block_kv}, holding_.window)
                      .steps;
    ring_.g = choice_.schedule == Schedule::kTwoLevel ? fabric_.topology().gpus_per_node : 1;
    ring_.schedule = choice_.schedule;
    ring_.subblocks = choice_.kv_subblocks;
    ring_.kv_bytes = rb_.kv_block;
    ring_.dkv_bytes = rb_.dkv_block;
    ring_.attention_efficiency =
        costs_.attention.efficiency(choice_.block_q, choice_.block_kv, ms_.head_dim);
    ring_.accumulate_efficiency = costs_.accumulate_efficiency();
    ring_.elementwise_efficiency = costs_.elementwise_efficiency();
    ring_.merge_elements = static_cast<double>(c_) * ms_.heads * ms_.head_dim;
    ring_.merge_efficiency[0] = costs_.merge_efficiency(false);
    ring_.merge_efficiency[1] = costs_.merge_efficiency(true);
    ring_.later_merge = forward_merge(layout_, job_.causal, 0, 1);
    ring_.sliced_merge_efficiency = costs_.merge_efficiency(false, true);
    ring_.sync_s = costs_.step_sync_s;
    ring_.backward_factor = costs_.attention.backward_factor;
    if (ring_.kind == Strategy::kAllGatherCp || ring_.kind == Strategy::kUlysses) {
      // Each GPU computes 1/P of the whole sequence's attention (CostModel::layer_times).
      const TokenLayout whole{LoadBalance::kContiguous, job_.seq_len, 1};
      const RingAttentionWork w = ring_attention_work(whole, job_.causal, ms_.heads, ms_.head_dim,
                                                      {choice_.block_q, choice_.block_kv}, holding_.window);
      ring_.share_executed = w.executed_total / P_;
      ring_.share_useful = w.useful_total / P_;
      ring_.gather_blocks = all_gather_blocks(choice_, c_, holding_.window);
    }
    if (choice_.strategy == Strategy::kUlysses || usp) {
      const A2aBytes b = a2a_bytes(m_, choice_, job_.seq_len, gpu.element_bytes);
      ring_.a2a_qkv_bytes = b.qkv;
      ring_.a2a_out_bytes = b.out;
    }
    if (pp_ > 1) setup_pipeline();
    // Folding needs every middle step alike: a contiguous causal split gives each position
    // a different mix of full and masked blocks per step.
    ring_.fold = opt_.fold_ring_steps && (ring_.kind == Strategy::kRing || usp) &&
                 (!job_.causal || choice_.load_balance != LoadBalance::kContiguous);
    const int steps = ring_.pass_steps();
    if (ring_.stands_for(kFoldHeadSteps) > 1) {
      // Ops of outer step o of a two-level ring carry steps o*g .. o*g + g - 1.
      const int per = choice_.schedule == Schedule::kTwoLevel ? ring_.g : 1;
      out_.step_weights.assign(P_ + 2, 1.0);
      for (int t = 0; t < per; ++t) out_.step_weights[kFoldHeadSteps * per + t] = ring_.stands_for(kFoldHeadSteps);
      out_.note += std::string(out_.note.empty() ? "" : "; ") + std::to_string(kFoldHeadSteps + 1 + kFoldTailSteps) +
                   " of " + std::to_string(steps) + (per > 1 ? " outer" : "") + " ring steps emitted per pass (step " +
                   std::to_string(kFoldHeadSteps) + " stands for " + std::to_string(ring_.stands_for(kFoldHeadSteps)) + ")";
    }
  }


  // Each stage's program, and the room its ring passes' phases take between two of its
  // exchanges: up to two chunks (a forward and a backward), each at most 9 pass numbers per
  // layer and sequence (a2a+p2p's three for the forward, the recompute and the backward).
  void setup_pipeline() {
    const bool bwd = job_.passes == Passes::kForwardBackward;
    pipeline_ = pp_1f1b_program(pp_, vs_, plan_choice_.grad_accum, bwd, pp_interleaved_warmup(job_.framework));
    int64_t layers = 0;  // the most any stage holds
    for (int n : pp_stage_layers(pp_layout(m_.layers, plan_choice_))) layers = std::max<int64_t>(layers, n);
    const int64_t stride = 2 * layers * mb_ * 9 * ring_.phase_stride() + 2;
    if (stride * (int64_t{pipeline_.messages} + 2) > INT_MAX)
      fail_input(opt_.where, "grad_accum",
                 "the pipeline's " + std::to_string(pipeline_.messages) + " messages and ring steps need more message "
                 "phases than an int holds: fewer micro-batches or layers per stage");
    phase_stride_ = static_cast<int>(stride);
  }

  // --- One rank --------------------------------------------------------------------------

  struct Rank {
    Rank(RankSchedule& rs, const RingContext& ring, int position) : em(rs), ctx(ring), pos(position) {}
    RankEmitter em;
    RingContext ctx;
    std::vector<PairFlops> pairs;  // forward FLOPs against each ring position's block
    RingBufferIds ids;
    int pos = 0;
    int gpu = 0;
    int stage = 0;                 // pipeline stage (0 without a pipeline)
    int units = 0;                 // ring passes emitted (tags)
    int fsdp_group = 0;            // its FSDP group (its TP rank's) and TP group (-1: none)
    int tp_group = -1;
    int reduce_group = 0;          // where its grads are all-reduced (ddp: fsdp_group)
    MicroStepCollectives dp;       // what the current micro-step runs (data_parallel.h)
    int collectives = 0;           // collectives emitted on its FSDP group (their tag)
    int reduce_collectives = 0;    // on its hsdp replicate group (their tag)
    int tp_collectives = 0;        // collectives emitted on its TP group (their tag)
    std::vector<int> a2a_gpus;     // a2a+p2p: its all-to-all group, by a2a index
    std::vector<int> gathers;      // outstanding all-gathers, oldest first
    int scatter = -1;              // outstanding reduce-scatter
    double scatter_bytes = 0;      // its shard (hsdp all-reduces it next)
    bool scatter_reduce = false;   // whether its micro-step all-reduces it (a pipeline's next
                                   // scatter may come from another micro-step)
    int reduce = -1;               // outstanding all-reduce
    double useful_scale = 1;       // 0 while recomputing (MFU does not count recompute)
  };

  int buf(const std::string& label, double bytes, BufferRole role = BufferRole::kAccounting, int blocks = 1) {
    return table_.id(label, bytes, role, blocks);
  }
  // A rank's gathered buffers with their bytes (RingBuffers::gathered in all): all_gather's
  // K,V and dK,dV blocks, or the all-to-all's send and receive staging, half each.
  std::vector<std::pair<int, double>> gathered_buffers(const Rank& r) const {
    std::vector<std::pair<int, double>> out;
    const int B = ring_.gather_blocks;
    if (r.ids.gathered_kv >= 0) out.push_back({r.ids.gathered_kv, B * rb_.kv_block});
    if (r.ids.gathered_dkv >= 0) out.push_back({r.ids.gathered_dkv, B * rb_.dkv_block});
    if (r.ids.a2a_send >= 0) out.push_back({r.ids.a2a_send, rb_.gathered / 2});
    if (r.ids.a2a_recv >= 0) out.push_back({r.ids.a2a_recv, rb_.gathered / 2});
    return out;
  }
  int buf_l(const char* name, int layer, double bytes) {
    return buf(std::string(name) + ".L" + std::to_string(layer), bytes);
  }

  void emit_rank(RankSchedule& rs, int ring, int pos) {
    Rank r(rs, ring_, pos);
    r.ctx.ring_gpus = &ring_gpus_[ring];
    r.gpu = rs.gpu;
    // Ring (d·U_ + i)·tp + t; replica d of the flattened plan is in stage d / dp.
    r.stage = ring / T_ / U_ / plan_choice_.dp;
    r.fsdp_group = pp_ > 1 ? r.stage * T_ + ring % T_ : 0;
    if (T_ > 1) {  // ring = d·tp + t (tensor_parallel.h)
      if (pp_ == 1) r.fsdp_group = ring % T_;
      r.tp_group = fsdp_groups_ + (ring / T_) * P_ + pos;
    }
    if (U_ > 1) {  // ring (d·U_ + i)·tp + t: its a2a group is position pos of rings i = 0..U_-1
      const int t = ring % T_, d = ring / T_ / U_;
      for (int i = 0; i < U_; ++i) r.a2a_gpus.push_back(ring_gpus_[(d * U_ + i) * T_ + t][pos]);
      r.ctx.a2a_gpus = &r.a2a_gpus;
      r.ctx.a2a_index = ring / T_ % U_;
    }
    r.reduce_group = r.fsdp_group;
    if (hsdp_shard_base_ >= 0) {  // ring = d·tp + t (U_ is 1: validate); shard group (d / dp_shard, t)
      const int d = ring / T_, t = ring % T_, ds = choice_.dp_shard;
      r.fsdp_group = hsdp_shard_base_ + (d / ds) * T_ + t;
      r.reduce_group = hsdp_replicate_base_ + (t * ds + d % ds) * P_ + pos;
    }
    const AttentionTiles tiles{choice_.block_q, choice_.block_kv};
    r.pairs.resize(P_);
    for (int j = 0; j < P_; ++j) {  // a2a+p2p's ring: the heads its all-to-all leaves
      r.pairs[j] = attention_pair_flops(layout_, pos, j, job_.causal, ms_.heads / U_, ms_.head_dim, tiles,
                                        holding_.window);
    }
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) {
      r.ids.kv[k] = buf("kv" + std::to_string(k), rb_.kv_block, BufferRole::kKvRing);
    }
    for (int k = 0; k < rb_.dkv_accumulators; ++k) {
      r.ids.acc[k] = buf("dkv_acc" + std::to_string(k), rb_.dkv_block, BufferRole::kDkvAccumulator);
    }
    // a2a's is the head-sharded dK,dV of the whole sequence, which the attention op writes
    // and the second all-to-all sends home: an executor keeps it with its head-sharded view.
    r.ids.dkv_partial = buf("dkv_partial", rb_.dkv_partial,
                            ring_.kind == Strategy::kUlysses ? BufferRole::kAccounting : BufferRole::kDkvPartial);
    if (ring_.kind == Strategy::kAllGatherCp) {
      // RingBuffers::gathered, as the executor backs it: the K,V blocks, then their dK,dV.
      const int B = ring_.gather_blocks;
      r.ids.gathered_kv = buf("gathered_kv", B * rb_.kv_block, BufferRole::kKvGathered, B);
      r.ids.gathered_dkv = buf("gathered_dkv", B * rb_.dkv_block, BufferRole::kDkvGathered, B);
    } else if (rb_.gathered > 0) {  // a2a, a2a+p2p: a block per member of the all-to-all's group
      const int members = U_ > 1 ? U_ : P_;
      r.ids.a2a_send = buf("a2a_send", rb_.gathered / 2, BufferRole::kA2aSend, members);
      r.ids.a2a_recv = buf("a2a_recv", rb_.gathered / 2, BufferRole::kA2aRecv, members);
    }

    RankEmitter& em = r.em;
    em.layer = -1;
    // Each stage holds its own layers' states (memory_model.h).
    const double state_bytes =
        pp_ > 1 ? stage_model_state_bytes(m_, plan_choice_, fabric_.topology().gpu.element_bytes, r.stage,
                                          job_state_bytes(job_, plan_choice_, fabric_.topology().gpu.element_bytes))
                : mem_.model_states;
    const int states = buf(pp_ > 1 ? "model_states.S" + std::to_string(r.stage) : "model_states", state_bytes);
    const int layer_bufs = buf("layer_buffers", mem_.layer_buffers);
    const int reserve = buf("runtime_reserve", mem_.runtime_reserve);
    em.alloc(reserve, mem_.runtime_reserve);
    em.alloc(states, state_bytes);
    em.alloc(layer_bufs, mem_.layer_buffers);
    const bool bwd = job_.passes == Passes::kForwardBackward;
    const int micro_steps = job_.workload == Workload::kStep ? choice_.grad_accum : 1;
    for (int micro = 0; micro < micro_steps && pp_ == 1; ++micro) {
      if (micro_fold_.skips(micro)) continue;
      em.micro_stand_in = micro_fold_.stands_in(micro);
      r.dp = micro_step_collectives(choice_.sharding, micro, micro_steps, G_ / T_);
      switch (job_.workload) {
        case Workload::kAttention: attention_workload(r, bwd); break;
        case Workload::kLayer: layer_workload(r, bwd); break;
        case Workload::kStep: step_workload(r, bwd); break;
      }
    }
    if (pp_ > 1) pipeline_workload(r, bwd);
    em.layer = -1;
    em.step = 0;
    if (job_.workload == Workload::kStep && bwd) {
      // Adam on this GPU's optimizer shard (memory_model.h's state_shards), memory bound:
      // flops = parameters, at the efficiency that gives CostParams::optimizer_s.
      // With pp > 1: its stage's parameters (pp_stage_params, one TP member's).
      const double shard_params = pp_ > 1 ? pp_stage_params(ms_, pp_layout(m_.layers, plan_choice_), r.stage) /
                                                state_shards(plan_choice_).optimizer
                                          : m_.params() / (T_ * state_shards(choice_).optimizer);
      em.compute(ComputeKind::kOptimizer, shard_params, 0,
                 1 / (costs_.optimizer_s(1, optimizer_state_bytes(job_.optimizer)) * costs_.peak_flops), states, -1);
    }
    em.free(layer_bufs);
    em.free(states);
    em.free(reserve);
  }

  // --- Workloads ---------------------------------------------------------------------------

  // Stored activations of the layers not emitted (identical to the emitted ones), and the
  // final hidden state where the workload stops short of the head, so the tracked peak is
  // the whole model's (memory_model.h).
  int alloc_other_activations(Rank& r) {
    double bytes = (m_.layers - out_.layers_emitted) * act_per_layer_;
    if (job_.workload != Workload::kStep) bytes += final_hidden_bytes();
    if (bytes == 0) return -1;
    const int id = buf("activations.other", bytes);
    r.em.alloc(id, bytes);
    return id;
  }
  double final_hidden_bytes() const {  // the memory model's final_hidden
    return mb_ * static_cast<double>(c_) *
           final_hidden_bytes_per_token(m_, fabric_.topology().gpu.element_bytes, T_, holding_.saved_input_bytes);
  }

  // The attention tensors (Q, own K,V, out, lse) plus the rest of a layer's activations.
  LayerStore alloc_store(Rank& r, const std::string& suffix, double rest_bytes, const char* rest) {
    LayerStore s;
    s.q = buf("q" + suffix, rb_.q);
    s.kv = buf("kv_own" + suffix, rb_.kv_block, BufferRole::kKvOwn);
    s.out = buf("out" + suffix, rb_.q);
    s.lse = buf("lse" + suffix, rb_.lse);
    s.rest = buf(rest + suffix, rest_bytes);
    for (int id : {s.q, s.kv, s.out, s.lse, s.rest}) r.em.alloc(id, out_.buffers[id].bytes);
    return s;
  }
  double attention_store_bytes() const { return 2 * rb_.q + rb_.kv_block + rb_.lse; }
  bool full_ckpt() const { return choice_.checkpointing == Checkpointing::kFull; }

  // What a layer keeps from its forward to its backward: everything it stores (none,
  // selective), or its input only (full). A pipeline stage holds several micro-batches'
  // (`micro` >= 0: labels "<name>.L<layer>.m<micro>").
  LayerStore alloc_layer_store(Rank& r, int layer, int micro = -1, double shared_input = 0) {
    const std::string suffix = ".L" + std::to_string(layer) + (micro >= 0 ? ".m" + std::to_string(micro) : "");
    if (!full_ckpt()) return alloc_store(r, suffix, act_per_layer_ - attention_store_bytes() - shared_input, "act");
    LayerStore s;
    s.rest = buf("act" + suffix, act_per_layer_ - shared_input);
    r.em.alloc(s.rest, act_per_layer_ - shared_input);
    return s;
  }
  // Full checkpointing: the layer's activations while its forward runs or is rerun.
  LayerStore alloc_transient_store(Rank& r) {
    return alloc_store(r, "", rb_.recompute - attention_store_bytes(), "recompute");
  }
  void free_store(Rank& r, const LayerStore& s) {
    for (int id : {s.q, s.kv, s.out, s.lse, s.rest}) {
      if (id >= 0) r.em.free(id);
    }
  }

  // Memory-bound work of `bytes_per_token` on this rank's tokens (ElementwiseBytes).
  void elementwise(Rank& r, double bytes_per_token) {
    const double bytes = bytes_per_token * static_cast<double>(c_);
    r.em.compute(ComputeKind::kElementwise, bytes, 0, costs_.elementwise_efficiency(), -1, -1);
  }

  // A layer's linear GEMMs, or with `head` the output head's, at the rate of their size on
  // the micro-step's stacked sequences (CostParams::gemm_flops_per_s, as the cost model).
  void gemm(Rank& r, double flops_per_token, double factor = 1, bool head = false) {
    const double flops = flops_per_token * factor * static_cast<double>(c_);
    const double work = mb_ * static_cast<double>(c_) * (head ? lin_.logits : lin_.layer());
    r.em.compute(ComputeKind::kGemm, flops, flops * r.useful_scale,
                 costs_.gemm_flops_per_s(work, on_curve_) / costs_.peak_flops, -1, -1);
  }

  // Forward ring pass with its transient buffers (fp32 output accumulator, score tiles,
  // K,V ring buffers).
  void attention_forward_phase(Rank& r, int kv_own) {
    RankEmitter& em = r.em;
    const int out_acc = buf("out_acc", rb_.out_acc);
    const int tiles = buf("score_tiles", rb_.score_tiles);
    em.alloc(out_acc, rb_.out_acc);
    em.alloc(tiles, rb_.score_tiles);
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) em.alloc(r.ids.kv[k], rb_.kv_block);
    const std::vector<std::pair<int, double>> gathered = gathered_buffers(r);
    for (auto [id, bytes] : gathered) em.alloc(id, bytes);
    r.ids.kv_own = kv_own;
    ring_pass(r, false);
    for (auto it = gathered.rbegin(); it != gathered.rend(); ++it) em.free(it->first);
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) em.free(r.ids.kv[k]);
    em.free(tiles);
    em.free(out_acc);
  }

  // Backward ring pass with the buffers the memory model's attention phase counts.
  void attention_backward_phase(Rank& r, int kv_own) {
    RankEmitter& em = r.em;
    std::vector<std::pair<int, double>> bufs = {
        {buf("dq", rb_.dq), rb_.dq},           {buf("dout", rb_.dout), rb_.dout},
        {buf("delta", rb_.delta), rb_.delta},  {buf("score_tiles", rb_.score_tiles), rb_.score_tiles},
        {r.ids.dkv_partial, rb_.dkv_partial}};
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) bufs.push_back({r.ids.kv[k], rb_.kv_block});
    for (int k = 0; k < rb_.dkv_accumulators; ++k) bufs.push_back({r.ids.acc[k], rb_.dkv_block});
    for (auto g : gathered_buffers(r)) bufs.push_back(g);
    for (auto [id, bytes] : bufs) em.alloc(id, bytes);
    r.ids.kv_own = kv_own;
    ring_pass(r, true);
    for (auto it = bufs.rbegin(); it != bufs.rend(); ++it) em.free(it->first);
  }

  void ring_pass(Rank& r, bool backward) {
    const RankEmitter::Scope keep(r.em);
    emit_ring_pass(r.ctx, r.ids, r.pairs, r.pos, r.em, r.useful_scale, backward, r.units);
    r.units += ring_pass_units(r.ctx, backward);
  }

  int alloc_grad_stream(Rank& r) {
    const int id = buf("grad_stream", rb_.grad_stream);
    r.em.alloc(id, rb_.grad_stream);
    return id;
  }

  // --- Data-parallel collectives ------------------------------------------------------------
  // Per the plan's sharding level and micro-step (data_parallel.h): each unit (a layer, the
  // embedding, the head) is all-gathered before use, one ahead (prefetch), where the
  // micro-step gathers in that pass; its gradients leave its backward by a reduce-scatter
  // and/or an all-reduce, one of each in flight (hsdp: a unit's all-reduce starts when its
  // reduce-scatter has ended).

  // A member's shard of one TP member's unit over its shard group (hsdp: cp·dp_shard GPUs,
  // else all cp·dp); an all-reduce moves that shard's piece per replica (data_parallel.h).
  double shard_group() const { return static_cast<double>(T_) * shard_group_gpus(plan_choice_); }
  double layer_shard_bytes() const {
    return m_.layer_params() * fabric_.topology().gpu.element_bytes / shard_group();
  }
  double vocab_shard_bytes() const {
    return static_cast<double>(m_.vocab) * m_.hidden * fabric_.topology().gpu.element_bytes / shard_group();
  }
  // `backward`: the gather is for a unit's backward (fsdp's and hsdp's only).
  void gather(Rank& r, double bytes, bool backward) {
    if (!(backward ? r.dp.backward_gather : r.dp.forward_gather)) return;
    r.gathers.push_back(r.em.collective(CollectiveKind::kAllGather, r.fsdp_group, bytes,
                                        buf("layer_buffers", mem_.layer_buffers), r.collectives++));
  }
  void wait_gather(Rank& r) {
    if (r.gathers.empty()) return;  // this pass gathers nothing
    r.em.wait(r.gathers.front());
    r.gathers.erase(r.gathers.begin());
  }
  // `bytes`: the unit's shard in the GPU's element type; the gradients travel in their
  // reduce dtype (Job::grad_reduce_in_fp32), the cost model's DpCosts::rs.
  void scatter(Rank& r, double element_bytes) {
    const double bytes = element_bytes * grad_reduce_element_bytes(job_, fabric_.topology().gpu.element_bytes) /
                         fabric_.topology().gpu.element_bytes;
    if (r.dp.reduce_scatter) {
      const int req = r.em.collective(CollectiveKind::kReduceScatter, r.fsdp_group, bytes,
                                      buf("layer_buffers", mem_.layer_buffers), r.collectives++);
      if (r.scatter >= 0) {
        r.em.wait(r.scatter);
        if (r.scatter_reduce) all_reduce(r, r.scatter_bytes);
      }
      r.scatter = req;
      r.scatter_bytes = bytes;
      r.scatter_reduce = r.dp.all_reduce;
    } else if (r.dp.all_reduce) {
      all_reduce(r, bytes);
    }
  }
  void all_reduce(Rank& r, double shard_bytes) {
    const bool own_group = r.reduce_group != r.fsdp_group;  // hsdp's replicas: their own tags
    const double replicas = own_group ? static_cast<double>(choice_.dp) / choice_.dp_shard : 1;
    const int req = r.em.collective(CollectiveKind::kAllReduce, r.reduce_group, shard_bytes / replicas,
                                    buf("layer_buffers", mem_.layer_buffers),
                                    own_group ? r.reduce_collectives++ : r.collectives++);
    if (r.reduce >= 0) r.em.wait(r.reduce);
    r.reduce = req;
  }
  void finish_scatter(Rank& r) {
    if (r.scatter >= 0) {
      r.em.wait(r.scatter);
      if (r.scatter_reduce) all_reduce(r, r.scatter_bytes);
    }
    r.scatter = -1;
    if (r.reduce >= 0) r.em.wait(r.reduce);
    r.reduce = -1;
  }

  // --- Tensor parallelism ---------------------------------------------------------------------
  // One all-gather (c/tp -> c tokens) or reduce-scatter (c -> c/tp) of the TP group
  // (tensor_parallel.h), waited for at once where not overlapped: the next GEMM needs it.
  // `chunks`: the collective's pieces (tp when overlapped with its GEMM).
  int tp_post(Rank& r, CollectiveKind kind, int chunks = 1) {
    const double bytes = kind == CollectiveKind::kAllGather ? tp_gather_bytes_ : tp_scatter_bytes_;
    return r.em.collective(kind, r.tp_group, bytes / chunks, buf("tp_sequence", 0), r.tp_collectives++);
  }
  void tp_collective(Rank& r, CollectiveKind kind) {
    if (T_ == 1) return;
    r.em.wait(tp_post(r, kind));
  }
  bool tp_overlap() const { return T_ > 1 && choice_.tp_comm_overlap; }
  // The all-gather and the GEMM (`flops` per token) that consumes it. Overlapped: tp chunks
  // of c/tp tokens, chunk k+1's all-gather in flight while chunk k computes.
  void tp_gather_gemm(Rank& r, double flops, double factor = 1) {
    if (!tp_overlap()) {
      tp_collective(r, CollectiveKind::kAllGather);
      gemm(r, flops, factor);
      return;
    }
    int next = tp_post(r, CollectiveKind::kAllGather, T_);
    for (int k = 0; k < T_; ++k) {
      r.em.wait(next);
      if (k + 1 < T_) next = tp_post(r, CollectiveKind::kAllGather, T_);
      gemm(r, flops / T_, factor);
    }
  }
  // The GEMM that produces the reduce-scatter's input, and the reduce-scatter. Overlapped:
  // tp chunks, chunk k's reduce-scatter in flight while chunk k+1 computes.
  void tp_gemm_scatter(Rank& r, double flops, double factor = 1) {
    if (!tp_overlap()) {
      gemm(r, flops, factor);
      tp_collective(r, CollectiveKind::kReduceScatter);
      return;
    }
    int prev = -1;
    for (int k = 0; k < T_; ++k) {
      gemm(r, flops / T_, factor);
      if (prev >= 0) r.em.wait(prev);
      prev = tp_post(r, CollectiveKind::kReduceScatter, T_);
    }
    r.em.wait(prev);
  }
  // The FFN between its all-gather and its reduce-scatter, forward or backward (at
  // kLinearBackwardFactor: the down projection's gradients first). Not overlapped it is one
  // GEMM op; overlapped, the up/gate GEMMs take one collective and the down GEMM the other.
  void tp_ffn(Rank& r, bool backward = false) {
    const double factor = backward ? kLinearBackwardFactor : 1;
    if (!tp_overlap()) {
      tp_collective(r, CollectiveKind::kAllGather);
      gemm(r, lin_.ffn, factor);
      tp_collective(r, CollectiveKind::kReduceScatter);
      return;
    }
    const double up = lin_.ffn_recompute_selective, down = lin_.ffn - up;
    tp_gather_gemm(r, backward ? down : up, factor);
    tp_gemm_scatter(r, backward ? up : down, factor);
  }
  // Attention between its all-gather and its reduce-scatter: QKV, the ring pass, the
  // output projection (backward: in reverse).
  template <class F>
  void tp_attention(Rank& r, F ring, bool backward = false) {
    const double factor = backward ? kLinearBackwardFactor : 1;
    tp_gather_gemm(r, backward ? lin_.out_proj : lin_.qkv, factor);
    ring();
    tp_gemm_scatter(r, backward ? lin_.qkv : lin_.out_proj, factor);
  }

  // --- Layers ------------------------------------------------------------------------------

  // Whether a micro-step's sequence `seq` is emitted (sequence_fold_); stamps its ops.
  bool emit_sequence(Rank& r, int seq) {
    if (sequence_fold_.skips(seq)) return false;
    r.em.sequence_stand_in = sequence_fold_.stands_in(seq);
    return true;
  }

  // A layer's forward or backward starts: prefetch the `prefetch` bytes all-gather (none at
  // 0), then wait for this layer's parameters.
  void begin_layer(Rank& r, int layer, bool backward, double prefetch, bool prefetch_for_backward) {
    r.em.layer = layer;
    r.em.backward = backward;
    r.em.step = 0;
    if (prefetch > 0) gather(r, prefetch, prefetch_for_backward);
    wait_gather(r);
  }

  // Forward of one layer; `next_gather` is what to prefetch (the next layer or the head;
  // `for_backward`: this layer again, for its backward).
  // `shared_input`: of the layer's stored input, bytes another buffer holds (a pipeline
  // chunk's receive buffer, pipeline_stage_buffers).
  LayerStore layer_forward(Rank& r, int layer, double next_gather, bool for_backward = false, int micro = -1,
                           double shared_input = 0) {
    begin_layer(r, layer, false, next_gather, for_backward);
    const LayerStore s = alloc_layer_store(r, layer, micro, shared_input);
    const LayerStore live = full_ckpt() ? alloc_transient_store(r) : s;
    for (int seq = 0; seq < mb_; ++seq) {  // the micro-step's sequences, one after another
      if (!emit_sequence(r, seq)) continue;
      tp_attention(r, [&] { attention_forward_phase(r, live.kv); });
      ffn_phase(r, [&] { tp_ffn(r); });
      elementwise(r, ew_.layer_fwd);
    }
    r.em.sequence_stand_in = false;
    if (full_ckpt()) free_store(r, live);
    return s;
  }

  // Backward of one layer; `prev_gather` is the previous layer's all-gather to prefetch.
  void layer_backward(Rank& r, int layer, const LayerStore& s, double prev_gather) {
    begin_layer(r, layer, true, prev_gather, true);
    // A framework's layer holds every sequence's transients at once (RingBuffers::batch):
    // the other sequences' share, accounted beside the one the loop below allocates.
    const double others = rb_.layer_backward_bytes() - rb_.sequence_backward_bytes();
    const int batch = others > 0 ? buf("batch_transients", others) : -1;
    if (others > 0) r.em.alloc(batch, others);
    for (int seq = 0; seq < mb_; ++seq) {  // the micro-step's sequences, one after another
      if (!emit_sequence(r, seq)) continue;
      LayerStore live = s;
      if (full_ckpt()) {
        live = alloc_transient_store(r);
        recompute(r, [&] {
          tp_attention(r, [&] { attention_forward_phase(r, live.kv); });
          elementwise(r, ew_.layer_fwd);
        });
      }
      ffn_phase(r, [&] {
        // Recompute from the gathered FFN input: the whole FFN again under full (its
        // output reduce-scattered as in the forward), the up/gate GEMMs under selective.
        if (full_ckpt()) recompute(r, [&] { tp_ffn(r); });
        if (choice_.checkpointing == Checkpointing::kSelective)
          recompute(r, [&] { tp_gather_gemm(r, lin_.ffn_recompute_selective); });
        // Backward: the output gradient gathered in, the input gradient scattered out.
        tp_ffn(r, true);
      });
      tp_attention(r, [&] { attention_backward_phase(r, live.kv); }, true);
      elementwise(r, kElementwiseBackwardFactor * ew_.layer_fwd);
      if (full_ckpt()) free_store(r, live);
    }
    r.em.sequence_stand_in = false;
    if (others > 0) r.em.free(batch);
    free_store(r, s);
    scatter(r, layer_shard_bytes());
  }

  template <class F>
  void ffn_phase(Rank& r, F body) {
    const int chunk = buf("ffn_chunk", rb_.ffn_chunk);
    r.em.alloc(chunk, rb_.ffn_chunk);
    body();
    r.em.free(chunk);
  }
  // Recomputed work: executed, not counted as useful (MFU counts model FLOPs once).
  template <class F>
  void recompute(Rank& r, F body) {
    r.useful_scale = 0;
    body();
    r.useful_scale = 1;
  }

  void attention_workload(Rank& r, bool bwd) {
    RankEmitter& em = r.em;
    const int other = alloc_other_activations(r);
    em.layer = 0;
    const LayerStore s = alloc_layer_store(r, 0);
    const LayerStore live = full_ckpt() ? alloc_transient_store(r) : s;
    attention_forward_phase(r, live.kv);
    if (full_ckpt()) free_store(r, live);
    const int grads = bwd ? alloc_grad_stream(r) : -1;
    moment(r, "logits_chunk", rb_.logits_chunk);
    if (bwd) {
      em.backward = true;
      LayerStore again = s;
      if (full_ckpt()) {
        again = alloc_transient_store(r);
        recompute(r, [&] { attention_forward_phase(r, again.kv); });
      }
      moment(r, "ffn_chunk", rb_.ffn_chunk);
      attention_backward_phase(r, again.kv);
      if (full_ckpt()) free_store(r, again);
      em.free(grads);
    }
    free_store(r, s);
    if (other >= 0) em.free(other);
  }

  void layer_workload(Rank& r, bool bwd) {
    const int other = alloc_other_activations(r);
    gather(r, layer_shard_bytes(), false);
    const LayerStore s = layer_forward(r, 0, bwd ? layer_shard_bytes() : 0, true);
    const int grads = bwd ? alloc_grad_stream(r) : -1;
    moment(r, "logits_chunk", rb_.logits_chunk);
    if (bwd) {
      layer_backward(r, 0, s, 0);
      r.em.free(grads);
      finish_scatter(r);
    } else {
      free_store(r, s);
    }
    if (other >= 0) r.em.free(other);
  }

  // A phase's transient buffer held and freed without its work: in a workload that stops
  // short of that phase (the attention workload has no FFN, neither it nor the layer
  // workload a head), the moment a whole step peaks at when the phase is its largest
  // (memory_model.h's working set: the logits chunk or the FFN's, beside the gradient
  // stream and what the layer holds then).
  void moment(Rank& r, const char* name, double bytes) {
    const int id = buf(name, bytes);
    r.em.alloc(id, bytes);
    r.em.free(id);
  }

  // Logits and loss, chunked; their backward right after (the head is still gathered).
  // `layer_below`: a layer's backward follows the head's (not on a pipeline chunk that holds
  // the head alone), whose weights it prefetches.
  void head(Rank& r, bool bwd, bool layer_below = true) {
    RankEmitter& em = r.em;
    if (bwd && layer_below) gather(r, layer_shard_bytes(), true);  // prefetch the last layer for its backward
    const int chunk = buf("logits_chunk", rb_.logits_chunk);
    em.alloc(chunk, rb_.logits_chunk);
    gemm(r, lin_.logits, mb_, true);
    elementwise(r, mb_ * ew_.loss_fwd);
    if (bwd) {
      em.backward = true;
      gemm(r, lin_.logits, mb_ * kLinearBackwardFactor, true);
      elementwise(r, mb_ * ew_.loss_bwd);
    }
    em.free(chunk);
  }

  void step_workload(Rank& r, bool bwd) {
    RankEmitter& em = r.em;
    em.layer = -1;
    em.backward = false;
    const int other = alloc_other_activations(r);
    gather(r, vocab_shard_bytes(), false);  // embedding
    gather(r, layer_shard_bytes(), false);  // layer 0
    wait_gather(r);                  // the embedding lookup needs the table
    std::vector<LayerStore> stores;
    for (int l = 0; l < E_; ++l) {
      stores.push_back(layer_forward(r, l, l + 1 < E_ ? layer_shard_bytes() : vocab_shard_bytes()));
    }
    em.layer = -1;
    em.step = 0;
    wait_gather(r);  // the head
    const int final_hidden = buf("final_hidden", final_hidden_bytes());
    em.alloc(final_hidden, final_hidden_bytes());
    const int grads = bwd ? alloc_grad_stream(r) : -1;
    head(r, bwd);
    if (bwd) {
      scatter(r, vocab_shard_bytes());  // head gradients
      for (int l = E_ - 1; l >= 0; --l) {
        layer_backward(r, l, stores[l], l > 0 ? layer_shard_bytes() : 0);
      }
      em.layer = -1;
      em.step = 0;
      scatter(r, vocab_shard_bytes());  // embedding gradients
      finish_scatter(r);
      em.free(grads);
    } else {
      for (int l = E_ - 1; l >= 0; --l) free_store(r, stores[l]);
    }
    em.free(final_hidden);
    if (other >= 0) em.free(other);
  }

  // --- Pipeline stages -----------------------------------------------------------------------
  // A step of stage r.stage (pipeline_schedule.h): the forwards and backwards of its chunks
  // (virtual stage g = c·pp + s: the layers pipeline_parallel.h's split gives chunk g)
  // for each micro-batch in the program's order, the embedding on the model's first chunk,
  // the head and loss at the start of the backward of its last (which follows that chunk's
  // forward there), and the blocking exchanges with the neighbouring stages. Each chunk runs
  // its micro-batch's data-parallel collectives over the stage's FSDP group as a micro-step
  // does (data_parallel.h).
  void pipeline_workload(Rank& r, bool bwd) {
    RankEmitter& em = r.em;
    const int s = r.stage;
    const int micro_batches = plan_choice_.grad_accum;
    const int data_gpus = G_ / T_ / pp_;
    const int chunks = pp_ * vs_;  // virtual stages of the model
    // The layers [first, end) of the stage's chunk (pipeline_parallel.h's split).
    const PipelineLayout layout = pp_layout(m_.layers, plan_choice_);
    auto chunk_layers = [&](int chunk) {
      const int g = chunk * pp_ + s;
      const int first = pp_chunk_first_layer(layout, g);
      return std::pair<int, int>{first, first + pp_chunk_layer_count(layout, g)};
    };
    em.layer = -1;
    em.backward = false;
    em.step = 0;
    // Each exchange's message (pp_p2p_bytes: split tp ways, whatever the framework), and what
    // the stage holds around it (pipeline_stage_buffers; the last stage's boundary buffer is
    // the final hidden state, the memory model's final_hidden).
    const double message_bytes = pp_p2p_bytes(m_, c_, mb_, fabric_.topology().gpu.element_bytes, T_);
    const PipelineStageBuffers held_at =
        pipeline_stage_buffers(layout, s, job_.framework, bwd, micro_batches, message_bytes, final_hidden_bytes());
    const int boundary = held_at.boundary > 0 ? buf("final_hidden", held_at.boundary) : -1;
    if (boundary >= 0) em.alloc(boundary, held_at.boundary);
    const int receive = held_at.persistent > 0 ? buf("pipeline.receive_buffers", held_at.persistent) : -1;
    if (receive >= 0) em.alloc(receive, held_at.persistent);
    std::map<int, int> outputs;  // by chunk micro-batch: its output, kept for its backward
    em.phase_base = 1;  // ring passes before the stage's first exchange
    std::map<int, std::vector<LayerStore>> stores;  // by chunk micro-batch in flight
    // A chunk's forward starts on the embedding's gather (the model's first chunk) and its
    // first layer's.
    auto first_gathers = [&](int chunk) {
      const auto [first_layer, end_layer] = chunk_layers(chunk);
      if (chunk * pp_ + s == 0) gather(r, vocab_shard_bytes(), false);
      if (first_layer < end_layer) gather(r, layer_shard_bytes(), false);
    };
    // Micro-batch 0's, gathered ahead (pp_gathers_chunks_ahead): chunks 0 and 1 before the
    // first action, chunk c + 1 at chunk c's first forward; `ahead[c]`, chunk c's requests.
    // A chunk's are posted all at once, in the order its forward uses them (the embedding,
    // each layer, the head): Megatron's param_sync_func is the chunk's
    // DistributedDataParallel.start_param_sync, which dispatches every bucket group's
    // all-gather, and the forward pre-hooks then only wait (skip_next_bucket_dispatch under
    // align_param_gather). One layer ahead, as FSDP prefetches, put each chunk's later layers
    // behind the next chunk's first on the communicator.
    std::vector<std::vector<int>> ahead(static_cast<size_t>(vs_));
    auto post_ahead = [&](int chunk) {  // with r.dp micro-batch 0's
      if (chunk >= vs_) return;
      const size_t before = r.gathers.size();
      const auto [first_layer, end_layer] = chunk_layers(chunk);
      first_gathers(chunk);
      for (int l = first_layer + 1; l < end_layer; ++l) gather(r, layer_shard_bytes(), false);
      if (chunk * pp_ + s == chunks - 1) gather(r, vocab_shard_bytes(), false);  // the head
      ahead[static_cast<size_t>(chunk)].assign(r.gathers.begin() + static_cast<long>(before), r.gathers.end());
      r.gathers.resize(before);
    };
    const bool dispatch_ahead = pp_gathers_chunks_ahead(job_.framework, plan_choice_);
    if (dispatch_ahead) {
      r.dp = micro_step_collectives(plan_choice_.sharding, 0, micro_batches, data_gpus);
      post_ahead(0);
      post_ahead(1);
    }
    for (const PipelineAction& a : pipeline_.stages[static_cast<size_t>(s)]) {
      em.layer = -1;
      em.backward = false;
      em.step = 0;
      if (a.kind == PipelineAction::kExchange) {
        // (A PyTorch stage has no boundary buffer: its messages land in its receive buffers.)
        exchange(r, a, boundary >= 0 ? boundary : receive, message_bytes);
        continue;
      }
      const int g = a.chunk * pp_ + s;
      const bool first = g == 0, last = g == chunks - 1;  // the model's first and last chunks
      const auto [first_layer, end_layer] = chunk_layers(a.chunk);
      r.dp = micro_step_collectives(plan_choice_.sharding, a.micro, micro_batches, data_gpus);
      const int key = a.micro * vs_ + a.chunk;
      // Stored activations are labelled by micro-batch (chunks hold different layers).
      std::vector<LayerStore>& held = stores[key];
      // A chunk of no layers holds only the embedding or only the head (a split that counts
      // them as layers, pipeline_parallel.h).
      const bool empty = first_layer == end_layer;
      if (a.kind == PipelineAction::kForward) {
        const bool posted = dispatch_ahead && a.micro == 0;
        if (posted) {
          // Its gathers are in flight: wait for them first (a head's may be outstanding).
          const std::vector<int>& mine = ahead[static_cast<size_t>(a.chunk)];
          r.gathers.insert(r.gathers.begin(), mine.begin(), mine.end());
          if (a.chunk >= 1) post_ahead(a.chunk + 1);
        } else {
          first_gathers(a.chunk);
        }
        if (first) wait_gather(r);  // the embedding lookup needs the table
        if (empty && last && !posted) gather(r, vocab_shard_bytes(), false);  // the head, which no layer prefetched
        for (int l = first_layer; l < end_layer; ++l) {
          const double next = posted ? 0 : l + 1 < end_layer ? layer_shard_bytes() : last ? vocab_shard_bytes() : 0;
          const double shared = l == first_layer ? held_at.shared_input[static_cast<size_t>(a.chunk)] : 0;
          held.push_back(layer_forward(r, l, next, false, a.micro, shared));
        }
        const double output_bytes = held_at.held_output[static_cast<size_t>(a.chunk)];
        int output = -1;
        if (output_bytes > 0) {
          output = buf("pipeline.output.c" + std::to_string(a.chunk) + ".m" + std::to_string(a.micro), output_bytes);
          em.alloc(output, output_bytes);
        }
        if (bwd) {
          if (output >= 0) outputs[key] = output;
          continue;
        }
        em.layer = -1;
        if (last) {
          wait_gather(r);  // the head
          head(r, false);
        }
        for (auto it = held.rbegin(); it != held.rend(); ++it) free_store(r, *it);
        stores.erase(key);
        if (output >= 0) em.free(output);
        continue;
      }
      const int grads = alloc_grad_stream(r);
      if (last) {
        wait_gather(r);  // the head, prefetched by the last layer's forward
        head(r, true, !empty);
        scatter(r, vocab_shard_bytes());  // head gradients
      } else if (!empty) {
        gather(r, layer_shard_bytes(), true);  // the chunk's last layer, for its backward
      }
      for (int l = end_layer - 1; l >= first_layer; --l) {
        layer_backward(r, l, held[static_cast<size_t>(l - first_layer)], l > first_layer ? layer_shard_bytes() : 0);
      }
      stores.erase(key);
      if (auto out = outputs.find(key); out != outputs.end()) {
        em.free(out->second);
        outputs.erase(out);
      }
      em.layer = -1;
      em.step = 0;
      if (first) scatter(r, vocab_shard_bytes());  // embedding gradients
      // The chunk's last reduce-scatter stays in flight behind the stage's next actions, as
      // Megatron's and FSDP's asynchronous gradient reduction runs it (Llama 3 paper 3.3.2:
      // data parallelism "reducing gradients" asynchronously): the next scatter waits for it.
      em.free(grads);
    }
    em.layer = -1;
    em.backward = false;
    em.step = 0;
    finish_scatter(r);  // the stage's last gradients, before the optimizer step
    if (boundary >= 0) em.free(boundary);
    if (receive >= 0) em.free(receive);
    em.phase_base = 0;
  }

  // One blocking exchange with the neighbouring stages (GPU g ± G/pp, the last stage's
  // next the first's when interleaved): its messages posted in their phase order, each
  // as phase (phase + 1)·phase_stride_, then waited for. The ring passes until the next
  // exchange number their phases after its last (setup_pipeline leaves them room), so a
  // stage's phases never decrease and both ends of each message state the same one.
  void exchange(Rank& r, const PipelineAction& a, int buffer, double bytes) {
    RankEmitter& em = r.em;
    const int per_stage = G_ / pp_;
    em.phase_base = 0;
    std::vector<int> reqs;
    int phase = 0;
    for (const PipelineMessage& msg : a.messages) {
      const int peer = msg.peer * per_stage + r.gpu % per_stage;
      phase = (msg.phase + 1) * phase_stride_;
      em.backward = msg.gradient;  // gradients go up; activations down
      reqs.push_back(em.transfer(msg.send ? OpKind::kSend : OpKind::kRecv, peer, bytes, buffer, msg.tag, phase));
    }
    em.wait_all(reqs);
    em.phase_base = phase + 1 - r.units * ring_.phase_stride();
  }
};

}  // namespace

OpSchedule generate_schedule(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                             const ScheduleOptions& options) {
  return Generator(plan, model, fabric, options).run();
}

}  // namespace rm
