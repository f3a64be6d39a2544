#include "planner/search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "planner/attention_work.h"
#include "planner/data_parallel.h"
#include "planner/input_error.h"
#include "planner/pipeline_parallel.h"
#include "planner/ring_order.h"
#include "planner/tensor_parallel.h"

namespace rm {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

namespace {

// Ring sizes to try over `groups` TP groups of a pipeline stage (cp x dp = groups): the
// pinned cp, the one a pinned dp leaves, or every divisor; `note` hears why a pinned dp
// cannot split these groups.
std::vector<int> cp_candidates(int groups, const SearchPins& pins, const std::function<void(const std::string&)>& note) {
  if (pins.dp) {
    const int dp = *pins.dp;
    const std::string of = " the " + std::to_string(groups) + " TP groups of a pipeline stage";
    if (groups % dp != 0) {
      note("dp " + std::to_string(dp) + " does not divide" + of);
      return {};
    }
    if (pins.cp && *pins.cp * dp != groups) {
      note("cp " + std::to_string(*pins.cp) + " x dp " + std::to_string(dp) + " is not" + of);
      return {};
    }
    return {groups / dp};
  }
  return pins.cp ? std::vector<int>{*pins.cp} : divisors(groups);
}

}  // namespace

Planner::Planner(const ModelSpec& model, const Fabric& fabric, const CostParams& cost)
    : model_(model), fabric_(fabric), cost_(model, fabric, cost) {}

std::vector<std::pair<std::string, std::vector<int>>> Planner::orders(int cp, Schedule schedule,
                                                                      const SearchPins& pins) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  const int G = fabric_.gpus();
  auto want = [&](const char* name) { return !pins.order || *pins.order == name; };
  std::vector<int> nm = node_major_order(G), sn = snake_order(fabric_);
  // The snake is listed first so that on a tie (rings inside one node) it is kept.
  const bool same = nm == sn || cp == 1;
  if (want("snake") && !same) out.emplace_back("snake", sn);
  if (want("node-major")) out.emplace_back("node-major", nm);
  if (want("snake") && same && pins.order) out.emplace_back("snake", sn);
  const bool both = schedule == Schedule::kBidirectional;
  if (want("searched") && schedule != Schedule::kTwoLevel && cp >= 3 &&
      (fabric_is_irregular(fabric_.topology()) || pins.order)) {
    auto it = std::find_if(searched_.begin(), searched_.end(), [&](const auto& s) {
      return std::get<0>(s) == cp && std::get<1>(s) == both;
    });
    if (it == searched_.end()) {
      const CostParams& c = cost_.cost();
      const std::vector<int>& start =
          max_link_load_s_per_byte(fabric_, c, sn, cp, both) <= max_link_load_s_per_byte(fabric_, c, nm, cp, both)
              ? sn
              : nm;
      searched_.emplace_back(cp, both, search_order(fabric_, c, cp, both, start));
      it = std::prev(searched_.end());
    }
    out.emplace_back("searched", std::get<2>(*it));
  }
  return out;
}

