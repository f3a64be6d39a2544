// The load of the rings a folded replay leaves out (ScheduleOptions::fold_replicas). The
// copies run in lockstep with the replayed rings and move the same bytes, so each
// replayed flow on a link stands for all the flows of its class there in the full job:
// per directed link, count the flows that cross it in the full job and those the replay
// posts, for ring transfers (every rank's, OpSchedule::ring_flows, against the replayed
// ranks') and for collective flows (every member's, against the closed rings of
// collective_ring.h) apart. While flows run on a link, its capacity is the replayed
// flows' share of what runs there in the full job, from the flows running now:
//   capacity x (a_ring + a_coll) / (a_ring x f_ring + a_coll x f_coll + lone)
// where a_k is the replayed flows of class k running on the link, f_k = all_k / mine_k
// the flows each stands for, and lone the flows of the lone members' collectives running
// (below), which post none; under max-min sharing each replayed flow then gets what it
// would get beside all the others. The share follows the classes that run: a collective
// that has an uplink to itself between ring passes gets the collectives' share of it, not
// the ring transfers' (a share fixed per link over the whole step made the FSDP flows of an
// oversubscribed spine 4 % slow). Links only the replayed GPUs use keep their capacity.
// A lone member's collective (a group folding left a replayed member alone on a ring,
// collective_ring.h lost_ring) posts no flow on that ring: its group's full flows there
// load the links while it runs (the lone term above), and it runs its flows' time as
// lone_collective prices it at the rate the links' sharing leaves it, which the replayed
// flows running beside it slow.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "planner/op_list.h"
#include "planner/topology.h"
#include "simulator/collective_ring.h"

namespace simgrid::s4u {
class Link;
}  // namespace simgrid::s4u

namespace rm::sim {

enum class FlowClass { kRing = 0, kCollective = 1 };

// Per Fabric link id and class: the full job's flows each replayed flow stands for (>= 1;
// all 1 when every rank is emitted). `replayed_roles`: the groups' roles as the replay
// uses them (GroupRoles::Members::kReplayed); `full_roles`: every member's (kFull).
struct ReplicaLoad {
  std::vector<double> stands_for[2];
  bool folded = false;  // some link has a factor above 1
  // Per Fabric link id: the full job's flows of the rings folding left a replayed member
  // alone on (lost_ring), every group's: the copies that run beside a lone member's
  // collective and share its links (a torus routes a replica ring's hops over the same
  // links as its neighbours'), which lone_collective divides the links among.
  std::vector<double> lone_flows;
  // Per group: (Fabric link id, flows) of its lost rings' full flows over its replayed
  // members folding left alone there, the share each carries while its collective runs
  // (empty: none lost; one member each under hsdp, whose replica groups have one replayed).
  std::vector<std::vector<std::pair<int, double>>> lone_group_flows;
  // Whether the replay's links need following (ReplicaLinks).
  bool followed() const;
};
ReplicaLoad replica_load(const OpSchedule& s, const Fabric& fabric,
                         const GroupRoles& replayed_roles, const GroupRoles& full_roles);

// Sets the replay's links to the replayed flows' share as flows start and finish, and
// runs the lone members' collectives (needs a live SimGrid engine; `links` and `capacity`
// by Fabric link id, as the platform made them).
class ReplicaLinks {
 public:
  ReplicaLinks(ReplicaLoad load, const Fabric& fabric, std::vector<simgrid::s4u::Link*> links,
               std::vector<double> capacity);
  // A flow of `kind` from `src` to `dst` started or finished (the replay pairs the two).
  void started(int src, int dst, FlowClass kind) { add(src, dst, kind, +1); }
  void finished(int src, int dst, FlowClass kind) { add(src, dst, kind, -1); }
  // Runs a lone member's collective on `group` from now: `transfer_s`, its flows' time with
  // only the lost rings' flows on their links (lone_collective), at the rate the sharing of
  // its group's links gives as it changes. Returns when done; called from an actor of its
  // own (the GPU's may compute meanwhile).
  void run_lone(int group, double transfer_s);
  const std::vector<double>& lone_flows() const { return load_.lone_flows; }
  // Runs `create`, which creates the flow from `src` to `dst`, with its route's links at
  // full capacity: SimGrid's CM02 bounds a flow for its whole life by the least bandwidth
  // its route has when it is created (network_cm02.cpp, comm_action_set_bounds), so a flow
  // created while a link carried a share kept that share after the link's load ended.
  template <typename F>
  void at_capacity(int src, int dst, F&& create) {
    const Route route = fabric_.route(src, dst);
    for (int l : route) raise(static_cast<size_t>(l), capacity_[static_cast<size_t>(l)]);
    create();
    for (int l : route) raise(static_cast<size_t>(l), set_to_[static_cast<size_t>(l)]);
  }

 private:
  struct LoneRun;
  void add(int src, int dst, FlowClass kind, int delta);
  void add_lone(int group, double sign);
  void set(size_t link);                      // to the share the flows running leave
  void raise(size_t link, double bandwidth);  // to `bandwidth` for now, set_to_ aside
  double lone_rate(const LoneRun& r) const;
  void rates_changed();

  ReplicaLoad load_;
  const Fabric& fabric_;
  std::vector<simgrid::s4u::Link*> links_;
  std::vector<double> capacity_, set_to_;
  std::vector<int> running_[2];
  std::vector<double> lone_running_;  // per link: the lone flows running
  std::vector<std::shared_ptr<LoneRun>> runs_;  // the lone collectives running
};

}  // namespace rm::sim
