// Collectives (FSDP) as both replays model them: NCCL's ring over the group. Each member
// sends its (D-1) shards to its ring successor as one flow of (D-1)·bytes (the same links,
// the same sharing and the same bandwidth term as D-1 ring steps), and the wait adds the
// D-2 further step latencies. One flow per member instead of D-1 keeps 128-GPU steps fast.
#pragma once

#include <array>
#include <vector>

#include "planner/op_list.h"
#include "simulator/message_matching.h"

namespace rm::sim {

// A member's place in its group's ring; size = D, the group's size.
struct RingNeighbours {
  int succ = -1, pred = -1, size = 1;
};

// [group][gpu]: the neighbours of each member of each of the schedule's groups.
std::vector<std::vector<RingNeighbours>> collective_rings(const OpSchedule& s, int gpus);

// The two flows GPU `self` posts for collective `op`: its own to the successor (sender)
// and the predecessor's to it (receiver).
std::array<MessageEnd, 2> collective_flows(const RingNeighbours& n, int self, const Op& op);

}  // namespace rm::sim