namespace {

// Micro-batches to try for `job` on `dp` rings: the pin (none when it is more than a ring's
// share of the batch: `note` hears why), or kMicroBatches up to the sequences a ring has in
// a step (step workloads only; others run one sequence).
std::vector<int> micro_batches(const Job& job, int dp, const SearchPins& pins,
                               const std::function<void(const std::string&)>& note) {
  if (pins.micro_batch) {
    const std::string why = micro_batch_why_invalid(job, *pins.micro_batch, dp);
    if (why.empty()) return {*pins.micro_batch};
    note(why);
    return {};
  }
  if (job.workload != Workload::kStep) return {1};
  const int64_t per_ring = (sequences_per_step(job) + dp - 1) / dp;
  std::vector<int> out;
  for (int mb : kMicroBatches)
    if (mb == 1 || mb <= per_ring) out.push_back(mb);
  return out;
}

// The sharding levels to try for `ch` (data_parallel.h): the pin, or every level; one
// (fsdp) when no two GPUs of a TP rank hold the same weights (all levels are the same).
// hsdp takes its node-sized shard group (hsdp_dp_shard) and is left out where that leaves
// fewer than two replicas, or where the plan's CP kind or pipeline stages rule it out
// (hsdp_why_not); `note` hears why a pinned level cannot run.
std::vector<Sharding> sharding_levels(const PlanChoice& ch, int gpus_per_node, const SearchPins& pins,
                                      const std::function<void(const std::string&)>& note) {
  std::vector<Sharding> out;
  for (Sharding s : pins.sharding ? std::vector<Sharding>{*pins.sharding}
                                  : std::vector<Sharding>(std::begin(kShardingLevels), std::end(kShardingLevels))) {
    const std::string hsdp_why = s == Sharding::kHsdp ? hsdp_why_not(ch) : "";
    if (!hsdp_why.empty()) {
      if (pins.sharding) note(hsdp_why);
      continue;
    }
    if (s == Sharding::kHsdp && hsdp_dp_shard(ch.tp, ch.cp, ch.dp, gpus_per_node) == 0) {
      if (pins.sharding) {
        note("hsdp shards inside a node and replicates across at least 2 replica groups: dp " +
             std::to_string(ch.dp) + " (tp " + std::to_string(ch.tp) + ", cp " + std::to_string(ch.cp) +
             ") leaves no such split on " + std::to_string(gpus_per_node) + "-GPU nodes");
      }
      continue;
    }
    if (!pins.sharding && s != Sharding::kFsdp && ch.cp * ch.dp == 1) continue;
    out.push_back(s);
  }
  return out;
}

// A pipeline cut the search tries: virtual stages per rank and the split's accounting
// (pipeline_parallel.h's PipelineLayout).
struct PipelineCut {
  int v = 1;
  bool embedding = false;
  bool loss = false;
};

// The cuts to try for pp: each virtual stage count (the pin, or 1 and those of
// kVirtualStages) with the plain split and, where it lightens the heaviest stage, the one
// counting the embedding and the loss (both pinned as pinned; one pinned, the other both
// ways), where they cut (pp_why_invalid). Lightens: the stage's layers plus, on the last,
// the head in layers' worth of weights (its GEMMs' share: Llama 3 8B's head weighs 2.4
// layers, Llama 2 7B's 0.65, where moving one layer off the last stage loses).
// pp = 1: the pins' one cut, which pp_degrees refuses unless it is the plain one.
std::vector<PipelineCut> pipeline_cuts(const ModelSpec& m, int pp, const SearchPins& pins) {
  const bool pinned = pins.account_for_embedding_in_pipeline_split || pins.account_for_loss_in_pipeline_split;
  if (pp == 1)
    return {{pins.virtual_stages.value_or(1), pins.account_for_embedding_in_pipeline_split.value_or(false),
             pins.account_for_loss_in_pipeline_split.value_or(false)}};
  std::vector<std::pair<bool, bool>> accountings;
  if (!pinned) {
    accountings = {{false, false}, {true, true}};
  } else {
    for (bool e : pins.account_for_embedding_in_pipeline_split ? std::vector<bool>{*pins.account_for_embedding_in_pipeline_split}
                                                               : std::vector<bool>{false, true})
      for (bool l : pins.account_for_loss_in_pipeline_split ? std::vector<bool>{*pins.account_for_loss_in_pipeline_split}
                                                            : std::vector<bool>{false, true})
        accountings.emplace_back(e, l);
  }
  const double head = static_cast<double>(m.vocab) * m.hidden / std::max(1.0, m.layer_params());
  auto heaviest = [&](const PipelineLayout& l) {
    double most = 0;
    for (int s : pp_peak_stage_candidates(pp)) most = std::max(most, pp_stage_layer_count(l, s) + (s == pp - 1 ? head : 0.0));
    return most;
  };
  std::vector<PipelineCut> out;
  for (const auto& [e, l] : accountings) {
    for (int v : pins.virtual_stages ? std::vector<int>{*pins.virtual_stages}
                                     : std::vector<int>(std::begin(kVirtualStages), std::end(kVirtualStages))) {
      const PipelineLayout cut{m.layers, pp, v, e, l};
      // pp stands in for a multiple of pp micro-batches (checked per candidate).
      if (!pp_why_invalid(cut, pp).empty()) continue;
      const PipelineLayout plain{m.layers, pp, v};
      if (!pinned && e && pp_why_invalid(plain, pp).empty() && heaviest(cut) >= heaviest(plain)) continue;
      out.push_back({v, e, l});
    }
  }
  return out;
}

// The tokens/s `p` would reach were `seconds` of its step gone.
double rate_without(const Prediction& p, double seconds) {
  const double floor_s = p.step_time_s - seconds;
  return seconds <= 0 ? p.tokens_per_s
         : floor_s > 0 ? p.tokens_per_s * p.step_time_s / floor_s
                       : std::numeric_limits<double>::infinity();
}

// Prices `ch` for each micro-batch the pins allow (fitting grad_accum to it), sharding
// level, virtual stage count and checkpointing policy, offering each to `best`; memory grows with the
// micro-batch, with each level's unsharded states and with virtual stages, so each stops at
// its first misfit. Interleaving needs grad_accum a multiple of pp (pipeline_parallel.h):
// other counts are skipped, and `note` hears it. Exact pruning: levels other than fsdp hold
// more memory than fsdp, so when nothing fits fsdp is the least-memory answer and the others
// are not priced where their memory does not fit; when fsdp fits, no other level can take
// less than fsdp's step less its exposed data-parallel time (the same compute at the same or
// a later checkpointing policy, an optimizer shard at least as large), so they are not priced
// when that bound, at fsdp's best virtual stage count, does not beat the best plan so far
// (`offer` returns its tokens/s, 0 while none fits).
// Each candidate with tp > 1 is priced with its TP collectives waited at once and
// overlapped in chunks (tensor_parallel.h; neither is always faster), or as pinned; the
// two hold the same memory.
template <class Offer>
int64_t offer_micro_batches(CostModel& cost, const Job& job, PlanChoice ch, const RingPatterns& pat,
                            const std::vector<Checkpointing>& ckpts, Offer offer,
                            const std::function<void(const std::string&)>& note, const SearchPins& pins) {
  const std::vector<int> mbs = micro_batches(job, ch.dp, pins, note);
  const std::vector<Sharding> levels = sharding_levels(ch, cost.fabric().topology().gpus_per_node, pins, note);
  const std::vector<PipelineCut> cuts = pipeline_cuts(cost.model(), ch.pp, pins);
  const std::vector<bool> overlaps = ch.tp == 1 ? std::vector<bool>{false}
                                     : pins.tp_comm_overlap ? std::vector<bool>{*pins.tp_comm_overlap}
                                                            : std::vector<bool>{false, true};
  const int64_t seqs = sequences_per_step(job);
  const ModelSpec& m = cost.model();
  const GpuSpec& gpu = cost.fabric().topology().gpu;
  int64_t evaluated = 0;
  for (int mb : mbs) {
    ch.micro_batch = mb;
    ch.grad_accum = static_cast<int>((seqs + int64_t{ch.dp} * mb - 1) / (int64_t{ch.dp} * mb));
    bool fitted = false;
    for (Sharding level : levels) {
      ch.sharding = level;
      ch.dp_shard = level == Sharding::kHsdp
                        ? hsdp_dp_shard(ch.tp, ch.cp, ch.dp, cost.fabric().topology().gpus_per_node)
                        : 1;
      const bool must_price = level == Sharding::kFsdp || levels.size() == 1;
      double fsdp_bound = -1;  // the fastest any level could be (fsdp only; -1: none fits)
      double best_rate = 0;
      bool exhausted[2][2] = {};  // accountings whose smaller virtual stage counts did not fit
      for (const PipelineCut& cut : cuts) {
        if (exhausted[cut.embedding][cut.loss]) continue;
        ch.virtual_stages = cut.v;
        ch.account_for_embedding_in_pipeline_split = cut.embedding;
        ch.account_for_loss_in_pipeline_split = cut.loss;
        const int v = cut.v;
        if (v > 1 && ch.grad_accum % ch.pp != 0) {
          note(pp_why_invalid(pp_layout(cost.model().layers, ch), ch.grad_accum));
          continue;
        }
        bool v_fitted = false;
        for (Checkpointing ck : ckpts) {
          ch.checkpointing = ck;
          if (!must_price && plan_memory(m, job, ch, gpu).total() > gpu.memory_bytes)
            continue;
          bool fits = false;
          for (size_t k = 0; k < overlaps.size(); ++k) {
            ch.tp_comm_overlap = overlaps[k];
            if (pins.refusal) {  // neither priced nor a fit
              const std::string why = pins.refusal(job, ch);
              if (!why.empty()) {
                note(why);
                continue;
              }
            }
            const Prediction p = cost.price(job, ch, pat);
            ++evaluated;
            best_rate = offer(ch, p);
            fits = p.fits;
            if (p.fits && level == Sharding::kFsdp)
              // No level is faster than fsdp less its exposed collectives and what its
              // regathered weights cost its GEMMs (CostModel::regather_bound_s).
              fsdp_bound = std::max(fsdp_bound, rate_without(p, p.fsdp_exposed_s + cost.regather_bound_s(job, ch, p)));
            // Overlap only shortens the TP collectives, in the same memory, and each
            // overlapped region still waits for one chunk collective of 1/tp of the bytes, at
            // least 1/tp of the waited one's time (tensor_parallel.h); the data-parallel
            // collectives lose the window the waited TP collectives gave them, but no longer
            // slow those where they share links (PassShare): with pp 1 no overlapped step is
            // shorter than this one less (1 - 1/tp) of its TP time and its exposed
            // data-parallel time, so it is priced only where that could win.
            const double saved = p.tp_comm_s * (1 - 1.0 / ch.tp) + p.fsdp_exposed_s;
            if (k == 0 && overlaps.size() > 1 && ch.pp == 1 &&
                (!p.fits || rate_without(p, saved) <= best_rate * (1 + 1e-9))) {
              if (p.fits && level == Sharding::kFsdp)
                fsdp_bound = std::max(fsdp_bound, rate_without(p, saved + cost.regather_bound_s(job, ch, p)));
              break;
            }
          }
          if (fits) {
            fitted = v_fitted = true;
            break;  // later policies only add recompute
          }
        }
        // More virtual stages only add in-flight activations.
        if (!v_fitted) exhausted[cut.embedding][cut.loss] = true;
      }
      if (level == Sharding::kFsdp && fsdp_bound >= 0 && fsdp_bound <= best_rate * (1 + 1e-9)) break;
    }
    if (!fitted && mb > 1) break;  // more sequences only add memory
  }
  return evaluated;
}

}  // namespace

