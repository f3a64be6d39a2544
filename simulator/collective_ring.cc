// Collectives as NCCL's ring over the group (see collective_ring.h).
#include "simulator/collective_ring.h"

namespace rm::sim {

std::vector<std::vector<RingNeighbours>> collective_rings(const OpSchedule& s, int gpus) {
  std::vector<std::vector<RingNeighbours>> out(s.groups.size(), std::vector<RingNeighbours>(gpus));
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const auto& members = s.groups[g];
    const int D = static_cast<int>(members.size());
    for (int j = 0; j < D; ++j) {
      out[g][members[j]] = {members[(j + 1) % D], members[(j + D - 1) % D], D};
    }
  }
  return out;
}

std::array<MessageEnd, 2> collective_flows(const RingNeighbours& n, int self, const Op& op) {
  const double flow = (n.size - 1) * op.bytes;
  return {MessageEnd{self, n.succ, true, true, op.tag, flow},
          MessageEnd{n.pred, self, false, true, op.tag, flow}};
}

}  // namespace rm::sim
