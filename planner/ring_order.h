// Ring orders: which GPU holds which ring position. An order is a permutation of all G
// GPU ids; ring k is order[k*cp .. (k+1)*cp) (plan.h), and every ring's position i sends
// to position i+1 (and i-1 when bidirectional) along Fabric::route.
//
//   node-major  0, 1, ..., G-1
//   snake       rail-aware: node 0 goes 0..g-1, node 1 g-1..0, node 2 0..g-1, ...; a ring
//               that crosses nodes then hops between GPUs of the same local index, i.e.
//               the same NIC rail (one leaf switch on a rail-optimised fat tree)
//   searched    bottleneck-minimising local search (swaps) from the better of the two,
//               for irregular fabrics (PCIe trees, tori, oversubscribed or non-rail fat
//               trees) where neither regular order is right
#pragma once

#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/link_sharing.h"
#include "planner/topology.h"

namespace rm {

std::vector<int> node_major_order(int gpus);
std::vector<int> snake_order(const Fabric& fabric);

// The transfers of one ring step for all rings of an order: position i -> i+1 (and
// i -> i-1 when both_directions), `bytes` each. Rings of one GPU have none.
std::vector<Flow> ring_step_flows(const std::vector<int>& order, int cp, bool both_directions,
                                  double bytes);

// Seconds per byte of the most loaded link when every ring edge carries one byte at once
// (sum over the link's flows / its bandwidth): the bottleneck the search minimises.
double max_link_load_s_per_byte(const Fabric& fabric, const CostParams& cost,
                                const std::vector<int>& order, int cp, bool both_directions);

// Whether the regular orders can be beaten by searching: PCIe trees, tori, oversubscribed
// or non-rail-optimised fat trees. On NVSwitch nodes with a rail-optimised non-blocking
// fat tree, the snake already puts every hop on one NVSwitch port or one rail.
bool fabric_is_irregular(const Topology& topo);

// Local search (first-improvement swaps of two positions: every pair up to 1,448 GPUs,
// each with its next ones past that; a few passes) minimising (max link load, total link
// load) from `start`. Deterministic.
std::vector<int> search_order(const Fabric& fabric, const CostParams& cost, int cp,
                              bool both_directions, std::vector<int> start);

// Throws InputError unless `order` is a permutation of 0..gpus-1.
void check_order(const std::vector<int>& order, int gpus, const std::string& where);

}  // namespace rm
