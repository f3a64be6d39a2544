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

}  // namespace rm
