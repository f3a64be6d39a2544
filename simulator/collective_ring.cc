// Collectives as two concurrent rings (see collective_ring.h).
#include "simulator/collective_ring.h"

#include <algorithm>

namespace rm::sim {

std::vector<std::vector<CollectiveRole>> collective_roles(const OpSchedule& s, const Fabric& fabric) {
  std::vector<std::vector<CollectiveRole>> out;
  out.reserve(s.groups.size());
  for (const auto& members : s.groups) out.push_back(rm::collective_roles(fabric, members));
  return out;
}

std::vector<MessageEnd> collective_flows(const CollectiveRole& r, int self, const Op& op) {
  std::vector<MessageEnd> ends;
  if (r.rail_succ >= 0) {
    const double flow = r.rail_shards * op.bytes;
    ends.push_back({self, r.rail_succ, true, true, op.tag, flow});
    ends.push_back({r.rail_pred, self, false, true, op.tag, flow});
  }
  if (r.node_succ >= 0) {
    const double flow = r.node_shards * op.bytes;
    ends.push_back({self, r.node_succ, true, true, op.tag, flow});
    ends.push_back({r.node_pred, self, false, true, op.tag, flow});
  }
  return ends;
}

double collective_extra_latency_s(const CollectiveRole& r, int self, const Fabric& fabric,
                                  const CostParams& costs) {
  double rail = 0, node = 0;
  if (r.rail_succ >= 0) rail = (r.rail_steps - 1) * costs.route_latency_s(fabric, self, r.rail_succ);
  if (r.node_succ >= 0) node = (r.node_steps - 1) * costs.route_latency_s(fabric, self, r.node_succ);
  return std::max(rail, node);
}

}  // namespace rm::sim
