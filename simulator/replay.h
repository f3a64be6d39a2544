// Replaying a schedule: the simulator's public entry. replay() checks the op lists
// against the message contract (planner/message_contract.h), walks them with free
// communication (free_walk.h: the denominator of comm_overhead, and the deadlock check
// that names the op where a broken schedule would hang), replays them on SimGrid
// (simgrid_replay.h: one actor per GPU on the platform built from the same Fabric,
// transfers paired by posting order on each link as message_matching.h says, collectives
// as collective_ring.h says), and adds what the op lists alone give: each GPU's peak
// memory (alloc and free ops tracked in program order) and useful FLOPs. kBeginPass and
// kOwnGrad ops take no time and no memory and leave no trace.
//
// When the schedule emits E of the model's L identical layers (OpSchedule::
// layers_emitted < layers_modelled), the figures are extrapolated to all layers as
// layer_weights.h says, and folded ring steps likewise; replayed_time_s is the makespan of
// the op lists as emitted. When it emits only some data-parallel rings
// (OpSchedule::emitted_gpus), the others are their copies: the per-GPU figures are the
// replayed GPUs', useful FLOPs count every GPU as its copy, and the copies' link load is
// kept (replica_load.h).
//
// A SimGrid engine can be run once per process (its clock and models are global), so
// replay() runs it in a forked child process and reads the results back (child_process.h);
// the caller's process is untouched and replay() can be called any number of times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/op_list.h"
#include "planner/topology.h"

namespace rm::sim {

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
  int layers_emitted = 0;            // OpSchedule::layers_emitted
  std::vector<GpuTimes> gpus;        // extrapolated to all layers (layer_weights.h)
  std::vector<int> gpu_ids;          // GPU id of each entry of `gpus`: all, or the replayed ones
                                     // when replicas are folded (OpSchedule::emitted_gpus)
  double peak_memory_bytes = 0;      // max over GPUs
  double useful_flops = 0;           // all GPUs, extrapolated (folded replicas counted as replayed)
  int64_t ops = 0;                   // ops replayed
  int64_t activities = 0;            // SimGrid comms and sleeps simulated
  int routes = 0;                    // routes added to the platform
  double wall_s = 0;                 // wall-clock seconds of the SimGrid run
};

struct ReplayOptions {
  std::string trace_path;   // write a trace-event JSON there ("" = none)
  std::string trace_title = "simulated";
  std::vector<int> trace_gpus;  // GPUs whose events the trace keeps (empty: all)
  bool progress = false;    // a progress line on stderr every second or so
  // GPU speeds (`simulate --gpu-spread`): each GPU's ring attention kernels take its drawn
  // gpu_slowdowns() factor of their mean time, in place of the lockstep term's expected
  // slowest of the ring (OpSchedule::lockstep_slowdown): the rings' own waits decide what
  // the slow GPUs cost. 0 = the lockstep term.
  double gpu_spread = 0;
  unsigned spread_seed = 1;
};

// What each of `gpus` GPUs' kernels take over the mean when GPU speeds spread with relative
// standard deviation `sigma`: max(0.1, 1 + sigma z), z standard normal, drawn in GPU order
// from `seed` (ReplayOptions::gpu_spread).
std::vector<double> gpu_slowdowns(double sigma, unsigned seed, int gpus);

// Throws std::runtime_error if the schedule breaks the message contract ("schedule breaks
// the message contract: link 0 -> 1, message 3: ...") or its op lists cannot complete
// (a receive without its send): generator bugs; InputError if the trace path is not
// writable.
ReplayResult replay(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs,
                    const ReplayOptions& options = {});

}  // namespace rm::sim
