// The simulated timeline (see replay_trace.h).
#include "simulator/replay_trace.h"

namespace rm::sim {

ReplayTrace::ReplayTrace(std::string path, std::string title, const std::vector<int>& gpus)
    : path_(std::move(path)), writer_(std::move(title)) {
  for (int g : gpus) {
    if (g >= static_cast<int>(keep_.size())) keep_.resize(static_cast<size_t>(g) + 1, false);
    keep_[static_cast<size_t>(g)] = true;
  }
}

void ReplayTrace::compute(int gpu, const Op& op, double start_s, double duration_s) {
  if (!on() || !kept(gpu)) return;
  TraceEvent e;
  e.gpu = gpu;
  e.name = op_name(op);
  e.start_s = start_s;
  e.duration_s = duration_s;
  e.layer = op.layer;
  e.step = op.layer >= 0 && op.compute != ComputeKind::kGemm ? op.step : -1;
  e.flops = op.flops;
  writer_.add(e);
}

void ReplayTrace::transfer(const Op& op, int src, int dst, double bytes, double start_s,
                           double duration_s) {
  if (!on()) return;
  const bool coll = op.kind == OpKind::kCollective;
  const char* name = !coll ? "transfer"
                     : op.collective == CollectiveKind::kAllGather     ? "all-gather"
                     : op.collective == CollectiveKind::kReduceScatter ? "reduce-scatter"
                                                                       : "all-reduce";
  TraceEvent e;
  e.name = name;
  e.start_s = start_s;
  e.duration_s = duration_s;
  e.layer = op.layer;
  e.step = coll ? -1 : op.step;
  e.bytes = bytes;
  e.gpu = src;
  e.track = TraceTrack::kSend;
  e.peer = dst;
  if (kept(src)) writer_.add(e);
  e.gpu = dst;
  e.track = TraceTrack::kRecv;
  e.peer = src;
  if (kept(dst)) writer_.add(e);
}

void ReplayTrace::write(const OpSchedule& s) {
  if (!on()) return;
  writer_.set_metadata("layers", s.note.empty() ? "all layers emitted" : s.note);
  writer_.set_metadata("network_model", "CM02, latency and bandwidth factors 1, no cross traffic");
  writer_.write(path_);
}

}  // namespace rm::sim