// Throughput, not step time: for the step workload every candidate prices the same batch,
// so that is the shorter step; for attention and layer a step is one micro-step of
// min(sequences, dp) sequences, so step times of different dp do not compare.
bool better_pick(const Prediction& a, const Prediction& b) {
  if (a.fits != b.fits) return a.fits;
  if (a.fits) return a.tokens_per_s > b.tokens_per_s * (1 + 1e-9);
  return a.memory_bytes_per_gpu < b.memory_bytes_per_gpu;
}

namespace {

// The best plan offered so far (better_pick).
struct Best {
  Plan plan;
  bool have = false;
  // Returns the best fitting plan's tokens/s after the offer (0 while none fits).
  double offer(const Job& job, const PlanChoice& ch, const Prediction& p) {
    if (!have || better_pick(p, plan.predicted)) {
      plan.job = job;
      plan.choice = ch;
      plan.predicted = p;
      have = true;
    }
    return have && plan.predicted.fits ? plan.predicted.tokens_per_s : 0;
  }
};

// The (pp, tp) pairs to search: each pipeline stage of G / pp GPUs split into TP groups.
std::vector<std::pair<int, int>> stage_shapes(int gpus, const std::vector<int>& pps, const std::vector<int>& tps,
                                              const std::function<void(const std::string&)>& note) {
  std::vector<std::pair<int, int>> out;
  for (int pp : pps) {
    for (int tp : tps) {
      if ((gpus / pp) % tp == 0) out.emplace_back(pp, tp);
      else if (pps.size() == 1 && tps.size() == 1) note("tp " + std::to_string(tp) + " does not divide the " + std::to_string(gpus / pp) + " GPUs of a pipeline stage");
    }
  }
  return out;
}

template <typename T>
std::vector<T> pinned_or(const std::optional<T>& pin, std::vector<T> all) {
  if (pin) return {*pin};
  return all;
}

// " with --cp 16 --schedule flat" for the pins set, "" for none: the options to revisit.
std::string pins_text(const SearchPins& p) {
  std::string s;
  auto add = [&s](const char* opt, const std::string& v) { s += std::string(" ") + opt + " " + v; };
  if (p.cp_comm_type) add("--cp-comm-type", cp_comm_type(*p.cp_comm_type));
  if (p.tp) add("--tp", std::to_string(*p.tp));
  if (p.tp_comm_overlap) s += *p.tp_comm_overlap ? " --tp-comm-overlap" : " --no-tp-comm-overlap";
  if (p.cp) add("--cp", std::to_string(*p.cp));
  if (p.dp) add("--dp", std::to_string(*p.dp));
  if (p.cp_a2a && p.cp)
    add("--hierarchical-context-parallel-sizes", std::to_string(*p.cp_a2a) + " " + std::to_string(*p.cp / *p.cp_a2a));
  if (p.schedule) add("--schedule", to_string(*p.schedule));
  if (p.order) add("--order", *p.order);
  if (p.load_balance) add("--load-balance", to_string(*p.load_balance));
  if (p.block_q) add("--block-q", std::to_string(*p.block_q));
  if (p.block_kv) add("--block-kv", std::to_string(*p.block_kv));
  if (p.kv_subblocks) add("--kv-subblocks", std::to_string(*p.kv_subblocks));
  if (p.checkpointing) add("--checkpointing", to_string(*p.checkpointing));
  if (p.micro_batch) add("--micro-batch", std::to_string(*p.micro_batch));
  if (p.sharding) add("--sharding", to_string(*p.sharding));
  if (p.pp) add("--pp", std::to_string(*p.pp));
  if (p.virtual_stages) add("--virtual-stages", std::to_string(*p.virtual_stages));
  for (const auto& [pin, flag] : {std::pair{p.account_for_embedding_in_pipeline_split, "embedding"},
                                  std::pair{p.account_for_loss_in_pipeline_split, "loss"}})
    if (pin) s += std::string(*pin ? " --" : " --no-") + "account-for-" + flag + "-in-pipeline-split";
  return s.empty() ? s : " with" + s;
}

// The search found no plan of `kind` ("ring", "all_gather", ...): says which pins and why.
[[noreturn]] void throw_no_plan(const std::string& kind, const SearchPins& pins, const std::vector<std::string>& reasons) {
  std::string msg = "no " + kind + " plan can run this job" + pins_text(pins);
  for (size_t i = 0; i < reasons.size(); ++i) msg += (i == 0 ? ": " : "; ") + reasons[i];
  throw InputError(msg);
}

// The a2a degrees a CP group of `cp` GPUs tries: a2a+p2p's pin or every proper divisor
// >= 2 (why_invalid drops those the heads or the node cannot take); {1} for other kinds.
std::vector<int> usp_a2a_degrees(Strategy kind, int cp, const SearchPins& pins) {
  if (kind != Strategy::kUsp) return {1};
  if (pins.cp_a2a) return {*pins.cp_a2a};
  std::vector<int> out;
  for (int a2a : divisors(cp))
    if (a2a >= 2 && a2a < cp) out.push_back(a2a);
  return out;
}

}  // namespace

