// Free communication: the makespan of the op lists when every transfer completes the
// moment both sides posted it, collectives when the member and its neighbours in both
// rings (collective_ring.h) posted, and no step sync. Computed by a direct walk, no SimGrid: ranks run until they
// wait for something not yet posted; a worklist resumes them. It is the denominator of
// comm_overhead and scaling_efficiency (cost_model.h's definitions), and the schedule's
// deadlock check: cheap, and it names the op where a broken schedule would hang.
#pragma once

#include "planner/cost_params.h"
#include "planner/op_list.h"
#include "planner/topology.h"

namespace rm::sim {

// Extrapolated to all layers (layer_weights.h). Throws std::runtime_error when the op
// lists cannot complete (a wait whose transfer's other side is never posted) or when the
// two ends of a message disagree (message_matching.h).
// `fabric` places the collectives' members on nodes.
double free_comm_time(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs);

}  // namespace rm::sim
