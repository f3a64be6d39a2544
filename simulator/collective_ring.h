// Collectives (FSDP) as both replays model them: the two concurrent rings of
// planner/collective_pattern.h (across nodes on every rail, inside each node), the same
// definition the cost model prices. Each member posts one flow per ring to its successor
// carrying all the shards that ring moves through it (the same links, the same sharing
// and the same bandwidth term as the ring's steps) and receives one from its
// predecessor; the collective ends the further ring-step latencies of the slower ring
// after its flows, and its wait blocks until then (compute in between hides them).
// One flow per ring and member instead of one per step keeps 1,024-GPU steps fast.
#pragma once

#include <utility>
#include <vector>

#include "planner/collective_pattern.h"
#include "planner/cost_params.h"
#include "planner/op_list.h"
#include "planner/topology.h"
#include "simulator/message_matching.h"

namespace rm::sim {

// Each member's role in each of the schedule's groups, kept in the groups' member order
// (a table of every GPU for each group is quadratic in the GPU count: a TP group per node
// and an FSDP group per TP rank and stage). Replayed: when only some GPUs are emitted
// (OpSchedule::emitted_gpus), their rings skip the others, so the replayed GPUs' flows pair
// among themselves, with the full group's sizes. Full: every member of the full groups (the
// load of all).
class GroupRoles {
 public:
  enum class Members { kReplayed, kFull };
  GroupRoles(const OpSchedule& s, const Fabric& fabric, Members which);
  // GPU `gpu`'s role in `group`; a GPU outside it (or not replayed) has none: no flows.
  const CollectiveRole& at(int group, int gpu) const;
  // `group`'s roles in the order of OpSchedule::groups[group].
  const std::vector<CollectiveRole>& of_group(int group) const { return roles_[static_cast<size_t>(group)]; }

 private:
  std::vector<std::vector<CollectiveRole>> roles_;              // [group][member index]
  std::vector<std::vector<std::pair<int, int>>> memberships_;  // [gpu]: (group, member index)
};

// The flows GPU `self` posts for collective `op` (outgoing and incoming, per ring).
std::vector<MessageEnd> collective_flows(const CollectiveRole& role, int self, const Op& op);

// Seconds the collective lasts after its flows: the ring steps beyond the first, each its
// group's ring step latency (`step`: ring_step_latency over the full group), of whichever
// ring has more of them in time. An all-reduce moves twice the shards and takes twice the
// ring steps (a reduce-scatter, then an all-gather).
double collective_extra_latency_s(const CollectiveRole& role, const Op& op, const RingStepLatency& step);

// Whether `role` posts any flow (a member folding left alone on both rings posts none).
inline bool posts_flows(const CollectiveRole& role) { return role.rail_succ >= 0 || role.node_succ >= 0; }

// Whether folding left a member alone on a ring its full role has (`replayed` has no
// successor there): typically the ring across nodes of a group with one member on the
// replayed nodes, whose closed ring would otherwise skip those hops altogether.
inline bool lost_ring(const CollectiveRole& replayed, const CollectiveRole& full) {
  return (full.rail_succ >= 0 && replayed.rail_succ < 0) || (full.node_succ >= 0 && replayed.node_succ < 0);
}

// Collective `op` of a member that folding left alone on a ring (lost_ring): its own
// flows on its full rings, each at the slowest link of its route as the lost rings' flows
// share it (`lone_flows`, per link: ReplicaLoad::lone_flows), then its routes' latency and
// the rings' remaining step latencies. A member alone on both rings posts no flow and
// waits this long; one that kept a ring waits for that ring's flows too. The replay runs
// the transfer at the rate the replayed flows beside it leave (replica_load.h).
struct LoneCollective {
  double transfer_s = 0;
  double latency_s = 0;
};
LoneCollective lone_collective(const CollectiveRole& full, int self, const Op& op, const Fabric& fabric,
                               const CostParams& costs, const RingStepLatency& step,
                               const std::vector<double>& lone_flows);

}  // namespace rm::sim
