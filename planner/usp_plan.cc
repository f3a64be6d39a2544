#include "planner/usp_plan.h"

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/tensor_parallel.h"

namespace rm {

PlanChoice usp_ring_choice(const PlanChoice& ch) {
  const int u = ch.cp_a2a, r = ch.cp / ch.cp_a2a, tp = std::max(1, ch.tp);
  PlanChoice rc = ch;
  rc.strategy = Strategy::kRing;
  rc.tp = 1;
  rc.tp_comm_overlap = false;  // the TP collectives are the plan's, priced outside its ring
  rc.cp = r;
  rc.dp = tp * ch.dp * u;
  rc.cp_a2a = 1;
  rc.order.clear();
  rc.order.reserve(ch.order.size());
  for (int d = 0; d < ch.dp; ++d)
    for (int i = 0; i < u; ++i)
      for (int t = 0; t < tp; ++t)
        for (int j = 0; j < r; ++j) rc.order.push_back(ch.order[(d * tp + t) * ch.cp + j * u + i]);
  return rc;
}

ModelSpec usp_ring_model(const ModelSpec& model, int tp, int cp_a2a) {
  ModelSpec m = tp_shard(model, std::max(1, tp));
  m.heads /= cp_a2a;
  m.kv_heads /= cp_a2a;
  return m;
}

A2aBytes a2a_bytes(const ModelSpec& m, const PlanChoice& ch, int64_t seq_len, int e) {
  const double c = static_cast<double>(seq_len / ch.cp);
  const int u = ch.strategy == Strategy::kUlysses ? ch.cp : ch.cp_a2a;
  const double tp = std::max(1, ch.tp);  // a TP member's heads
  return {c * (m.heads + 2.0 * m.kv_heads) * m.head_dim * e / (u * tp), c * m.heads * m.head_dim * e / (u * tp), u};
}

std::string usp_split_why_invalid(const ModelSpec& m, const PlanChoice& ch, int gpus_per_node) {
  auto str = [](auto v) { return std::to_string(v); };
  const int u = ch.cp_a2a, tp = std::max(1, ch.tp);
  if (u < 2 || u >= ch.cp || ch.cp % u != 0)
    return "a2a+p2p needs an a2a degree in [2, cp) dividing cp " + str(ch.cp) + " (got " + str(u) + ")";
  const std::string times_tp = tp > 1 ? " x tp " + str(tp) : "";
  if (gpus_per_node % (u * tp) != 0)
    return "a2a+p2p runs its all-to-all inside a node: the a2a degree " + str(u) + times_tp + " must divide the " +
           str(gpus_per_node) + " GPUs per node";
  if (m.heads % (u * tp) != 0 || m.kv_heads % (u * tp) != 0)
    return "a2a+p2p splits heads: the a2a degree " + str(u) + times_tp + " must divide the " + str(m.heads) +
           " query heads and the " + str(m.kv_heads) + " kv heads";
  for (size_t g = 0; g + u <= ch.order.size(); g += u)
    for (int l = 1; l < u; ++l)
      if (ch.order[g + l] / gpus_per_node != ch.order[g] / gpus_per_node)
        return "a2a+p2p's order must keep each a2a group of " + str(u) + " GPUs inside one node";
  return "";
}

// ---- the cost model's a2a+p2p terms (cost_model.h) ---------------------------------------

LayerTimes CostModel::usp_attention_times(const Job& job, const PlanChoice& ch, const RingPatterns& pat,
                                          const PatternCost& a2a, bool free_comm) {
  // The ring on h / (tp·u) heads over N / r tokens per GPU, priced as any p2p ring; the
  // recompute of full checkpointing and the TP collectives are added by layer_times, once.
  PlanChoice rc = usp_ring_choice(ch);
  rc.checkpointing = Checkpointing::kNone;
  LayerTimes t = usp_ring(ch.tp, ch.cp_a2a).layer_times(job, rc, pat, nullptr, free_comm);
  t.linear_fwd = t.linear_bwd = 0;
  // The all-to-alls before and after attention, not overlapped (as a2a's).
  t.phases_fwd = a2a_phases(job, ch, a2a, free_comm, false, t.phases_fwd);
  t.attention_fwd = t.phases_fwd.seconds();
  if (job.passes != Passes::kForward) {
    t.phases_bwd = a2a_phases(job, ch, a2a, free_comm, true, t.phases_bwd);
    t.attention_bwd = t.phases_bwd.seconds();
  }
  return t;
}

CostModel& CostModel::usp_ring(int tp, int cp_a2a) {
  std::unique_ptr<CostModel>& ring = usp_rings_[{tp, cp_a2a}];
  if (!ring) ring = std::make_unique<CostModel>(usp_ring_model(model_, tp, cp_a2a), fabric_, cost_);
  return *ring;
}

std::string CostModel::usp_why_invalid(const Job& job, const PlanChoice& ch) const {
  if (static_cast<int>(ch.order.size()) != fabric_.gpus() || ch.cp < 1 || ch.dp < 1 ||
      int64_t{std::max(1, ch.tp)} * ch.cp * ch.dp != fabric_.gpus())
    return "";  // the generic checks say what is wrong
  const std::string why = usp_split_why_invalid(model_, ch, fabric_.topology().gpus_per_node);
  if (!why.empty()) return why;
  if (ch.schedule == Schedule::kTwoLevel)
    return "a2a+p2p's ring is flat or bidirectional (its inner level is the all-to-all)";
  if (job.seq_len % ch.cp != 0)
    return "sequence length " + std::to_string(job.seq_len) + " is not a multiple of cp " + std::to_string(ch.cp);
  const CostModel ring(usp_ring_model(model_, ch.tp, ch.cp_a2a), fabric_, cost_);
  return ring.why_invalid(job, usp_ring_choice(ch));
}

}  // namespace rm