std::vector<int> Planner::tp_degrees(const SearchPins& pins, const std::function<void(const std::string&)>& note) const {
  const int G = fabric_.gpus();
  std::vector<int> out;
  for (int tp : pins.tp ? std::vector<int>{*pins.tp}
                        : std::vector<int>(std::begin(kTensorParallelDegrees), std::end(kTensorParallelDegrees))) {
    std::string why = tp_why_invalid(model_, tp, fabric_.topology().gpus_per_node);
    if (why.empty() && G % tp != 0)
      why = "tp " + std::to_string(tp) + " does not divide the " + std::to_string(G) + " GPUs";
    if (why.empty()) out.push_back(tp);
    else if (pins.tp) note(why);
  }
  return out;
}

std::vector<int> Planner::pp_degrees(const Job& job, const SearchPins& pins,
                                     const std::function<void(const std::string&)>& note) const {
  const int G = fabric_.gpus();
  if (job.workload != Workload::kStep) {
    if (pins.pp && *pins.pp != 1) {
      note("pipeline parallelism applies to step workloads (pp " + std::to_string(*pins.pp) + ")");
      return {};
    }
    return {1};
  }
  std::vector<int> out;
  for (int pp : pins.pp ? std::vector<int>{*pins.pp}
                        : std::vector<int>(std::begin(kPipelineParallelDegrees), std::end(kPipelineParallelDegrees))) {
    // The micro-batch count is checked per candidate: pp stands in for a multiple of pp here.
    // Valid when a cut is left to try (pipeline_cuts); else why the pinned or plain one fails.
    const PipelineLayout asked{model_.layers, pp, pins.virtual_stages.value_or(1),
                               pins.account_for_embedding_in_pipeline_split.value_or(false),
                               pins.account_for_loss_in_pipeline_split.value_or(false)};
    std::string why = pp_why_invalid(asked, pp);
    if (pp > 1 && !pipeline_cuts(model_, pp, pins).empty()) why.clear();
    else if (why.empty() && pp > 1) why = "no pipeline split of the " + std::to_string(model_.layers) + " layers on pp " + std::to_string(pp) + " works with these pins";
    if (why.empty() && G % pp != 0)
      why = "pp " + std::to_string(pp) + " does not divide the " + std::to_string(G) + " GPUs";
    if (why.empty()) out.push_back(pp);
    else if (pins.pp || pins.virtual_stages) note(why);
  }
  return out;
}

