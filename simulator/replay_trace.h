// The simulated timeline, in the trace-event format the executor also writes
// (planner/trace_events.h), so a predicted and a measured run sit side by side: one event
// per compute op on its GPU's compute track, one per transfer on the sender's send track
// and the receiver's recv track (a collective's flows named after the collective).
// Step syncs, waits and the no-time ops (kBeginPass, kOwnGrad) are not events.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "planner/op_list.h"
#include "planner/trace_events.h"

namespace rm::sim {

class ReplayTrace {
 public:
  // Collects nothing when `path` is "". Keeps the events of `gpus` only (a transfer's send
  // on its source, its receive on its destination) when not empty: a large ring's full
  // timeline is too big to open.
  ReplayTrace(std::string path, std::string title, const std::vector<int>& gpus = {});

  bool on() const { return !path_.empty(); }
  // Compute op `op` of GPU `gpu`, times in simulated seconds.
  void compute(int gpu, const Op& op, double start_s, double duration_s);
  // A transfer src -> dst of `bytes`, posted by `op` (a send, receive or collective).
  void transfer(const Op& op, int src, int dst, double bytes, double start_s, double duration_s);
  // Writes the file, with the schedule's note on the layers emitted. Throws InputError
  // when the path is not writable.
  void write(const OpSchedule& s);

 private:
  bool kept(int gpu) const { return keep_.empty() || (gpu < static_cast<int>(keep_.size()) && keep_[gpu]); }

  std::string path_;
  TraceWriter writer_;
  std::vector<bool> keep_;  // by GPU id; empty: every GPU
};

}  // namespace rm::sim
