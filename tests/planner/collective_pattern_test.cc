// The collectives' two-level ring (planner/collective_pattern.h) and what the cost model
// charges for it: every rail across nodes and NVSwitch inside, concurrently.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "planner/collective_pattern.h"
#include "planner/cost_model.h"
#include "planner/spec_library.h"

namespace rm {
namespace {

TEST_CASE("collective roles: one ring per rail across nodes, one inside each node") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 32);
  std::vector<int> all(32);
  std::iota(all.begin(), all.end(), 0);
  std::reverse(all.begin(), all.end());  // the group's order does not matter
  // Roles come in the group's order: look one up by GPU id.
  auto role = [&fabric](const std::vector<int>& members, int gpu) {
    const auto roles = collective_roles(fabric, members);
    REQUIRE(roles.size() == members.size());
    return roles[static_cast<size_t>(std::find(members.begin(), members.end(), gpu) - members.begin())];
  };
  const CollectiveRole r = role(all, 11);  // node 1, local 3
  CHECK(r.rail_succ == 19);
  CHECK(r.rail_pred == 3);
  CHECK(r.node_succ == 12);
  CHECK(r.node_pred == 10);
  CHECK(r.rail_shards == 3);       // N - 1 = 3 nodes' shards
  CHECK(r.node_shards == 7 * 4);   // (g - 1) x N
  CHECK(role(all, 31).rail_succ == 7);  // wraps to node 0
  CHECK(role(all, 15).node_succ == 8);  // wraps inside node 1
  // One node: the NVSwitch ring only. Uneven nodes: one flat ring.
  const std::vector<int> one{3, 1, 0, 2};
  CHECK(role(one, 2).rail_succ == -1);
  CHECK(role(one, 2).node_succ == 3);
  CHECK(role(one, 2).node_shards == 3);
  const std::vector<int> uneven{8, 0, 1, 2};
  CHECK(role(uneven, 2).node_succ == 8);
  CHECK(role(uneven, 8).node_succ == 0);
  CHECK(role(uneven, 8).node_shards == 3);
}

TEST_CASE("FSDP collectives use every NIC of a node: (N-1) shards per rail, not (G-1)") {
  const Topology topo = load_topology("dgx-a100-ib");
  const ModelSpec m = load_model("llama2-7b");
  for (int G : {16, 64, 128}) {
    CAPTURE(G);
    const Fabric fabric(topo, G);
    CostModel cm(m, fabric, CostParams::from_topology(topo));
    const double shard = 64e6;
    const int N = G / 8;
    // Bandwidth terms of the two rings (per direction, topology YAML): HDR NIC 24 GB/s,
    // NVLink 300 GB/s; the slower ring decides, plus a few microseconds of latencies.
    const double rail = (N - 1) * shard / 24e9, node = 7.0 * N * shard / 300e9;
    const double t = cm.fsdp_collective_s(shard);
    CHECK(t >= std::max(rail, node));
    CHECK(t <= std::max(rail, node) * 1.05 + 1e-4);
    // A single ring through one NIC per node would need (G-1) shards over one NIC.
    CHECK(t < (G - 1) * shard / 24e9 / 4);
  }
}

TEST_CASE("a ring collective's further steps each pay its hops' mean latency, the same for every member") {
  // 1,024 GPUs of the SuperPOD: 128 nodes in 4 scalable units of 32, a leaf per rail and
  // unit. A rail ring in node order crosses the spine on 4 of its 128 hops (31 -> 32, 63 ->
  // 64, 95 -> 96, 127 -> 0): a chunk's way round pays those 4 once, not the spine's latency
  // at every step, so a member whose own hop crosses the spine ends with the others.
  const Topology topo = load_topology("dgx-h100-superpod");
  const Fabric fabric(topo, 1024);
  const CostParams cost = CostParams::from_topology(topo);
  std::vector<int> all(1024);
  std::iota(all.begin(), all.end(), 0);
  const RingStepLatency step = ring_step_latency(fabric, cost, all, collective_roles(fabric, all));
  const double leaf = cost.route_latency_s(fabric, 0, 8), spine = cost.route_latency_s(fabric, 31 * 8, 32 * 8);
  REQUIRE(spine > leaf);
  CHECK(step.rail_s == doctest::Approx((124 * leaf + 4 * spine) / 128).epsilon(1e-12).scale(0));
  CHECK(step.node_s == doctest::Approx(cost.route_latency_s(fabric, 0, 1)).epsilon(1e-12).scale(0));
  // One node: no ring across nodes.
  const std::vector<int> node0{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(ring_step_latency(fabric, cost, node0, collective_roles(fabric, node0)).rail_s == 0);
  // The cost model charges the same: a collective of a byte a GPU is its flows' slowest
  // latency (the spine's), then the rail ring's 126 further steps (of 127) at the mean
  // (the ring inside a node has 7 steps).
  CostModel cm(load_model("llama2-7b"), fabric, cost);
  CHECK(cm.fsdp_collective_s(1) == doctest::Approx(spine + 126 * step.rail_s).epsilon(1e-4).scale(0));
}

}  // namespace
}  // namespace rm