void Planner::searching(Strategy kind, int pp, int tp, int cp, size_t shape, size_t shapes) const {
  if (!progress_) return;
  progress_(std::string("searching ") + cp_comm_type(kind) + " plans at pp " + std::to_string(pp) + " x tp " +
            std::to_string(tp) + ", cp " + std::to_string(cp) + " (stage shape " + std::to_string(shape + 1) +
            " of " + std::to_string(shapes) + ")");
}

Plan Planner::best_ring_plan(const Job& job, const SearchPins& pins, SearchStats* stats) {
  // A caller pinning another kind wants best_plan: pricing the p2p ring instead would answer
  // a question it did not ask.
  if (pins.cp_comm_type && *pins.cp_comm_type != Strategy::kRing)
    throw InputError(std::string("the p2p ring's search cannot honour --cp-comm-type ") +
                     cp_comm_type(*pins.cp_comm_type) + " (best_plan searches the pinned kind)");
  const int G = fabric_.gpus();
  const int64_t seqs = sequences_per_step(job);
  Best best;
  // Why candidates were invalid: the first few distinct reasons, for the message when
  // none is valid.
  std::vector<std::string> reasons;
  auto note = [&reasons](const std::string& why) {
    if (reasons.size() < 3 && std::find(reasons.begin(), reasons.end(), why) == reasons.end())
      reasons.push_back(why);
  };
  std::string tile_reason;
  SearchStats local;
  const std::vector<int> tps = tp_degrees(pins, note);
  // A sliding window shorter than the sequence: the flat ring over contiguous chunks, which
  // the window balances itself and cuts short (attention_work.h); zigzag and striped would
  // spread the window over every block, and the other rings carry every block.
  const bool windowed = effective_window(model_, job) > 0;
  std::vector<Schedule> schedules = pinned_or<Schedule>(
      pins.schedule, windowed ? std::vector<Schedule>{Schedule::kFlat}
                              : std::vector<Schedule>{Schedule::kFlat, Schedule::kBidirectional,
                                                      Schedule::kTwoLevel});
  std::vector<LoadBalance> lbs = pinned_or<LoadBalance>(
      pins.load_balance,
      job.causal && !windowed
          ? std::vector<LoadBalance>{LoadBalance::kZigzag, LoadBalance::kStriped, LoadBalance::kContiguous}
          : std::vector<LoadBalance>{LoadBalance::kContiguous});
  std::vector<int> bqs = pins.block_q ? std::vector<int>{*pins.block_q}
                                      : std::vector<int>(std::begin(kTileSizes), std::end(kTileSizes));
  std::vector<int> bkvs = pins.block_kv ? std::vector<int>{*pins.block_kv}
                                        : std::vector<int>(std::begin(kTileSizes), std::end(kTileSizes));
  std::vector<int> subs = pins.kv_subblocks ? std::vector<int>{*pins.kv_subblocks} : std::vector<int>{1};
  std::vector<Checkpointing> ckpts = pinned_or<Checkpointing>(
      pins.checkpointing, {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull});
  const int64_t unpinned_subs = pins.kv_subblocks ? 1 : std::size(kKvSubblocks);

  const auto shapes = stage_shapes(G, pp_degrees(job, pins, note), tps, note);
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    const auto [pp, tp] = shapes[shape];
    // Each ring position is a TP group of tp GPUs (tensor_parallel.h) in one of pp
    // pipeline stages (pipeline_parallel.h): cp x dp = G / (tp x pp).
    const int groups = G / tp / pp;
    for (int cp : cp_candidates(groups, pins, note)) {
      searching(Strategy::kRing, pp, tp, cp, shape, shapes.size());
      if (cp < 1 || groups % cp != 0) {
        note("cp " + std::to_string(cp) + " does not divide the " + std::to_string(groups) +
             (tp > 1 ? " TP groups" : " GPUs"));
        continue;
      }
      for (Schedule sched : schedules) {
        // A ring of one GPU has no schedule: evaluate it once, as flat.
        if (cp == 1 && sched != Schedule::kFlat && !pins.schedule) continue;
        if (tp > 1 && sched == Schedule::kTwoLevel) {  // its inner ring is the node's GPUs
          if (pins.schedule) note("a two-level ring runs with tp = 1 (its inner ring is the node's GPUs)");
          continue;
        }
        // With tensor parallelism the one rank order: TP innermost (tensor_parallel.h).
        // With pipeline stages the tp-cp-dp-pp order (stages outermost).
        std::vector<std::pair<std::string, std::vector<int>>> ords;
        if (tp == 1 && pp == 1) ords = orders(cp, sched, pins);
        else if (!pins.order || *pins.order == "node-major")
          ords.emplace_back("node-major", tp_order(tp, cp, groups / cp * pp));
        else if (tp > 1) note("with tp > 1 the order is node-major (the tp-cp-dp rank order), not " + *pins.order);
        else note("with pp > 1 the order is node-major (the tp-cp-dp-pp rank order), not " + *pins.order);
        if (ords.empty() && pins.order && tp == 1) {  // only "searched" can be empty
          note(sched == Schedule::kTwoLevel
                   ? "the searched order is for flat and bidirectional rings (not two-level)"
                   : "the searched order needs cp >= 3 (cp " + std::to_string(cp) + ")");
        }
        for (const auto& [order_name, order] : ords) {
          PlanChoice ch;
          ch.strategy = Strategy::kRing;
          ch.tp = tp;
          ch.pp = pp;
          ch.cp = cp;
          ch.dp = groups / cp;
          ch.schedule = sched;
          ch.order_name = order_name;
          ch.order = order;
          const RingPatterns* pat = nullptr;
          for (LoadBalance lb : lbs) {
            ch.load_balance = lb;
            for (int bq : bqs) {
              for (int bkv : bkvs) {
                ch.block_q = bq;
                ch.block_kv = bkv;
                for (int sub : subs) {
                  ch.kv_subblocks = sub;
                  local.candidates += static_cast<int64_t>(ckpts.size()) * unpinned_subs;
                  ch.checkpointing = ckpts.front();
                  const std::string why = cost_.why_invalid(job, ch);
                  if (!why.empty()) {
                    // Tiles too big for on-chip memory are the grid's doing, not the
                    // user's: said only when nothing else explains a failed search.
                    if (!(pins.block_q && pins.block_kv) &&
                        !cost_.cost().attention.fits(bq, bkv, model_.head_dim)) {
                      if (tile_reason.empty()) tile_reason = why;
                    } else {
                      note(why);
                    }
                    continue;
                  }
                  if (!pat) pat = &cost_.ring_patterns(cp, ch.dp * pp, sched, order);
                  local.evaluated += offer_micro_batches(
                      cost_, job, ch, *pat, ckpts,
                      [&](const PlanChoice& c, const Prediction& p) { return best.offer(job, c, p); }, note, pins);
                }
              }
            }
          }
        }
      }
    }
  }
  if (stats) {
    stats->candidates += local.candidates;
    stats->evaluated += local.evaluated;
  }
  if (!best.have) {
    if (reasons.empty() && !tile_reason.empty()) reasons.push_back(tile_reason);
    throw_no_plan("ring", pins, reasons);
  }
  // The batch the plan was priced on (whole sequences, at least one), so a plan file
  // says it and re-predicting it gives the same step.
  best.plan.job.batch_tokens = seqs * job.seq_len;
  cost_.explain(best.plan.job, best.plan.choice, cost_.ring_patterns_of(best.plan.choice), best.plan.predicted);
  return best.plan;
}

