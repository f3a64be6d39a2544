// The SimGrid platform of a Fabric: one host per GPU and one SimGrid link per Fabric link,
// with routes taken from the Fabric's one route function, so the simulator and the
// planner's link-sharing model see the same links and the same paths.
//
//   gpu0 --n0.g0.nvl.up--> [NVSwitch] --n0.g1.nvl.down--> gpu1          (inside a node)
//   gpu0 --n0.nic0.tx--> [rail0 leaf] (--leaf.up--> [spine] --leaf.down-->) --n1.nic0.rx--> gpu8
//
// Switches are not hosts: a route is just the ordered list of directed links it crosses.
// Routes are added only for the GPU pairs a schedule uses (ring neighbours, collective
// peers, direct sends); all N^2 of them at 1,024 GPUs would cost seconds and memory for
// nothing. The links carry no latency: SimGrid's CM02 would weight each flow's share of a
// link by its route's latency (configure_network_model), so the replay adds each
// transfer's CostParams::route_latency_s (what the planner charges, a calibrated alpha
// included) after its stream. Units: FLOP/s, bytes/s, seconds.
//
// Needs a live simgrid::s4u::Engine; build one Platform per engine, add routes, seal().
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "planner/cost_params.h"
#include "planner/topology.h"

namespace simgrid::s4u {
class Host;
class Link;
class NetZone;
}  // namespace simgrid::s4u

namespace rm::sim {

// Selects the network model for GPU fabrics. Call once per process, before the platform.
void configure_network_model();

class Platform {
 public:
  // Hosts at costs.peak_flops; link bandwidths as the cost model sees them
  // (CostParams::link_bytes_per_s, so a calibrated profile applies here too; a folded
  // replay changes them as it runs, replica_load.h). `only_gpus`: hosts for these GPUs
  // only (empty = all): SimGrid's full zone keeps a hosts^2 route table, 2 GB at 16,384
  // hosts, so a folded replay makes hosts for what it replays.
  Platform(const Fabric& fabric, const CostParams& costs, const std::vector<int>& only_gpus = {});

  // Adds the route src -> dst (idempotent; ignored when src == dst). Before seal().
  void add_route(int src, int dst);
  void seal();

  simgrid::s4u::Host* host(int gpu) const { return hosts_[gpu]; }  // null if not made
  const std::vector<simgrid::s4u::Link*>& links() const { return links_; }  // by Fabric link id
  int routes() const { return routes_; }

 private:
  const Fabric& fabric_;
  simgrid::s4u::NetZone* zone_ = nullptr;
  std::vector<simgrid::s4u::Host*> hosts_;
  std::vector<simgrid::s4u::Link*> links_;  // by Fabric link id
  std::unordered_set<int64_t> has_route_;  // src * gpus + dst
  int routes_ = 0;
};

}  // namespace rm::sim
