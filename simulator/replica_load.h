// The load of the rings a folded replay leaves out (ScheduleOptions::fold_replicas). The
// copies run in lockstep with the replayed rings and move the same bytes, so each
// replayed flow on a link stands for all the flows of its class there in the full job:
// per directed link, count the flows that cross it in the full job and those the replay
// posts, for ring transfers (every rank's, OpSchedule::ring_flows, against the replayed
// ranks') and for collective flows (every member's, against the closed rings of
// collective_ring.h) apart. While flows run on a link, its capacity is the replayed
// flows' share of what runs there in the full job, from the flows running now:
//   capacity x (a_ring + a_coll) / (a_ring x f_ring + a_coll x f_coll)
// where a_k is the replayed flows of class k running on the link and f_k = all_k / mine_k
// the flows each stands for; under max-min sharing each replayed flow then gets what it
// would get beside all the others. The share follows the classes that run: a collective
// that has an uplink to itself between ring passes gets the collectives' share of it, not
// the ring transfers' (a share fixed per link over the whole step made the FSDP flows of an
// oversubscribed spine 4 % slow). Links only the replayed GPUs use keep their capacity.
#pragma once

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
// uses them (GroupRoles::Members::kReplayed); `full_roles`: every member's (kFull). A group
// whose replayed members each close their rings alone posts no flow: its collectives run
// as timed waits (collective_ring.h lone_collective_s) and its full flows load no link.
struct ReplicaLoad {
  std::vector<double> stands_for[2];
  bool folded = false;  // some link has a factor above 1
  // Per Fabric link id: the full job's flows of the rings folding left a replayed member
  // alone on (lost_ring), every group's: the copies that run beside a lone member's
  // collective and share its links (a torus routes a replica ring's hops over the same
  // links as its neighbours'), which lone_collective_s divides the links among.
  std::vector<double> lone_flows;
};
ReplicaLoad replica_load(const OpSchedule& s, const Fabric& fabric,
                         const GroupRoles& replayed_roles, const GroupRoles& full_roles);

// Sets the replay's links to the replayed flows' share as flows start and finish (needs a
// live SimGrid engine; `links` and `capacity` by Fabric link id, as the platform made them).
class ReplicaLinks {
 public:
  ReplicaLinks(ReplicaLoad load, const Fabric& fabric, std::vector<simgrid::s4u::Link*> links,
               std::vector<double> capacity);
  // A flow of `kind` from `src` to `dst` started or finished (the replay pairs the two).
  void started(int src, int dst, FlowClass kind) { add(src, dst, kind, +1); }
  void finished(int src, int dst, FlowClass kind) { add(src, dst, kind, -1); }

 private:
  void add(int src, int dst, FlowClass kind, int delta);

  ReplicaLoad load_;
  const Fabric& fabric_;
  std::vector<simgrid::s4u::Link*> links_;
  std::vector<double> capacity_, set_to_;
  std::vector<int> running_[2];
};

}  // namespace rm::sim
