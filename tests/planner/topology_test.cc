// Fabric: link graphs and routes on every topology kind, checked against hand-written
// link lists.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "planner/input_error.h"
#include "planner/spec_library.h"
#include "planner/topology.h"

namespace {

std::vector<std::string> route_names(const rm::Fabric& f, int src, int dst) {
  std::vector<std::string> out;
  for (int l : f.route(src, dst)) out.push_back(f.links()[l].name);
  return out;
}

using Names = std::vector<std::string>;

const char* kPcieBox = R"(
name: pcie-test
gpus_per_node: 8
max_nodes: 1
gpu: {name: g, memory_gib: 40, peak_tflops: 100, hbm_gb_per_s: 1000, runtime_reserve_gib: 1,
      gemm_efficiency: 0.7, element_bytes: 2,
      attention: {max_efficiency: 0.7, half_flops: 1e6, tile_kib: 164}}
intra: {kind: pcie-tree, gb_per_s: 25, latency_us: 1, gpus_per_switch: 2, switches_per_socket: 2,
        switch_uplink_gb_per_s: 25, socket_gb_per_s: 40, socket_latency_us: 2}
)";

const char* kTorus = R"(
name: torus-test
gpus_per_node: 1
max_nodes: 48
gpu: {name: t, memory_gib: 32, peak_tflops: 275, hbm_gb_per_s: 1200, runtime_reserve_gib: 1,
      gemm_efficiency: 0.7, element_bytes: 2,
      attention: {max_efficiency: 0.7, half_flops: 1e6, tile_kib: 1024}}
intra: {kind: none}
inter: {kind: torus, latency_us: 1, dims: [4, 2, 6], link_gb_per_s: 50}
)";

}  // namespace

TEST_CASE("NVSwitch node: up then down") {
  const rm::Fabric f(rm::load_topology("dgx-a100-ib"), 8);
  CHECK(f.nodes() == 1);
  CHECK(route_names(f, 3, 5) == Names{"n0.g3.nvl.up", "n0.g5.nvl.down"});
  CHECK(f.route(4, 4).empty());
  CHECK(f.route_bytes_per_s(3, 5) == doctest::Approx(300e9));
  CHECK(f.route_latency_s(3, 5) == doctest::Approx(2e-6).scale(0));
}

TEST_CASE("rail-optimised fat tree: same rail stays on its leaf, other rails cross the spine") {
  const rm::Fabric f(rm::load_topology("dgx-a100-ib"), 32);
  CHECK(f.nodes() == 4);
  // GPU 2 of node 0 to GPU 2 of node 1: rail 2, one leaf.
  CHECK(route_names(f, 2, 10) == Names{"n0.nic2.tx", "n1.nic2.rx"});
  // GPU 2 of node 0 to GPU 3 of node 3: rails 2 and 3 meet at the spine.
  CHECK(route_names(f, 2, 27) ==
        Names{"n0.nic2.tx", "rail2.leaf0.up", "rail3.leaf0.down", "n3.nic3.rx"});
  CHECK(route_names(f, 9, 14) == Names{"n1.g1.nvl.up", "n1.g6.nvl.down"});
  CHECK(f.route_bytes_per_s(2, 10) == doctest::Approx(24e9));
}

TEST_CASE("fat tree with leaf groups, fewer NICs than GPUs, oversubscription") {
  rm::Topology t = rm::load_topology("dgx-a100-ib");
  t.inter.rail_optimized = false;
  t.inter.nics_per_node = 4;
  t.inter.nodes_per_leaf = 2;
  t.inter.oversubscription = 2;
  const rm::Fabric f(t, 32);
  // GPU 5 uses NIC 5*4/8 = 2; nodes 0 and 1 share leaf 0.
  CHECK(route_names(f, 5, 13) == Names{"n0.nic2.tx", "n1.nic2.rx"});
  CHECK(route_names(f, 5, 16) == Names{"n0.nic2.tx", "leaf0.up", "leaf1.down", "n2.nic0.rx"});
  // Leaf spine bandwidth: 2 nodes x 4 NICs x 24 GB/s / 2.
  const auto& r = f.route(5, 16);
  CHECK(f.links()[r[1]].bytes_per_s == doctest::Approx(2 * 4 * 24e9 / 2));
  CHECK(f.links()[r[1]].cls == rm::LinkClass::kSpine);
}

