// Link sharing: how long concurrent transfers take when their routes share links.
//
// The model is SimGrid's CM02 without TCP factors: each flow first pays its latency
// (CostParams::route_latency_s: the sum of its route's link latencies unless calibrated),
// then streams at its max-min fair rate (progressive filling over the directed links of
// Fabric::route, capacities from CostParams::link_bytes_per_s). When a flow finishes the
// rates are recomputed for the others. Approximation: all flows start streaming together
// (latencies are microseconds, transfers milliseconds), so finish = latency + the
// streaming phase's finish.
//
// The planner calls this with every ring of a plan transferring at once (the dp rings run
// in lockstep), so rings that share a NIC or a spine link slow each other down.
#pragma once

#include <vector>

#include "planner/cost_params.h"
#include "planner/topology.h"

namespace rm {

struct Flow {
  int src = 0;
  int dst = 0;
  double bytes = 0;
};

struct SharingResult {
  std::vector<double> finish_s;  // per flow, latency included
  double makespan_s = 0;         // the last flow's finish
  int slowest_flow = -1;
  int bottleneck_link = -1;      // the saturated link that set the slowest flow's first rate
  std::vector<int> flow_bottleneck;  // per flow, the link that set its first rate (-1: none)
};

SharingResult share_links(const Fabric& fabric, const CostParams& cost,
                          const std::vector<Flow>& flows);

// Max-min fair rates (bytes/s) of flows that all stream at once (one progressive filling,
// no completions). Flows with an empty route get +infinity. `bottleneck` (if not null)
// receives per flow the link that limited it (-1 for none).
std::vector<double> max_min_rates(const Fabric& fabric, const CostParams& cost,
                                  const std::vector<const Route*>& routes,
                                  std::vector<int>* bottleneck = nullptr);

}  // namespace rm
