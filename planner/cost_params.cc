#include "planner/cost_params.h"

#include "planner/straggler.h"

namespace rm {

CostParams CostParams::from_topology(const Topology& topo) {
  CostParams p;
  p.peak_flops = topo.gpu.peak_flops;
  p.attention = topo.gpu.attention;
  p.gemm_efficiency = topo.gpu.gemm_efficiency;
  p.gemm_half_flops = topo.gpu.gemm_half_flops;
  p.hbm_bytes_per_s = topo.gpu.hbm_bytes_per_s;
  p.lockstep_jitter = topo.gpu.lockstep_jitter;
  return p;
}

double CostParams::lockstep_slowdown(int ranks) const { return rm::lockstep_slowdown(lockstep_jitter, ranks); }

double CostParams::link_bytes_per_s(const Link& link) const {
  const double b = links[static_cast<int>(link.cls)].beta_bytes_per_s;
  return b > 0 ? b : link.bytes_per_s;
}

double CostParams::route_latency_s(const Fabric& fabric, int src, int dst) const {
  const auto& route = fabric.route(src, dst);
  if (route.empty()) return 0;
  // The slowest link names the class whose calibrated alpha describes the message.
  int slowest = route.front();
  double sum = 0;
  for (int id : route) {
    const Link& l = fabric.links()[id];
    sum += l.latency_s;
    if (link_bytes_per_s(l) < link_bytes_per_s(fabric.links()[slowest])) slowest = id;
  }
  const double alpha = links[static_cast<int>(fabric.links()[slowest].cls)].alpha_s;
  return alpha > 0 ? alpha : sum;
}

}  // namespace rm
