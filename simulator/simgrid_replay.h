// Replaying a schedule on SimGrid: one actor per GPU walks its op list on the platform
// built from the same Fabric (platform.h). Compute ops keep the GPU's actor busy for
// flops / efficiency at peak (a timed sleep: one actor per host, nothing shares its CPU);
// sends and receives are asynchronous SimGrid comms, paired by posting order on each link
// (message_matching.h), that share links by max-min fairness; a wait blocks the actor
// until its comm is done, so transfers overlap compute exactly as the op list says. A
// calibrated profile's transfer_overlap < 1 and per-class latencies apply as in the
// planner's cost model (simgrid_replay.cc, platform.h). Collectives run as NCCL's ring
// over their group (collective_ring.h). Seconds are weighted by the layers each op stands
// for (layer_weights.h).
#pragma once

#include <cstdint>
#include <vector>

#include "planner/cost_params.h"
#include "planner/op_list.h"
#include "planner/topology.h"
#include "simulator/replay.h"

namespace rm::sim {

// The figures that are not per GPU (a plain struct: it crosses a pipe as bytes).
struct SimGridScalars {
  double time_s = 0, replayed_time_s = 0, wall_s = 0;
  int64_t activities = 0, ops = 0;
  int routes = 0;
};

// ReplayResult's timing fields, as the SimGrid run gives them; `gpus` holds end_s, busy_s
// and exposed_comm_s.
struct SimGridFigures {
  SimGridScalars scalars;
  std::vector<GpuTimes> gpus;
};

// Runs a SimGrid engine, which a process can do once (replay.h runs this in a child).
// Throws std::runtime_error if the op lists cannot complete or a message's ends disagree,
// InputError if the trace path is not writable.
SimGridFigures replay_on_simgrid(const OpSchedule& schedule, const Fabric& fabric,
                                 const CostParams& costs, const ReplayOptions& options);

}  // namespace rm::sim
