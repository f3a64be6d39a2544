// Collectives as two concurrent rings (see collective_ring.h).
#include "simulator/collective_ring.h"

#include <algorithm>
#include <utility>

namespace rm::sim {

namespace {

// Replica folding: each replayed member's rings skip the members not replayed (the next
// replayed one along the ring takes their place), so the replayed GPUs close their own
// rings; flows keep the full group's shards and steps (bytes and latencies as priced).
// `index` maps a member's GPU id to its index in `members` (only members' entries read).
std::vector<CollectiveRole> close_over(const std::vector<int>& members, const std::vector<CollectiveRole>& full,
                                       const std::vector<char>& replayed, const std::vector<int>& index) {
  std::vector<CollectiveRole> out(full.size());
  auto next = [&](int g, int CollectiveRole::*link) {
    if (g < 0) return -1;
    int n = full[index[g]].*link;
    while (n >= 0 && !replayed[n]) n = full[index[n]].*link;
    return n;
  };
  for (size_t k = 0; k < members.size(); ++k) {
    const int self = members[k];
    if (!replayed[self]) continue;
    out[k] = full[k];
    for (auto [succ, pred] : {std::pair{&CollectiveRole::rail_succ, &CollectiveRole::rail_pred},
                              std::pair{&CollectiveRole::node_succ, &CollectiveRole::node_pred}}) {
      if (full[k].*succ < 0) continue;
      out[k].*succ = next(self, succ);
      out[k].*pred = next(self, pred);
      if (out[k].*succ == self) out[k].*succ = out[k].*pred = -1;  // alone on that ring now
    }
  }
  return out;
}

}  // namespace

GroupRoles::GroupRoles(const OpSchedule& s, const Fabric& fabric, Members which)
    : memberships_(static_cast<size_t>(fabric.gpus())) {
  const bool close = which == Members::kReplayed && !s.emitted_gpus.empty();
  std::vector<char> replayed;
  std::vector<int> index(close ? fabric.gpus() : 0);  // one scratch map, members' entries set
  if (close) {
    replayed.assign(fabric.gpus(), 0);
    for (int g : s.emitted_gpus) replayed[g] = 1;
  }
  roles_.reserve(s.groups.size());
  for (size_t group = 0; group < s.groups.size(); ++group) {
    const std::vector<int>& members = s.groups[group];
    std::vector<CollectiveRole> roles = rm::collective_roles(fabric, members);
    if (close) {
      for (size_t k = 0; k < members.size(); ++k) index[members[k]] = static_cast<int>(k);
      roles = close_over(members, roles, replayed, index);
    }
    for (size_t k = 0; k < members.size(); ++k) {
      if (!close || replayed[members[k]]) memberships_[members[k]].push_back({static_cast<int>(group), static_cast<int>(k)});
    }
    roles_.push_back(std::move(roles));
  }
}

const CollectiveRole& GroupRoles::at(int group, int gpu) const {
  static const CollectiveRole kNone{};
  for (auto [g, k] : memberships_[static_cast<size_t>(gpu)]) {
    if (g == group) return roles_[static_cast<size_t>(g)][static_cast<size_t>(k)];
  }
  return kNone;
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

double collective_extra_latency_s(const CollectiveRole& r, const Op& op, const RingStepLatency& step) {
  const int passes = op.collective == CollectiveKind::kAllReduce ? 2 : 1;
  double rail = 0, node = 0;
  if (r.rail_succ >= 0) rail = (passes * r.rail_steps - 1) * step.rail_s;
  if (r.node_succ >= 0) node = (passes * r.node_steps - 1) * step.node_s;
  return std::max(rail, node);
}

LoneCollective lone_collective(const CollectiveRole& full, int self, const Op& op, const Fabric& fabric,
                               const CostParams& costs, const RingStepLatency& step,
                               const std::vector<double>& lone_flows) {
  LoneCollective out;
  for (const MessageEnd& e : collective_flows(full, self, op)) {
    if (!e.sender) continue;
    double bytes_per_s = 0;
    for (int l : fabric.route(e.src, e.dst)) {
      const auto link = static_cast<size_t>(l);
      const double bw = costs.link_bytes_per_s(fabric.links()[link]) / std::max(1.0, lone_flows[link]);
      bytes_per_s = bytes_per_s > 0 ? std::min(bytes_per_s, bw) : bw;
    }
    out.transfer_s = std::max(out.transfer_s, e.bytes / bytes_per_s);
    out.latency_s = std::max(out.latency_s, costs.route_latency_s(fabric, e.src, e.dst));
  }
  out.latency_s += collective_extra_latency_s(full, op, step);
  return out;
}

}  // namespace rm::sim
