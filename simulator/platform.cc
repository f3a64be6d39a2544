#include "simulator/platform.h"

#include <simgrid/s4u.hpp>

namespace sg4 = simgrid::s4u;

namespace rm::sim {

void configure_network_model() {
  // SimGrid's default LV08 model is fitted to TCP over Ethernet: it multiplies latencies by
  // 13.01, scales bandwidth by 0.97 and charges reverse-direction cross traffic for ACKs.
  // NVLink, PCIe and InfiniBand RDMA have none of that, and the planner charges link
  // bandwidth and latency as given, so: max-min sharing (CM02) with both factors 1, no
  // cross traffic, and no TCP window bound (TCP-gamma 0); calibration tunes the links.
  // CM02 also weights a flow's share of a link by its route's latency (TCP's bias against
  // long round trips: network_cm02.cpp sets the sharing penalty to it), which credit-based
  // RDMA does not have: the links carry no latency (Platform), so every flow weighs 1.
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/latency-factor:1");
  sg4::Engine::set_config("network/bandwidth-factor:1");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:0");
}

Platform::Platform(const Fabric& fabric, const CostParams& costs, const std::vector<int>& only_gpus)
    : fabric_(fabric) {
  zone_ = sg4::create_full_zone("fabric");
  hosts_.assign(fabric.gpus(), nullptr);
  auto make_host = [&](int g) { hosts_[g] = zone_->create_host("gpu" + std::to_string(g), costs.peak_flops); };
  if (only_gpus.empty()) {
    for (int g = 0; g < fabric.gpus(); ++g) make_host(g);
  } else {
    for (int g : only_gpus) make_host(g);
  }
  for (const Link& l : fabric.links()) {
    // Full duplex is already two directed Fabric links, so each is one SHARED SimGrid link.
    sg4::Link* link = zone_->create_link(l.name, costs.link_bytes_per_s(l));
    link->set_sharing_policy(sg4::Link::SharingPolicy::SHARED);
    link->seal();
    links_.push_back(link);
  }
}

void Platform::add_route(int src, int dst) {
  if (src == dst) return;
  if (!has_route_.insert(static_cast<int64_t>(src) * fabric_.gpus() + dst).second) return;
  std::vector<sg4::LinkInRoute> path;
  for (int id : fabric_.route(src, dst)) path.emplace_back(links_[id]);
  zone_->add_route(hosts_[src]->get_netpoint(), hosts_[dst]->get_netpoint(), nullptr, nullptr,
                   path, /*symmetrical=*/false);
  ++routes_;
}

void Platform::seal() { zone_->seal(); }

}  // namespace rm::sim
