#include "planner/ring_order.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "planner/input_error.h"

namespace rm {

std::vector<int> node_major_order(int gpus) {
  std::vector<int> o(gpus);
  std::iota(o.begin(), o.end(), 0);
  return o;
}

std::vector<int> snake_order(const Fabric& fabric) {
  const int g = fabric.topology().gpus_per_node;
  std::vector<int> o;
  o.reserve(fabric.gpus());
  for (int n = 0; n < fabric.nodes(); ++n) {
    const int first = n * g, count = std::min(g, fabric.gpus() - first);
    for (int i = 0; i < count; ++i) o.push_back(first + (n % 2 == 0 ? i : count - 1 - i));
  }
  return o;
}

std::vector<Flow> ring_step_flows(const std::vector<int>& order, int cp, bool both_directions,
                                  double bytes) {
  std::vector<Flow> flows;
  if (cp < 2) return flows;
  const int rings = static_cast<int>(order.size()) / cp;
  for (int r = 0; r < rings; ++r) {
    const int* ring = order.data() + r * cp;
    for (int i = 0; i < cp; ++i) {
      flows.push_back({ring[i], ring[(i + 1) % cp], bytes});
      // A ring of two has one neighbour each way: the same wire pair, already covered.
      if (both_directions && cp > 2) flows.push_back({ring[i], ring[(i + cp - 1) % cp], bytes});
    }
  }
  return flows;
}

namespace {

// Per-link load (flows crossing it) of an order, updated edge by edge by the search. Loads
// are whole flows, so each class of links of one bandwidth keeps a histogram of its
// loads: a move updates the score in O(route length), not O(links) (a swap search on
// 1,024 GPUs of an irregular fabric took 33 s rescoring every link per move).
struct LinkLoad {
  const Fabric& fabric;
  std::vector<double> class_inv_bw;       // seconds per byte of each bandwidth class
  std::vector<int> class_of;              // link -> its class
  std::vector<int> load;                  // flows crossing each link
  std::vector<int64_t> class_total;       // sum of its links' loads
  std::vector<int> class_top;             // largest load of its links
  std::vector<std::vector<int>> links_at;  // [class][load]: links of the class with that load

