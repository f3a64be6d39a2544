// The copies' load on the links of a folded replay (see replica_load.h).
#include "simulator/replica_load.h"

#include <simgrid/s4u/Link.hpp>

#include "simulator/collective_ring.h"

namespace rm::sim {

ReplicaLoad replica_load(const OpSchedule& s, const Fabric& fabric,
                         const GroupRoles& replayed_roles, const GroupRoles& full_roles) {
  const size_t links = fabric.links().size();
  ReplicaLoad out;
  out.stands_for[0].assign(links, 1.0);
  out.stands_for[1].assign(links, 1.0);
  if (s.emitted_gpus.empty()) return out;
  std::vector<char> replayed(fabric.gpus(), 0);
  for (int g : s.emitted_gpus) replayed[g] = 1;
  // [0]: ring transfers, [1]: collective flows; in the full job and in the replay.
  std::vector<double> all[2] = {std::vector<double>(links, 0), std::vector<double>(links, 0)};
  std::vector<double> mine[2] = {all[0], all[1]};
  auto count = [&](std::vector<double>& into, int src, int dst) {
    if (src < 0 || dst < 0 || src == dst) return;
    for (int l : fabric.route(src, dst)) into[l] += 1;
  };
  for (auto [src, dst] : s.ring_flows) {
    count(all[0], src, dst);
    if (replayed[src]) count(mine[0], src, dst);
  }
  // Only the groups some collective runs on load links: a plan's schedule also lists groups
  // its sharding leaves idle (hsdp's plans list the FSDP groups beside their shard and
  // replicate groups), whose lost rings doubled a lone all-reduce's time.
  std::vector<char> used(s.groups.size(), 0);
  for (int g : s.emitted_gpus) {
    for (const Op& op : s.ranks[static_cast<size_t>(g)].ops) {
      if (op.group >= 0) used[static_cast<size_t>(op.group)] = 1;
    }
  }
  out.lone_flows.assign(links, 0);
  for (size_t group = 0; group < s.groups.size(); ++group) {
    if (!used[group]) continue;
    const std::vector<int>& members = s.groups[group];
    const auto& full = full_roles.of_group(static_cast<int>(group));
    const auto& mine_roles = replayed_roles.of_group(static_cast<int>(group));
    for (int CollectiveRole::*succ : {&CollectiveRole::rail_succ, &CollectiveRole::node_succ}) {
      bool lost = false;
      for (size_t k = 0; k < members.size() && !lost; ++k) {
        lost = replayed[members[k]] && full[k].*succ >= 0 && mine_roles[k].*succ < 0;
      }
      if (!lost) continue;
      for (size_t k = 0; k < members.size(); ++k) count(out.lone_flows, members[k], full[k].*succ);
    }
    // Replayed members all alone (hsdp's replica groups with one replica replayed): no
    // flow of the replay stands for this group's (see replica_load.h).
    bool replayed_member = false, posts = false;
    for (size_t k = 0; k < members.size(); ++k) {
      if (!replayed[members[k]]) continue;
      replayed_member = true;
      posts = posts || posts_flows(mine_roles[k]);
    }
    if (replayed_member && !posts) continue;
    for (size_t k = 0; k < members.size(); ++k) {
      const int g = members[k];
      count(all[1], g, full[k].rail_succ);
      count(all[1], g, full[k].node_succ);
      if (!replayed[g]) continue;
      count(mine[1], g, mine_roles[k].rail_succ);
      count(mine[1], g, mine_roles[k].node_succ);
    }
  }
  for (int k = 0; k < 2; ++k) {
    for (size_t l = 0; l < links; ++l) {
      if (mine[k][l] > 0 && all[k][l] > mine[k][l]) {
        out.stands_for[k][l] = all[k][l] / mine[k][l];
        out.folded = true;
      }
    }
  }
  return out;
}

ReplicaLinks::ReplicaLinks(ReplicaLoad load, const Fabric& fabric, std::vector<simgrid::s4u::Link*> links,
                           std::vector<double> capacity)
    : load_(std::move(load)), fabric_(fabric), links_(std::move(links)), capacity_(std::move(capacity)) {
  set_to_ = capacity_;
  running_[0].assign(links_.size(), 0);
  running_[1].assign(links_.size(), 0);
}

void ReplicaLinks::add(int src, int dst, FlowClass kind, int delta) {
  if (!load_.folded || src == dst) return;
  for (int l : fabric_.route(src, dst)) {
    running_[static_cast<int>(kind)][l] += delta;
    const double a0 = running_[0][l], a1 = running_[1][l];
    if (a0 + a1 == 0) continue;  // idle: its capacity is set again when a flow starts
    const double f0 = load_.stands_for[0][l], f1 = load_.stands_for[1][l];
    if (f0 == 1 && f1 == 1) continue;
    const double bandwidth = capacity_[l] * (a0 + a1) / (a0 * f0 + a1 * f1);
    if (bandwidth != set_to_[l]) {
      set_to_[l] = bandwidth;
      links_[l]->set_bandwidth(bandwidth);
    }
  }
}

}  // namespace rm::sim