Plan Planner::best_collective_cp_plan(Strategy kind, const Job& job, const SearchPins& pins,
                                      SearchStats* stats, double to_beat) {
  const int G = fabric_.gpus();
  Best best;
  std::vector<std::string> reasons;
  auto note = [&reasons](const std::string& why) {
    if (reasons.size() < 3 && std::find(reasons.begin(), reasons.end(), why) == reasons.end())
      reasons.push_back(why);
  };
  SearchStats local;
  const std::vector<int> tps = tp_degrees(pins, note);
  const std::vector<Checkpointing> ckpts = pinned_or<Checkpointing>(
      pins.checkpointing, {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull});
  const std::vector<int> bqs = pins.block_q ? std::vector<int>{*pins.block_q}
                                            : std::vector<int>(std::begin(kTileSizes), std::end(kTileSizes));
  const std::vector<int> bkvs = pins.block_kv ? std::vector<int>{*pins.block_kv}
                                              : std::vector<int>(std::begin(kTileSizes), std::end(kTileSizes));
  const auto shapes = stage_shapes(G, pp_degrees(job, pins, note), tps, note);
  for (size_t shape = 0; shape < shapes.size(); ++shape) {
    const auto [pp, tp] = shapes[shape];
    const int groups = G / tp / pp;  // TP groups of a pipeline stage (tensor_parallel.h)
    for (int cp : cp_candidates(groups, pins, note)) {
      searching(kind, pp, tp, cp, shape, shapes.size());
      if (cp < 2) {  // cp 1 is the p2p plan without a ring
        if (pins.cp) note(std::string(cp_comm_type(kind)) + " needs cp >= 2");
        else if (pins.dp) note(std::string(cp_comm_type(kind)) + " needs cp >= 2 (dp " + std::to_string(*pins.dp) +
                               " leaves cp 1 of " + std::to_string(groups) + " TP groups)");
        continue;
      }
      if (groups % cp != 0) {
        note("cp " + std::to_string(cp) + " does not divide the " + std::to_string(groups) +
             (tp > 1 ? " TP groups" : " GPUs"));
        continue;
      }
      PlanChoice ch;
      ch.strategy = kind;
      ch.tp = tp;
      ch.pp = pp;
      ch.cp = cp;
      ch.dp = groups / cp;
      ch.schedule = Schedule::kFlat;
      // Node-major keeps each TP group innermost (tensor_parallel.h) and each a2a group of
      // a2a+p2p on consecutive GPUs inside a node (usp_plan.h); with tp 1 it is 0, 1, 2, ...
      // With pipeline stages, the tp-cp-dp-pp order.
      const bool node_major = tp > 1 || pp > 1 || kind == Strategy::kUsp;
      ch.order_name = node_major ? "node-major" : "snake";
      ch.order = node_major ? tp_order(tp, cp, ch.dp * pp) : snake_order(fabric_);
      // all_gather balances a causal mask with zigzag chunks; under a sliding window contiguous
      // chunks balance themselves and gather only the window's blocks.
      // a2a+p2p's ring too (Megatron runs it on Transformer Engine's zigzag p2p ring).
      ch.load_balance = kind != Strategy::kUlysses && job.causal && effective_window(model_, job) == 0
                            ? LoadBalance::kZigzag
                            : LoadBalance::kContiguous;
      const std::vector<int> a2as = usp_a2a_degrees(kind, cp, pins);
      if (a2as.empty() && pins.cp)
        note("a2a+p2p needs cp >= 4: an a2a degree and a ring of at least 2 each (cp " + std::to_string(cp) + ")");
      for (int a2a : a2as) {
        ch.cp_a2a = a2a;
        const RingPatterns* pat = nullptr;
        for (int bq : bqs) {
          for (int bkv : bkvs) {
            ch.block_q = bq;
            ch.block_kv = bkv;
            ch.checkpointing = ckpts.front();
            local.candidates += static_cast<int64_t>(ckpts.size());
            const std::string why = cost_.why_invalid(job, ch);
            if (!why.empty()) {
              note(why);
              continue;
            }
            if (kind == Strategy::kUsp && to_beat > 0 && !pat) {
              // Free ring transfers bound a2a+p2p's step from below (every transfer term of
              // the cost model grows with its pattern's time; memory does not depend on it):
              // when not even that beats `to_beat`, its ring patterns are not solved.
              static const RingPatterns kFreeRing{};
              Best bound;
              const auto quiet = [](const std::string&) {};
              offer_micro_batches(cost_, job, ch, kFreeRing, ckpts,
                                  [&](const PlanChoice& c, const Prediction& p) { return bound.offer(job, c, p); }, quiet, pins);
              if (!bound.plan.predicted.fits || bound.plan.predicted.tokens_per_s <= to_beat * (1 + 1e-9)) continue;
            }
            if (!pat) pat = &cost_.ring_patterns_of(ch);
            local.evaluated += offer_micro_batches(
                cost_, job, ch, *pat, ckpts,
                [&](const PlanChoice& c, const Prediction& p) { return best.offer(job, c, p); }, note, pins);
          }
        }
      }
    }
  }
  if (stats) {
    stats->candidates += local.candidates;
    stats->evaluated += local.evaluated;
  }
  if (!best.have) {
    throw_no_plan(cp_comm_type(kind), pins, reasons);
  }
  best.plan.job.batch_tokens = sequences_per_step(job) * job.seq_len;
  cost_.explain(best.plan.job, best.plan.choice, cost_.ring_patterns_of(best.plan.choice), best.plan.predicted);
  return best.plan;
}

