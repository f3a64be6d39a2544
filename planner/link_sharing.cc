#include "planner/link_sharing.h"

#include <algorithm>
#include <limits>

namespace rm {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

std::vector<double> max_min_rates(const Fabric& fabric, const CostParams& cost,
                                  const std::vector<const Route*>& routes,
                                  std::vector<int>* bottleneck) {
  const auto& links = fabric.links();
  const size_t nf = routes.size();
  std::vector<double> rate(nf, kInf);
  if (bottleneck) bottleneck->assign(nf, -1);
  // Remaining capacity and unfixed flow count per used link.
  std::vector<double> cap(links.size(), 0);
  std::vector<int> users(links.size(), 0);
  std::vector<int> used;
  for (size_t f = 0; f < nf; ++f) {
    for (int l : *routes[f]) {
      if (users[l]++ == 0) {
        used.push_back(l);
        cap[l] = cost.link_bytes_per_s(links[l]);
      }
    }
  }
  // Flows per link (CSR over the used links), so fixing a link's flows does not scan
  // every flow.
  std::vector<int> start(links.size() + 1, 0);
  for (size_t f = 0; f < nf; ++f)
    for (int l : *routes[f]) ++start[l + 1];
  for (size_t l = 0; l < links.size(); ++l) start[l + 1] += start[l];
  std::vector<int> on_link(start.back()), fill(start.begin(), start.end() - 1);
  for (size_t f = 0; f < nf; ++f)
    for (int l : *routes[f]) on_link[fill[l]++] = static_cast<int>(f);
  std::vector<char> fixed(nf, 0);
  // Progressive filling: the links with the smallest fair share fix their flows at that
  // share; their rates leave the other links' capacities. Links tied at the smallest
  // share saturate together (fixing one's flows leaves the others' share unchanged and
  // only raises the rest), so one round fixes them all: ring patterns are symmetric and
  // have many such ties.
  while (true) {
    double share = kInf;
    for (int l : used)
      if (users[l] > 0) share = std::min(share, cap[l] / users[l]);
    if (share == kInf) break;
    const double tied = share * (1 + 1e-12);
    for (int l : used) {
      if (users[l] == 0 || cap[l] / users[l] > tied) continue;
      for (int i = start[l]; i < start[l + 1]; ++i) {
        const int f = on_link[i];
        if (fixed[f]) continue;
        fixed[f] = 1;
        rate[f] = share;
        if (bottleneck) (*bottleneck)[f] = l;
        for (int k : *routes[f]) {
          cap[k] = std::max(0.0, cap[k] - share);
          --users[k];
        }
      }
    }
    used.erase(std::remove_if(used.begin(), used.end(), [&](int l) { return users[l] == 0; }), used.end());
  }
  return rate;
}

SharingResult share_links(const Fabric& fabric, const CostParams& cost,
                          const std::vector<Flow>& flows) {
  const size_t nf = flows.size();
  SharingResult res;
  res.finish_s.assign(nf, 0);
  std::vector<double> left(nf);
  std::vector<size_t> active;
  for (size_t f = 0; f < nf; ++f) {
    left[f] = flows[f].bytes;
    if (flows[f].src != flows[f].dst && flows[f].bytes > 0) active.push_back(f);
  }
  double now = 0;
  bool first = true;
  std::vector<int>& first_bottleneck = res.flow_bottleneck;
  first_bottleneck.assign(nf, -1);
  std::vector<Route> route_of(nf);
  for (size_t f : active) route_of[f] = fabric.route(flows[f].src, flows[f].dst);
  while (!active.empty()) {
    std::vector<const Route*> routes;
    routes.reserve(active.size());
    for (size_t f : active) routes.push_back(&route_of[f]);
    std::vector<int> bn;
    const std::vector<double> rate = max_min_rates(fabric, cost, routes, &bn);
    if (first) {
      for (size_t i = 0; i < active.size(); ++i) first_bottleneck[active[i]] = bn[i];
      first = false;
    }
    double dt = kInf;
    for (size_t i = 0; i < active.size(); ++i) dt = std::min(dt, left[active[i]] / rate[i]);
    std::vector<size_t> still;
    for (size_t i = 0; i < active.size(); ++i) {
      const size_t f = active[i];
      left[f] -= rate[i] * dt;
      // Relative tolerance: flows finishing together leave together.
      if (left[f] <= 1e-9 * flows[f].bytes) res.finish_s[f] = now + dt;
      else still.push_back(f);
    }
    now += dt;
    active.swap(still);
  }
  for (size_t f = 0; f < nf; ++f) {
    if (flows[f].src == flows[f].dst || flows[f].bytes <= 0) continue;
    res.finish_s[f] += cost.route_latency_s(fabric, flows[f].src, flows[f].dst);
    if (res.finish_s[f] > res.makespan_s) {
      res.makespan_s = res.finish_s[f];
      res.slowest_flow = static_cast<int>(f);
      res.bottleneck_link = first_bottleneck[f];
    }
  }
  return res;
}

}  // namespace rm