  LinkLoad(const Fabric& f, const CostParams& cost) : fabric(f) {
    for (const Link& l : f.links()) {
      const double inv = 1.0 / cost.link_bytes_per_s(l);
      auto it = std::find(class_inv_bw.begin(), class_inv_bw.end(), inv);
      class_of.push_back(static_cast<int>(it - class_inv_bw.begin()));
      if (it == class_inv_bw.end()) class_inv_bw.push_back(inv);
    }
    load.assign(f.links().size(), 0);
    class_total.assign(class_inv_bw.size(), 0);
    class_top.assign(class_inv_bw.size(), 0);
    links_at.assign(class_inv_bw.size(), {0});
    for (int c : class_of) ++links_at[c][0];
  }
  void edge(int src, int dst, int w) {
    for (int l : fabric.route(src, dst)) {
      const int c = class_of[l];
      std::vector<int>& at = links_at[c];
      --at[load[l]];
      load[l] += w;
      if (static_cast<size_t>(load[l]) >= at.size()) at.resize(load[l] + 1, 0);
      ++at[load[l]];
      class_total[c] += w;
      class_top[c] = std::max(class_top[c], load[l]);
      while (class_top[c] > 0 && at[class_top[c]] == 0) --class_top[c];
    }
  }
  // (max, sum) of load x seconds-per-byte.
  std::pair<double, double> score() const {
    double mx = 0, sum = 0;
    for (size_t c = 0; c < class_inv_bw.size(); ++c) {
      mx = std::max(mx, class_top[c] * class_inv_bw[c]);
      sum += static_cast<double>(class_total[c]) * class_inv_bw[c];
    }
    return {mx, sum};
  }
};

void add_ring_edges(LinkLoad& ll, const std::vector<int>& order, int cp, bool both) {
  for (const Flow& f : ring_step_flows(order, cp, both, 1.0)) ll.edge(f.src, f.dst, 1);
}

}  // namespace

double max_link_load_s_per_byte(const Fabric& fabric, const CostParams& cost,
                                const std::vector<int>& order, int cp, bool both_directions) {
  LinkLoad ll(fabric, cost);
  add_ring_edges(ll, order, cp, both_directions);
  return ll.score().first;
}

bool fabric_is_irregular(const Topology& topo) {
  if (topo.intra.kind == IntraKind::kPcieTree) return true;
  if (topo.inter.kind == InterKind::kTorus) return true;
  if (topo.inter.kind == InterKind::kFatTree &&
      (!topo.inter.rail_optimized || topo.inter.oversubscription > 1)) {
    return true;
  }
  return false;
}

std::vector<int> search_order(const Fabric& fabric, const CostParams& cost, int cp,
                              bool both_directions, std::vector<int> order) {
  const int G = static_cast<int>(order.size());
  if (cp < 3) return order;  // a ring of 2 (or 1) has nothing to reorder within it
  LinkLoad ll(fabric, cost);
  add_ring_edges(ll, order, cp, both_directions);
  auto best = ll.score();
  // Edges are named by their sending position and direction: (p, +1) is p -> next(p),
  // (p, -1) is p -> prev(p). Moving position p changes (p, ±1), (prev(p), +1) and
  // (next(p), -1); a swap touches the union for both positions, each edge once.
  auto step = [&](int p, int dir) {
    const int base = p / cp * cp;
    return base + (p - base + cp + dir) % cp;
  };
  std::vector<std::pair<int, int>> edges;
  auto collect = [&](int p) {
    const std::pair<int, int> mine[4] = {{p, 1}, {step(p, -1), 1}, {p, -1}, {step(p, 1), -1}};
    for (int k = 0; k < (both_directions ? 4 : 2); ++k) {
      if (std::find(edges.begin(), edges.end(), mine[k]) == edges.end()) edges.push_back(mine[k]);
    }
  };
  int64_t updates = 0;  // edges re-routed, the search's cost (see kMaxEdgeUpdates)
  auto apply = [&](int w) {
    for (auto [p, dir] : edges) ll.edge(order[p], order[step(p, dir)], w);
    updates += static_cast<int64_t>(edges.size());
  };
  auto better = [&](const std::pair<double, double>& s) {
    return s.first < best.first * (1 - 1e-12) ||
           (s.first <= best.first * (1 + 1e-12) && s.second < best.second * (1 - 1e-12));
  };
  // Applies `move` (its own inverse) to the edges collected; keeps it if the score
  // improves, else undoes it. Returns whether it was kept.
  auto try_move = [&](auto move) {
    apply(-1);
    move();
    apply(+1);
    const auto s = ll.score();
    if (better(s)) {
      best = s;
      return true;
    }
    apply(-1);
    move();
    apply(+1);
    return false;
  };
  // Swaps of two positions (moves GPUs between rings), then segment reversals (2-opt)
  // inside each ring for rings of up to kMaxTwoOptRing positions (a reversal re-routes the
  // whole segment: O(cp) per move). Every pair is tried while there are at most
  // kMaxSwapPairs (G up to 1,448); past that each position tries the next `window` ones
  // (at least a ring's). The search stops after kMaxEdgeUpdates re-routed edges, a few
  // seconds: with every pair, one pass at 16,384 GPUs took over ten minutes, and `plan`
  // searches an order for each ring size.
  constexpr int kMaxPasses = 8;
  constexpr int kMaxTwoOptRing = 32;
  constexpr int64_t kMaxSwapPairs = int64_t{1} << 20;
  constexpr int64_t kMaxEdgeUpdates = int64_t{1} << 24;
  const int64_t g = G;
  const int window = g * (g - 1) / 2 <= kMaxSwapPairs ? G : static_cast<int>(std::max<int64_t>(cp, kMaxSwapPairs / g));
  for (int pass = 0; pass < kMaxPasses && updates < kMaxEdgeUpdates; ++pass) {
    bool improved = false;
    for (int a = 0; a < G && updates < kMaxEdgeUpdates; ++a) {
      for (int b = a + 1; b < G && b - a <= window; ++b) {
        edges.clear();
        collect(a);
        collect(b);
        if (try_move([&] { std::swap(order[a], order[b]); })) improved = true;
      }
    }
    if (cp <= kMaxTwoOptRing) {
      for (int base = 0; base + cp <= G && updates < kMaxEdgeUpdates; base += cp) {
        for (int i = base + 1; i < base + cp; ++i) {
          for (int j = i + 1; j < base + cp; ++j) {
            edges.clear();
            for (int p = i - 1; p <= j; ++p) collect(p);
            if (try_move([&] { std::reverse(order.begin() + i, order.begin() + j + 1); })) {
              improved = true;
            }
          }
        }
      }
    }
    if (!improved) break;
  }
  return order;
}

void check_order(const std::vector<int>& order, int gpus, const std::string& where) {
  if (static_cast<int>(order.size()) != gpus) {
    fail_input(where, "order", "must list all " + std::to_string(gpus) + " GPU ids (got " +
                                   std::to_string(order.size()) + ")");
  }
  std::vector<char> seen(gpus, 0);
  for (int g : order) {
    if (g < 0 || g >= gpus || seen[g]) {
      fail_input(where, "order", "must be a permutation of 0.." + std::to_string(gpus - 1) +
                                     " (bad or repeated id " + std::to_string(g) + ")");
    }
    seen[g] = 1;
  }
}

}  // namespace rm