std::vector<Baseline> Planner::baselines(const Job& job) {
  std::vector<Baseline> out;
  for (Strategy s : {Strategy::kFlashFsdp, Strategy::kAllGatherCp, Strategy::kUlysses}) {
    Baseline b;
    b.strategy = s;
    try {
      Plan plan;
      if (s == Strategy::kFlashFsdp) {
        SearchPins one;
        one.tp = 1;  // the baselines are the plans without tensor or pipeline parallelism, under FSDP
        one.pp = 1;
        one.sharding = Sharding::kFsdp;
        one.cp = 1;
        one.schedule = Schedule::kFlat;
        one.order = "snake";
        one.load_balance = LoadBalance::kContiguous;
        plan = best_ring_plan(job, one);
      } else {
        SearchPins no_tp;
        no_tp.tp = 1;
        no_tp.sharding = Sharding::kFsdp;
        no_tp.pp = 1;
        plan = best_collective_cp_plan(s, job, no_tp);
      }
      const Prediction& p = plan.predicted;
      b.fits = p.fits;
      b.memory_bytes_per_gpu = p.memory_bytes_per_gpu;
      b.tokens_per_s = p.tokens_per_s;
      b.step_time_s = p.step_time_s;
      b.cp = plan.choice.cp;
      b.dp = plan.choice.dp;
      b.why_not = p.why_not;
    } catch (const InputError& e) {
      b.feasible = false;
      b.why_not = e.what();
    }
    out.push_back(b);
  }
  return out;
}

