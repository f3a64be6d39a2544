// The copies' load on the links of a folded replay (see replica_load.h).
#include "simulator/replica_load.h"

#include <algorithm>
#include <memory>

#include <simgrid/s4u/Actor.hpp>
#include <simgrid/s4u/Engine.hpp>
#include <simgrid/s4u/Link.hpp>
#include <simgrid/s4u/Semaphore.hpp>

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
  out.lone_group_flows.resize(s.groups.size());
  std::vector<double> group_flows(links, 0);
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
      for (size_t k = 0; k < members.size(); ++k) count(group_flows, members[k], full[k].*succ);
    }
    int lone_members = 0;
    for (size_t k = 0; k < members.size(); ++k) lone_members += replayed[members[k]] && lost_ring(mine_roles[k], full[k]);
    for (size_t l = 0; l < links; ++l) {
      if (group_flows[l] == 0) continue;
      out.lone_flows[l] += group_flows[l];
      out.lone_group_flows[group].push_back({static_cast<int>(l), group_flows[l] / lone_members});
      group_flows[l] = 0;
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

bool ReplicaLoad::followed() const {
  return folded || std::any_of(lone_group_flows.begin(), lone_group_flows.end(),
                               [](const auto& flows) { return !flows.empty(); });
}

// A lone collective running: its transfer time left at rate 1 as of `since`, the rate it
// runs at now, and the semaphore that wakes its actor when the rate changes.
struct ReplicaLinks::LoneRun {
  int group = 0;
  double left_s = 0, since = 0, rate = 1;
  simgrid::s4u::SemaphorePtr changed;
};

ReplicaLinks::ReplicaLinks(ReplicaLoad load, const Fabric& fabric, std::vector<simgrid::s4u::Link*> links,
                           std::vector<double> capacity)
    : load_(std::move(load)), fabric_(fabric), links_(std::move(links)), capacity_(std::move(capacity)) {
  set_to_ = capacity_;
  running_[0].assign(links_.size(), 0);
  running_[1].assign(links_.size(), 0);
  lone_running_.assign(links_.size(), 0);
}

void ReplicaLinks::add(int src, int dst, FlowClass kind, int delta) {
  if (src == dst) return;
  for (int l : fabric_.route(src, dst)) {
    running_[static_cast<int>(kind)][l] += delta;
    set(static_cast<size_t>(l));
  }
  rates_changed();
}

void ReplicaLinks::add_lone(int group, double sign) {
  for (auto [link, flows] : load_.lone_group_flows[static_cast<size_t>(group)]) {
    const auto l = static_cast<size_t>(link);
    lone_running_[l] = std::max(0.0, lone_running_[l] + sign * flows);  // rounding aside, >= 0
    set(l);
  }
  rates_changed();
}

void ReplicaLinks::set(size_t l) {
  const double a0 = running_[0][l], a1 = running_[1][l];
  if (a0 + a1 == 0) return;  // idle: its capacity is set again when a flow starts
  const double f0 = load_.stands_for[0][l], f1 = load_.stands_for[1][l];
  const double bandwidth = capacity_[l] * (a0 + a1) / (a0 * f0 + a1 * f1 + lone_running_[l]);
  if (bandwidth != set_to_[l]) {
    set_to_[l] = bandwidth;
    links_[l]->set_bandwidth(bandwidth);
  }
}

void ReplicaLinks::raise(size_t l, double bandwidth) {
  if (set_to_[l] != capacity_[l]) links_[l]->set_bandwidth(bandwidth);
}

// The rate against lone_collective's time: a ring runs at its slowest hop's pace, so its
// group's slowest link as the lost rings' flows alone share it, over its slowest link as
// shared now, by the replayed flows' full load (what each stands for) and the lone flows
// running.
double ReplicaLinks::lone_rate(const LoneRun& r) const {
  double alone = 0, now = 0;
  for (auto [link, flows] : load_.lone_group_flows[static_cast<size_t>(r.group)]) {
    const auto l = static_cast<size_t>(link);
    alone = std::max(alone, std::max(1.0, load_.lone_flows[l]) / capacity_[l]);
    const double shared = lone_running_[l] + running_[0][l] * load_.stands_for[0][l] +
                          running_[1][l] * load_.stands_for[1][l];
    now = std::max(now, std::max(1.0, shared) / capacity_[l]);
  }
  return now > 0 ? alone / now : 1;
}

void ReplicaLinks::rates_changed() {
  const double t = simgrid::s4u::Engine::get_clock();
  // A copy: waking an actor is a simcall, during which other actors start and end runs.
  const std::vector<std::shared_ptr<LoneRun>> runs = runs_;
  for (const auto& r : runs) {
    const double rate = lone_rate(*r);
    if (rate == r->rate) continue;
    r->left_s = std::max(0.0, r->left_s - (t - r->since) * r->rate);
    r->since = t;
    r->rate = rate;
    r->changed->release();
  }
}

void ReplicaLinks::run_lone(int group, double transfer_s) {
  auto run = std::make_shared<LoneRun>(
      LoneRun{group, transfer_s, simgrid::s4u::Engine::get_clock(), 1, simgrid::s4u::Semaphore::create(0)});
  runs_.push_back(run);
  add_lone(group, +1);  // also sets its rate
  while (true) {
    const double left = run->left_s - (simgrid::s4u::Engine::get_clock() - run->since) * run->rate;
    // acquire_timeout is true when the time ran out before a rate change woke it.
    if (left <= 0 || run->changed->acquire_timeout(left / run->rate)) break;
  }
  runs_.erase(std::find(runs_.begin(), runs_.end(), run));
  add_lone(group, -1);
}

}  // namespace rm::sim
