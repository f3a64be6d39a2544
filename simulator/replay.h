// Replaying a schedule on SimGrid: one actor per GPU walks its op list on the platform
// built from the same Fabric (platform.h). Compute ops keep the GPU's actor busy for
// flops / efficiency at peak (a timed sleep: one actor per host, nothing shares its CPU);
// sends and receives are asynchronous SimGrid comms that meet by (src, dst, tag) and
// share links by max-min fairness; a wait blocks the actor until its comm is done, so
// transfers overlap compute exactly as the op list says. A calibrated profile's
// transfer_overlap < 1 and per-class latencies apply as in the planner's cost model
// (replay.cc, platform.h). Alloc and free ops are tracked in program order for each
// GPU's peak memory.
//
// Collectives (FSDP) are modelled as NCCL's ring over the group: each member sends its
// (D-1) shards to its ring successor as one flow of (D-1)·bytes (the same links, the same
// sharing and the same bandwidth term as D-1 ring steps), and the wait adds the D-2
// further step latencies. One comm per member instead of D-1 keeps 128-GPU steps fast.
//
// When the schedule emits E of the model's L identical layers (OpSchedule::
// layer_multiplier > 1), the figures are extrapolated to all layers. Layers at either end
// differ from the rest: the first all-gather is exposed, and the last backward layers
// share links with the head's reduce-scatter (in a 16-GPU step of llama2-7b the last
// three take 2.5 % longer, up to four on some GPUs as waits shift between layers; in an
// 8K-token FSDP step, where the collectives nearly fill each layer's compute, the shifts
// reach the middle of 8 emitted layers: 8.5 % over the full replay, 16 layers match it
// to 1e-6). So with E >= kMinEmittedLayers the middle layer E/2 - 1, seven or more layers
// from either end, stands for itself and the L - E layers not emitted, the others for themselves; with
// fewer, every emitted layer stands for L/E (boundary effects then count L/E times). Ops
// outside the layers (embedding, head, optimizer) count once. replayed_time_s is the
// makespan of the op lists as emitted.
//
// A SimGrid engine can be run once per process (its clock and models are global), so
// replay() runs it in a forked child process and reads the results back; the caller's
// process is untouched and replay() can be called any number of times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/schedule.h"
#include "planner/topology.h"
#include "planner/trace_events.h"

namespace rm::sim {

inline constexpr int kMinEmittedLayers = 16;  // see above

struct GpuTimes {
  double end_s = 0;            // when its last op finished (extrapolated)
  double busy_s = 0;           // computing
  double exposed_comm_s = 0;   // blocked in waits for transfers and collectives, step syncs
  double idle_s = 0;           // step time - busy - exposed (done early, waiting for the rest)
  double peak_memory_bytes = 0;
  double useful_flops = 0;
};

struct ReplayResult {
  double time_s = 0;                 // step time: the latest GPU's end_s (extrapolated)
  double time_free_comm_s = 0;       // the same op lists with free communication
  double replayed_time_s = 0;        // makespan of the op lists as emitted (SimGrid clock)
  int layer_multiplier = 1;          // OpSchedule::layer_multiplier
  std::vector<GpuTimes> gpus;        // extrapolated to all layers (see above)
  double peak_memory_bytes = 0;      // max over GPUs
  double useful_flops = 0;           // all GPUs, extrapolated
  int64_t ops = 0;                   // ops replayed
  int64_t activities = 0;            // SimGrid comms and sleeps simulated
  int routes = 0;                    // routes added to the platform
  double wall_s = 0;                 // wall-clock seconds of the SimGrid run
};

struct ReplayOptions {
  std::string trace_path;   // write a trace-event JSON there ("" = none)
  std::string trace_title = "simulated";
  bool progress = false;    // a progress line on stderr every second or so
};

// Throws std::runtime_error if the op lists cannot complete (a receive without its send:
// a generator bug), InputError if the trace path is not writable.
ReplayResult replay(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs,
                    const ReplayOptions& options = {});

// The makespan of the op lists with free communication (every transfer done the moment
// both sides posted it; no step sync), computed directly without SimGrid: the
// denominator of comm_overhead and scaling_efficiency (cost_model.h's definitions).
// Extrapolated to all layers like ReplayResult.
double free_comm_time(const OpSchedule& schedule, const CostParams& costs);

}  // namespace rm::sim
