// Link shares of a folded replay (see replica_load.h).
#include "simulator/replica_load.h"

#include "simulator/collective_ring.h"

namespace rm::sim {

std::vector<double> replayed_link_share(const OpSchedule& s, const Fabric& fabric,
                                        const std::vector<std::vector<CollectiveRole>>& replayed_roles) {
  const size_t links = fabric.links().size();
  std::vector<double> share(links, 1.0);
  if (s.emitted_gpus.empty()) return share;
  std::vector<char> replayed(fabric.gpus(), 0);
  for (int g : s.emitted_gpus) replayed[g] = 1;
  // [0]: ring transfers, [1]: collective flows; in the full job and in the replay.
  std::vector<double> all[2] = {std::vector<double>(links, 0), std::vector<double>(links, 0)};
  std::vector<double> mine[2] = {all[0], all[1]};
  auto count = [&](std::vector<double>& into, int src, int dst) {
    if (src < 0 || dst < 0 || src == dst) return;
    for (int l : fabric.route(src, dst)) into[l] += 1;
  };
  for (auto [src, dst] : s.ring_flows) {
    count(all[0], src, dst);
    if (replayed[src]) count(mine[0], src, dst);
  }
  const auto full_roles = full_collective_roles(s, fabric);
  for (size_t group = 0; group < full_roles.size(); ++group) {
    for (int g = 0; g < fabric.gpus(); ++g) {
      count(all[1], g, full_roles[group][g].rail_succ);
      count(all[1], g, full_roles[group][g].node_succ);
      if (!replayed[g]) continue;
      count(mine[1], g, replayed_roles[group][g].rail_succ);
      count(mine[1], g, replayed_roles[group][g].node_succ);
    }
  }
  for (size_t l = 0; l < links; ++l) {
    // Ring transfers and collectives rarely run at once and the ring's carry the bytes of
    // long sequences: a link the replayed rings use takes their share, others the
    // collectives' share.
    const int kind = mine[0][l] > 0 ? 0 : 1;
    if (mine[kind][l] > 0 && all[kind][l] > mine[kind][l]) share[l] = mine[kind][l] / all[kind][l];
  }
  return share;
}

}  // namespace rm::sim
