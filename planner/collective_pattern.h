// How an all-gather or reduce-scatter moves over a group of GPUs, as the cost model prices
// it and the simulator replays it (one definition for both). NCCL drives every NIC of a
// node at once (one channel per rail) and does not send a node's traffic through one ring
// hop: in bus-bandwidth terms a collective across N nodes of g GPUs moves each node's data
// over its g NICs together (nccl-tests all_gather_perf: ~85-96 GB/s bus bandwidth with
// 4 HDR NICs per node, DESIGN.md). Modelled as two rings that run concurrently (NCCL
// pipelines chunks through both levels):
//   across nodes, one ring per rail: GPU (n, l) sends to (n+1, l) -- (N-1) shards;
//   inside each node, over NVSwitch/NVLink: (n, l) sends to (n, l+1) -- (g-1)·N shards.
// Members are arranged by (node, GPU id) whatever the group's order (NCCL builds its
// rings from the topology, not from rank order). A group that is not N nodes of g members
// each is one flat ring over its members in that arrangement.
#pragma once

#include <vector>

#include "planner/cost_params.h"
#include "planner/topology.h"

namespace rm {

// A member's neighbours in the two rings (-1: that ring is absent, a single node or a
// single GPU per node) and how many shard-sized pieces each of its flows carries.
struct CollectiveRole {
  int rail_succ = -1, rail_pred = -1;  // across nodes, same local index
  int node_succ = -1, node_pred = -1;  // inside the node
  double rail_shards = 0;              // (N-1): shards the rail flow carries
  double node_shards = 0;              // (g-1)·N: shards the node flow carries
  int rail_steps = 0, node_steps = 0;  // ring steps (latencies) of each ring: N-1, g-1
};

// Roles of the group's members, in the order of `members` (neighbours named by GPU id).
// Sized by the group, not the fabric: the cost model asks for every TP and FSDP group of
// a search, and a fabric-sized table per group made that quadratic in the GPU count.
std::vector<CollectiveRole> collective_roles(const Fabric& fabric, const std::vector<int>& members);

// The latency each further step of a group's rings adds: the mean route latency of the
// ring's hops (each member to its successor). A ring step waits for its predecessor's
// previous one, so a chunk's path around the ring pays every hop's latency once, not the
// slowest hop's each step: NCCL's tuning model likewise charges a ring's intra-node and
// inter-node steps their own latencies (src/graph/tuning.cc). The same for every member,
// so a member whose own hop crosses the spine ends with the others.
struct RingStepLatency {
  double rail_s = 0, node_s = 0;  // 0 where the ring is absent
};
RingStepLatency ring_step_latency(const Fabric& fabric, const CostParams& costs, const std::vector<int>& members,
                                  const std::vector<CollectiveRole>& roles);

}  // namespace rm
