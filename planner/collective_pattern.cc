// The two-level ring of a collective (see collective_pattern.h).
#include "planner/collective_pattern.h"

#include <algorithm>
#include <map>

namespace rm {

std::vector<CollectiveRole> collective_roles(const Fabric& fabric, const std::vector<int>& members) {
  std::vector<CollectiveRole> roles(static_cast<size_t>(fabric.gpus()));
  if (members.size() < 2) return roles;
  std::map<int, std::vector<int>> by_node;  // node -> its members by GPU id
  for (int gpu : members) by_node[fabric.node_of(gpu)].push_back(gpu);
  const int N = static_cast<int>(by_node.size());
  const int g = static_cast<int>(by_node.begin()->second.size());
  std::vector<std::vector<int>> grid;
  bool regular = true;
  for (auto& [node, gpus] : by_node) {
    std::sort(gpus.begin(), gpus.end());
    regular = regular && static_cast<int>(gpus.size()) == g;
    grid.push_back(gpus);
  }
  if (!regular) {
    // One flat ring over all members, node by node.
    std::vector<int> ring;
    for (const auto& gpus : grid) ring.insert(ring.end(), gpus.begin(), gpus.end());
    const int D = static_cast<int>(ring.size());
    for (int i = 0; i < D; ++i) {
      CollectiveRole& r = roles[static_cast<size_t>(ring[i])];
      r.node_succ = ring[(i + 1) % D];
      r.node_pred = ring[(i + D - 1) % D];
      r.node_shards = D - 1;
      r.node_steps = D - 1;
    }
    return roles;
  }
  for (int n = 0; n < N; ++n) {
    for (int l = 0; l < g; ++l) {
      CollectiveRole& r = roles[static_cast<size_t>(grid[n][l])];
      if (N > 1) {
        r.rail_succ = grid[(n + 1) % N][l];
        r.rail_pred = grid[(n + N - 1) % N][l];
        r.rail_shards = N - 1;
        r.rail_steps = N - 1;
      }
      if (g > 1) {
        r.node_succ = grid[n][(l + 1) % g];
        r.node_pred = grid[n][(l + g - 1) % g];
        r.node_shards = static_cast<double>(g - 1) * N;
        r.node_steps = g - 1;
      }
    }
  }
  return roles;
}

}  // namespace rm