TEST_CASE("PCIe tree: switch, socket hops") {
  const rm::Fabric f(rm::parse_topology(kPcieBox, "pcie-test.yaml"), 8);
  CHECK(route_names(f, 0, 1) == Names{"n0.g0.pcie.up", "n0.g1.pcie.down"});
  CHECK(route_names(f, 0, 2) ==
        Names{"n0.g0.pcie.up", "n0.sw0.up", "n0.sw1.down", "n0.g2.pcie.down"});
  CHECK(route_names(f, 1, 7) == Names{"n0.g1.pcie.up", "n0.sw0.up", "n0.s0-s1", "n0.sw3.down",
                                      "n0.g7.pcie.down"});
  CHECK(route_names(f, 6, 3) == Names{"n0.g6.pcie.up", "n0.sw3.up", "n0.s1-s0", "n0.sw1.down",
                                      "n0.g3.pcie.down"});
  CHECK(f.route_latency_s(1, 7) == doctest::Approx(4e-6 + 2e-6).scale(0));
  CHECK(f.route_bytes_per_s(1, 7) == doctest::Approx(25e9));
}

TEST_CASE("shared memory devices") {
  const rm::Fabric f(rm::load_topology("cpu-local"), 4);
  CHECK(route_names(f, 0, 3) == Names{"n0.d0.shm.up", "n0.d3.shm.down"});
  CHECK(f.links().size() == 8);
  CHECK(f.links()[0].cls == rm::LinkClass::kSharedMemory);
}

TEST_CASE("torus: dimension order, shorter way round, ties go +, rings of 2 have one link") {
  const rm::Fabric f(rm::parse_topology(kTorus, "torus-test.yaml"), 48);
  // dims 4 x 2 x 6: x has +/-, y (size 2) only +, z has +/-.
  CHECK(f.links().size() == 48 * (2 + 1 + 2));
  // (0,0,0) -> (3,0,0): -x once (shorter way round).
  CHECK(route_names(f, 0, 3) == Names{"t0.-x"});
  // (0,0,0) -> (2,0,0): tie, + direction twice.
  CHECK(route_names(f, 0, 2) == Names{"t0.+x", "t1.+x"});
  // (1,1,0)=5 -> (1,0,0)=1: y ring of 2, through '+'.
  CHECK(route_names(f, 5, 1) == Names{"t5.+y"});
  // (0,0,0) -> (1,1,5)=1+4+40=45: x+, y+, then z -1 (5 is one step back on a ring of 6).
  CHECK(route_names(f, 0, 45) == Names{"t0.+x", "t1.+y", "t5.-z"});
}

TEST_CASE("partial torus routes may cross devices outside the job") {
  const rm::Fabric f(rm::parse_topology(kTorus, "torus-test.yaml"), 6);
  // (1,1,0)=5 -> (3,0,0)=3: x tie (2 steps) goes + through device 6, outside the job.
  CHECK(route_names(f, 5, 3) == Names{"t5.+x", "t6.+x", "t7.+y"});
}

TEST_CASE("GPU count checks") {
  const rm::Topology t = rm::load_topology("dgx-a100-ib");
  CHECK_THROWS_AS(rm::Fabric(t, 0), rm::InputError);
  CHECK_THROWS_AS(rm::Fabric(t, 129), rm::InputError);
  CHECK_THROWS_AS(rm::Fabric(t, 12), rm::InputError);  // not a whole number of nodes
  CHECK_NOTHROW(rm::Fabric(t, 4));
  CHECK_NOTHROW(rm::Fabric(t, 128));
  rm::Topology box = t;
  box.inter = rm::InterNode{};
  CHECK_THROWS_WITH_AS(rm::Fabric(box, 16), doctest::Contains("no inter-node fabric"), rm::InputError);
}

TEST_CASE("a torus whose routes would cross more links than a route holds is refused") {
  rm::Topology t = rm::parse_topology(kTorus, "torus-test.yaml");
  t.max_nodes = 130;
  t.inter.torus_dims = {130, 1, 1};  // the shorter way round a ring of 130: up to 65 hops
  CHECK_THROWS_WITH_AS(rm::Fabric(t, 130), doctest::Contains("inter.dims: routes would cross up to 65 links"),
                       rm::InputError);
  t.max_nodes = 128;
  t.inter.torus_dims = {128, 1, 1};
  const rm::Fabric f(t, 128);
  CHECK(f.route(0, 64).size() == rm::Route::kMaxLinks);
}

TEST_CASE("a 1,024-GPU fabric builds quickly and answers routes lazily") {
  rm::Topology t = rm::load_topology("dgx-a100-ib");
  t.max_nodes = 128;
  t.inter.nodes_per_leaf = 32;
  const rm::Fabric f(t, 1024);
  CHECK(route_names(f, 1023, 0) ==
        Names{"n127.nic7.tx", "rail7.leaf3.up", "rail0.leaf0.down", "n0.nic0.rx"});
}
