// The two-level ring of a collective (see collective_pattern.h).
#include "planner/collective_pattern.h"

#include <algorithm>
#include <map>

namespace rm {

std::vector<CollectiveRole> collective_roles(const Fabric& fabric, const std::vector<int>& members) {
  std::vector<CollectiveRole> roles(members.size());
  if (members.size() < 2) return roles;
  // Positions in `members`, by node, then by GPU id inside each node.
  std::map<int, std::vector<int>> by_node;
  for (size_t k = 0; k < members.size(); ++k) by_node[fabric.node_of(members[k])].push_back(static_cast<int>(k));
  const int N = static_cast<int>(by_node.size());
  const int g = static_cast<int>(by_node.begin()->second.size());
  std::vector<std::vector<int>> grid;
  bool regular = true;
  for (auto& [node, at] : by_node) {
    std::sort(at.begin(), at.end(), [&](int a, int b) { return members[a] < members[b]; });
    regular = regular && static_cast<int>(at.size()) == g;
    grid.push_back(at);
  }
  auto gpu = [&](int at) { return members[static_cast<size_t>(at)]; };
  if (!regular) {
    // One flat ring over all members, node by node.
    std::vector<int> ring;
    for (const auto& at : grid) ring.insert(ring.end(), at.begin(), at.end());
    const int D = static_cast<int>(ring.size());
    for (int i = 0; i < D; ++i) {
      CollectiveRole& r = roles[static_cast<size_t>(ring[i])];
      r.node_succ = gpu(ring[(i + 1) % D]);
      r.node_pred = gpu(ring[(i + D - 1) % D]);
      r.node_shards = D - 1;
      r.node_steps = D - 1;
    }
    return roles;
  }
  for (int n = 0; n < N; ++n) {
    for (int l = 0; l < g; ++l) {
      CollectiveRole& r = roles[static_cast<size_t>(grid[n][l])];
      if (N > 1) {
        r.rail_succ = gpu(grid[(n + 1) % N][l]);
        r.rail_pred = gpu(grid[(n + N - 1) % N][l]);
        r.rail_shards = N - 1;
        r.rail_steps = N - 1;
      }
      if (g > 1) {
        r.node_succ = gpu(grid[n][(l + 1) % g]);
        r.node_pred = gpu(grid[n][(l + g - 1) % g]);
        r.node_shards = static_cast<double>(g - 1) * N;
        r.node_steps = g - 1;
      }
    }
  }
  return roles;
}

RingStepLatency ring_step_latency(const Fabric& fabric, const CostParams& costs, const std::vector<int>& members,
                                  const std::vector<CollectiveRole>& roles) {
  double sum[2] = {0, 0};
  int hops[2] = {0, 0};
  for (size_t k = 0; k < members.size(); ++k) {
    const int succ[2] = {roles[k].rail_succ, roles[k].node_succ};
    for (int ring = 0; ring < 2; ++ring) {
      if (succ[ring] < 0 || succ[ring] == members[k]) continue;
      sum[ring] += costs.route_latency_s(fabric, members[k], succ[ring]);
      ++hops[ring];
    }
  }
  return {hops[0] > 0 ? sum[0] / hops[0] : 0.0, hops[1] > 0 ? sum[1] / hops[1] : 0.0};
}

}  // namespace rm
