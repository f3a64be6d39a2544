// Collectives as two concurrent rings (see collective_ring.h).
#include "simulator/collective_ring.h"

#include <algorithm>
#include <utility>

namespace rm::sim {

namespace {

// Replica folding: each replayed member's rings skip the members not replayed (the next
// replayed one along the ring takes their place), so the replayed GPUs close their own
// rings; flows keep the full group's shards and steps (bytes and latencies as priced).
std::vector<CollectiveRole> close_over(const std::vector<CollectiveRole>& full, const std::vector<char>& replayed) {
  std::vector<CollectiveRole> out(full.size());
  auto next = [&](int g, int CollectiveRole::*link) {
    if (g < 0) return -1;
    int n = full[g].*link;
    while (n >= 0 && !replayed[n]) n = full[n].*link;
    return n;
  };
  for (size_t g = 0; g < full.size(); ++g) {
    if (!replayed[g]) continue;
    out[g] = full[g];
    const int self = static_cast<int>(g);
    for (auto [succ, pred] : {std::pair{&CollectiveRole::rail_succ, &CollectiveRole::rail_pred},
                              std::pair{&CollectiveRole::node_succ, &CollectiveRole::node_pred}}) {
      if (full[g].*succ < 0) continue;
      out[g].*succ = next(self, succ);
      out[g].*pred = next(self, pred);
      if (out[g].*succ == self) out[g].*succ = out[g].*pred = -1;  // alone on that ring now
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<CollectiveRole>> full_collective_roles(const OpSchedule& s, const Fabric& fabric) {
  std::vector<std::vector<CollectiveRole>> out;
  out.reserve(s.groups.size());
  for (const auto& members : s.groups) {
    const std::vector<CollectiveRole> roles = rm::collective_roles(fabric, members);
    std::vector<CollectiveRole>& by_gpu = out.emplace_back(static_cast<size_t>(fabric.gpus()));
    for (size_t k = 0; k < members.size(); ++k) by_gpu[static_cast<size_t>(members[k])] = roles[k];
  }
  return out;
}

std::vector<std::vector<CollectiveRole>> collective_roles(const OpSchedule& s, const Fabric& fabric) {
  std::vector<std::vector<CollectiveRole>> out = full_collective_roles(s, fabric);
  if (s.emitted_gpus.empty()) return out;
  std::vector<char> replayed(fabric.gpus(), 0);
  for (int g : s.emitted_gpus) replayed[g] = 1;
  for (auto& roles : out) roles = close_over(roles, replayed);
  return out;
}

std::vector<MessageEnd> collective_flows(const CollectiveRole& r, int self, const Op& op) {
  std::vector<MessageEnd> ends;
  const double passes = op.collective == CollectiveKind::kAllReduce ? 2 : 1;  // reduce-scatter + all-gather
  if (r.rail_succ >= 0) {
    const double flow = passes * r.rail_shards * op.bytes;
    ends.push_back({self, r.rail_succ, true, true, op.tag, flow});
    ends.push_back({r.rail_pred, self, false, true, op.tag, flow});
  }
  if (r.node_succ >= 0) {
    const double flow = passes * r.node_shards * op.bytes;
    ends.push_back({self, r.node_succ, true, true, op.tag, flow});
    ends.push_back({r.node_pred, self, false, true, op.tag, flow});
  }
  return ends;
}

double collective_extra_latency_s(const CollectiveRole& r, int self, const Op& op, const Fabric& fabric,
                                  const CostParams& costs) {
  const int passes = op.collective == CollectiveKind::kAllReduce ? 2 : 1;
  double rail = 0, node = 0;
  if (r.rail_succ >= 0) rail = (passes * r.rail_steps - 1) * costs.route_latency_s(fabric, self, r.rail_succ);
  if (r.node_succ >= 0) node = (passes * r.node_steps - 1) * costs.route_latency_s(fabric, self, r.node_succ);
  return std::max(rail, node);
}

}  // namespace rm::sim
