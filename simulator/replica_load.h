// The load of the rings a folded replay leaves out (ScheduleOptions::fold_replicas): the
// replayed rings' flows get the share of each link that they have in the full job. Per
// directed link, count the flows that cross it in the full job and those the replay posts,
// for ring transfers (every rank's, OpSchedule::ring_flows, against the replayed ranks')
// and for collective flows (every member's, against the closed rings of collective_ring.h)
// apart; the link runs at capacity x replayed / all, of ring transfers where the replayed
// rings use it, else of collectives. The rings run in lockstep with equal transfers, so
// under max-min sharing each replayed flow gets what it would get beside all the others.
// Ring transfers and collectives share a link only briefly (the collectives are the
// smaller part in long-context steps), so each class's share is taken alone. Links only
// the replayed GPUs use keep their capacity.
#pragma once

#include <vector>

#include "planner/collective_pattern.h"
#include "planner/op_list.h"
#include "planner/topology.h"

namespace rm::sim {

// Capacity factor per Fabric link id (all 1 when every rank is emitted). `replayed_roles`:
// collective_roles(s, fabric) as the replay uses them.
std::vector<double> replayed_link_share(const OpSchedule& s, const Fabric& fabric,
                                        const std::vector<std::vector<CollectiveRole>>& replayed_roles);

}  // namespace rm::sim