Plan Planner::best_plan(const Job& job, const SearchPins& pins, SearchStats* stats) {
  // The ring's own choices pin the kind to p2p unless the kind is pinned too.
  const bool ring_pins = pins.schedule || pins.order || pins.load_balance || pins.kv_subblocks;
  if (pins.cp_comm_type && *pins.cp_comm_type != Strategy::kRing && ring_pins) {
    throw InputError(std::string("--schedule, --order, --load-balance and --kv-subblocks are choices of "
                                 "the p2p ring, not of --cp-comm-type ") +
                     cp_comm_type(*pins.cp_comm_type));
  }
  std::vector<Strategy> kinds;
  if (pins.cp_comm_type) kinds = {*pins.cp_comm_type};
  else if (ring_pins || (pins.cp && *pins.cp == 1)) kinds = {Strategy::kRing};
  else kinds = {Strategy::kRing, Strategy::kAllGatherCp, Strategy::kUlysses, Strategy::kUsp};
  Best best;
  std::string first_error;
  for (Strategy k : kinds) {
    try {
      const double to_beat = best.have && best.plan.predicted.fits ? best.plan.predicted.tokens_per_s : 0;
      Plan p = k == Strategy::kRing ? best_ring_plan(job, pins, stats)
                                    : best_collective_cp_plan(k, job, pins, stats, to_beat);
      best.offer(p.job, p.choice, p.predicted);
    } catch (const InputError& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!best.have) throw InputError(first_error);
  return best.plan;
}

Plan Planner::plan(const Job& job, const SearchPins& pins, SearchStats* stats) {
  Plan p = best_plan(job, pins, stats);
  p.baselines = baselines(job);
  p.without_tp = best_without_tp(p, pins);
  return p;
}

std::optional<Baseline> Planner::best_without_tp(const Plan& picked, const SearchPins& pins) {
  if (picked.choice.tp == 1 || pins.tp) return std::nullopt;
  SearchPins one = pins;
  one.tp = 1;
  Baseline b;
  b.strategy = Strategy::kRing;
  try {
    const Plan q = best_plan(picked.job, one);
    b.strategy = q.choice.strategy;
    b.fits = q.predicted.fits;
    b.memory_bytes_per_gpu = q.predicted.memory_bytes_per_gpu;
    b.tokens_per_s = q.predicted.tokens_per_s;
    b.step_time_s = q.predicted.step_time_s;
    b.cp = q.choice.cp;
    b.dp = q.choice.dp;
    b.checkpointing = q.choice.checkpointing;
    b.micro_batch = q.choice.micro_batch;
    b.why_not = q.predicted.why_not;
  } catch (const InputError& e) {
    b.feasible = false;
    b.why_not = e.what();
  }
  return b;
}

Plan Planner::max_seq(const Job& job, const SearchPins& pins, SearchStats* stats) {
  return max_seq(job, [&](const Job& j) { return best_plan(j, pins, stats); });
}

Plan Planner::max_seq(const Job& job, const std::function<Plan(const Job&)>& plan_of) {
  const int64_t step = 2 * static_cast<int64_t>(fabric_.gpus());
  auto fits = [&](int64_t n, Plan* out) {
    Job j = job;
    j.seq_len = n;
    try {
      Plan p = plan_of(j);
      if (out) *out = p;
      return p.predicted.fits;
    } catch (const InputError&) {
      return false;  // e.g. a pinned cp that this length cannot be split over
    }
  };
  Plan best;
  int64_t lo = step;
  if (!fits(lo, &best)) {
    throw InputError("not even " + std::to_string(lo) +
                     " tokens fit: the model states and buffers alone exceed GPU memory" +
                     (best.predicted.why_not.empty() ? "" : " (" + best.predicted.why_not + ")"));
  }
  // Double until it no longer fits (a 2^40-token cap keeps this finite), then bisect on
  // multiples of `step`.
  int64_t hi = lo * 2;
  while (hi < (int64_t{1} << 40) && fits(hi, &best)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > step) {
    const int64_t mid = (lo + (hi - lo) / 2) / step * step;
    if (mid <= lo) break;
    if (fits(mid, nullptr)) lo = mid;
    else hi = mid;
  }
  fits(lo, &best);
  best.baselines = baselines(best.job);
  return best;
}

}  // namespace rm
