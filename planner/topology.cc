// Fabric: the directed link graph of a topology and its one route function.
//
// Link layout per kind (every physical link is two directed links):
//   NVSwitch        n<node>.g<i>.nvl.up / .down        GPU port to / from the switch
//   shared memory   n<node>.d<i>.shm.up / .down        core to / from shared memory
//   PCIe tree       n<node>.g<i>.pcie.up / .down       GPU to / from its PCIe switch
//                   n<node>.sw<k>.up / .down           PCIe switch to / from its CPU socket
//                   n<node>.s<a>-s<b>                  CPU socket a to socket b (UPI / xGMI)
//   fat tree        n<node>.nic<i>.tx / .rx            NIC to / from its leaf switch
//                   rail<r>.leaf<g>.up / .down         leaf to / from the spine (rail-optimised)
//                   leaf<g>.up / .down                 same, when not rail-optimised
//   torus           t<device>.+x .. t<device>.-z       outgoing link per direction
#include "planner/topology.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>

#include "planner/input_error.h"

namespace rm {

const char* to_string(IntraKind k) {
  switch (k) {
    case IntraKind::kNvswitch: return "nvswitch";
    case IntraKind::kPcieTree: return "pcie-tree";
    case IntraKind::kSharedMemory: return "shared-memory";
    case IntraKind::kNone: return "none";
  }
  return "?";
}

const char* to_string(InterKind k) {
  switch (k) {
    case InterKind::kFatTree: return "fat-tree";
    case InterKind::kTorus: return "torus";
    case InterKind::kNone: return "none";
  }
  return "?";
}

const char* to_string(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink: return "nvlink";
    case LinkClass::kPcie: return "pcie";
    case LinkClass::kSocket: return "socket";
    case LinkClass::kNic: return "nic";
    case LinkClass::kSpine: return "spine";
    case LinkClass::kTorus: return "torus";
    case LinkClass::kSharedMemory: return "shared-memory";
  }
  return "?";
}

namespace {

constexpr const char* kTorusDirNames[6] = {"+x", "-x", "+y", "-y", "+z", "-z"};

// Tori: device id -> (x, y, z), x fastest.
std::array<int, 3> torus_coords(int id, const std::array<int, 3>& dims) {
  return {id % dims[0], (id / dims[0]) % dims[1], id / (dims[0] * dims[1])};
}

int torus_id(const std::array<int, 3>& c, const std::array<int, 3>& dims) {
  return c[0] + dims[0] * (c[1] + dims[1] * c[2]);
}

}  // namespace

int Fabric::add_link(std::string name, LinkClass cls, double bytes_per_s, double latency_s) {
  links_.push_back(Link{std::move(name), cls, bytes_per_s, latency_s});
  return static_cast<int>(links_.size()) - 1;
}

int Fabric::nodes() const { return (gpus_ + topo_.gpus_per_node - 1) / topo_.gpus_per_node; }

Fabric::Fabric(const Topology& topo, int gpus) : topo_(topo), gpus_(gpus) {
  const std::string where = topo.source.empty() ? topo.name : topo.source;
  if (topo.gpus_per_node < 1) fail_input(where, "gpus_per_node", "must be >= 1");
  if (gpus < 1 || gpus > topo.max_gpus()) {
    fail_input(where, "gpus",
               "must be in [1, " + std::to_string(topo.max_gpus()) + "] for topology '" +
                   topo.name + "' (got " + std::to_string(gpus) + ")");
  }
  const int gpn = topo.gpus_per_node;
  const int n_nodes = nodes();
  if (n_nodes > 1 && topo.inter.kind == InterKind::kNone) {
    fail_input(where, "gpus",
               "topology '" + topo.name + "' has no inter-node fabric, so at most " +
                   std::to_string(gpn) + " GPUs (got " + std::to_string(gpus) + ")");
  }
  if (n_nodes > 1 && gpus % gpn != 0) {
    fail_input(where, "gpus",
               "must be a whole number of " + std::to_string(gpn) + "-GPU nodes or fit in one (got " +
                   std::to_string(gpus) + ")");
  }
  if (gpn > 1 && topo.intra.kind == IntraKind::kNone) {
    fail_input(where, "intra.kind", "'none' needs gpus_per_node == 1");
  }

  // Intra-node links.
  const IntraNode& in = topo.intra;
  if (in.kind == IntraKind::kPcieTree) {
    if (in.gpus_per_switch < 1 || gpn % in.gpus_per_switch != 0) {
      fail_input(where, "intra.gpus_per_switch", "must divide gpus_per_node");
    }
    switches_per_node_ = gpn / in.gpus_per_switch;
    if (in.switches_per_socket < 1 || switches_per_node_ % in.switches_per_socket != 0) {
      fail_input(where, "intra.switches_per_socket", "must divide the number of PCIe switches");
    }
    sockets_per_node_ = switches_per_node_ / in.switches_per_socket;
  }
  if (in.kind != IntraKind::kNone) {
    const char* port = in.kind == IntraKind::kNvswitch       ? "nvl"
                       : in.kind == IntraKind::kPcieTree     ? "pcie"
                                                             : "shm";
    const char* dev = in.kind == IntraKind::kSharedMemory ? "d" : "g";
    const LinkClass cls = in.kind == IntraKind::kNvswitch     ? LinkClass::kNvlink
                          : in.kind == IntraKind::kPcieTree   ? LinkClass::kPcie
                                                              : LinkClass::kSharedMemory;
    for (int g = 0; g < gpus; ++g) {
      const std::string base = std::string("n") + std::to_string(node_of(g)) + "." + dev +
                               std::to_string(local_of(g)) + "." + port;
      gpu_up_.push_back(add_link(base + ".up", cls, in.bytes_per_s, in.latency_s));
      gpu_down_.push_back(add_link(base + ".down", cls, in.bytes_per_s, in.latency_s));
    }
  }
  if (in.kind == IntraKind::kPcieTree) {
    for (int n = 0; n < n_nodes; ++n) {
      const std::string node = std::string("n") + std::to_string(n) + ".";
      for (int k = 0; k < switches_per_node_; ++k) {
        const std::string base = node + "sw" + std::to_string(k);
        switch_up_.push_back(add_link(base + ".up", LinkClass::kPcie,
                                      in.switch_uplink_bytes_per_s, in.latency_s));
        switch_down_.push_back(add_link(base + ".down", LinkClass::kPcie,
                                        in.switch_uplink_bytes_per_s, in.latency_s));
      }
      // One directed link per ordered socket pair (a full mesh; two sockets in practice).
      for (int a = 0; a < sockets_per_node_; ++a) {
        for (int b = 0; b < sockets_per_node_; ++b) {
          socket_links_.push_back(
              a == b ? -1
                     : add_link(node + "s" + std::to_string(a) + "-s" + std::to_string(b),
                                LinkClass::kSocket, in.socket_bytes_per_s, in.socket_latency_s));
        }
      }
    }
  }

  // Inter-node links.
  const InterNode& ex = topo.inter;
  if (ex.kind == InterKind::kFatTree && n_nodes > 1) {
    if (ex.nics_per_node < 1) fail_input(where, "inter.nics_per_node", "must be >= 1");
    const int per_leaf = ex.nodes_per_leaf > 0 ? ex.nodes_per_leaf : topo.max_nodes;
    const int groups = (n_nodes + per_leaf - 1) / per_leaf;
    for (int n = 0; n < n_nodes; ++n) {
      for (int i = 0; i < ex.nics_per_node; ++i) {
        const std::string base = std::string("n") + std::to_string(n) + ".nic" + std::to_string(i);
        nic_tx_.push_back(add_link(base + ".tx", LinkClass::kNic, ex.nic_bytes_per_s, ex.latency_s));
        nic_rx_.push_back(add_link(base + ".rx", LinkClass::kNic, ex.nic_bytes_per_s, ex.latency_s));
      }
    }
    // A leaf's spine bandwidth is what its NICs could send, cut by the oversubscription.
    const int nics_under_leaf = ex.rail_optimized ? per_leaf : per_leaf * ex.nics_per_node;
    const double spine_bw = nics_under_leaf * ex.nic_bytes_per_s / ex.oversubscription;
    const int rails = ex.rail_optimized ? ex.nics_per_node : 1;
    leaves_per_group_ = rails;
    for (int g = 0; g < groups; ++g) {
      for (int r = 0; r < rails; ++r) {
        const std::string base = (ex.rail_optimized ? "rail" + std::to_string(r) + "." : "") +
                                 "leaf" + std::to_string(g);
        leaf_up_.push_back(add_link(base + ".up", LinkClass::kSpine, spine_bw, ex.latency_s));
        leaf_down_.push_back(add_link(base + ".down", LinkClass::kSpine, spine_bw, ex.latency_s));
      }
    }
  }
  if (ex.kind == InterKind::kTorus) {
    const auto& dims = ex.torus_dims;
    if (gpn != 1) fail_input(where, "gpus_per_node", "must be 1 on a torus (one device per node)");
    if (dims[0] < 1 || dims[1] < 1 || dims[2] < 1 ||
        dims[0] * dims[1] * dims[2] != topo.max_nodes) {
      fail_input(where, "inter.dims", "must be three sizes >= 1 whose product is max_nodes");
    }
    // Dimension-order routes go the shorter way round each ring: at most half of each size.
    if (dims[0] / 2 + dims[1] / 2 + dims[2] / 2 > Route::kMaxLinks) {
      fail_input(where, "inter.dims",
                 "routes would cross up to " + std::to_string(dims[0] / 2 + dims[1] / 2 + dims[2] / 2) +
                     " links; at most " + std::to_string(Route::kMaxLinks) +
                     " are supported (half of each size, summed)");
    }
    // Links for the whole torus: a route between two devices of the job may pass through
    // devices outside it, as on a real machine.
    const int devices = dims[0] * dims[1] * dims[2];
    torus_out_.assign(static_cast<size_t>(devices) * 6, -1);
    for (int t = 0; t < devices; ++t) {
      for (int dir = 0; dir < 6; ++dir) {
        const int size = dims[dir / 2];
        // A ring of 2 has one neighbour: '+' and '-' would be the same wire.
        if (size == 1 || (size == 2 && dir % 2 == 1)) continue;
        torus_out_[t * 6 + dir] =
            add_link(std::string("t") + std::to_string(t) + "." + kTorusDirNames[dir], LinkClass::kTorus,
                     ex.torus_link_bytes_per_s, ex.latency_s);
      }
    }
  }
}

Route Fabric::route(int src, int dst) const {
  if (src < 0 || src >= gpus_ || dst < 0 || dst >= gpus_) throw std::out_of_range("Fabric::route: GPU id out of range");
  Route r;
  if (src == dst) return r;
  const int gpn = topo_.gpus_per_node;
  const int ns = node_of(src), nd = node_of(dst);
  if (topo_.inter.kind == InterKind::kTorus) {
    // Dimension order x, y, z; the shorter way round each ring, '+' on ties.
    const auto& dims = topo_.inter.torus_dims;
    auto cur = torus_coords(src, dims);
    const auto goal = torus_coords(dst, dims);
    for (int dim = 0; dim < 3; ++dim) {
      const int n = dims[dim];
      const int fwd = ((goal[dim] - cur[dim]) % n + n) % n;
      if (fwd == 0) continue;
      const bool plus = fwd <= n - fwd;
      const int hops = plus ? fwd : n - fwd;
      for (int k = 0; k < hops; ++k) {
        r.push_back(torus_out_[torus_id(cur, dims) * 6 + dim * 2 + (plus ? 0 : 1)]);
        cur[dim] = (cur[dim] + (plus ? 1 : n - 1)) % n;
      }
    }
    return r;
  }
  if (ns == nd) {
    r.push_back(gpu_up_[src]);
    if (topo_.intra.kind == IntraKind::kPcieTree) {
      const int gps = topo_.intra.gpus_per_switch;
      const int sw_s = local_of(src) / gps, sw_d = local_of(dst) / gps;
      if (sw_s != sw_d) {
        const int spn = switches_per_node_;
        r.push_back(switch_up_[ns * spn + sw_s]);
        const int sock_s = sw_s / topo_.intra.switches_per_socket;
        const int sock_d = sw_d / topo_.intra.switches_per_socket;
        if (sock_s != sock_d) {
          const int spk = sockets_per_node_;
          r.push_back(socket_links_[(ns * spk + sock_s) * spk + sock_d]);
        }
        r.push_back(switch_down_[nd * spn + sw_d]);
      }
    }
    r.push_back(gpu_down_[dst]);
    return r;
  }
  // Fat tree: each GPU sends through its own NIC (GPU i uses NIC i * nics / gpus_per_node).
  const InterNode& ex = topo_.inter;
  const int nics = ex.nics_per_node;
  const int nic_s = local_of(src) * nics / gpn, nic_d = local_of(dst) * nics / gpn;
  const int per_leaf = ex.nodes_per_leaf > 0 ? ex.nodes_per_leaf : topo_.max_nodes;
  const int rail_s = ex.rail_optimized ? nic_s : 0, rail_d = ex.rail_optimized ? nic_d : 0;
  const int leaf_s = (ns / per_leaf) * leaves_per_group_ + rail_s;
  const int leaf_d = (nd / per_leaf) * leaves_per_group_ + rail_d;
  r.push_back(nic_tx_[ns * nics + nic_s]);
  if (leaf_s != leaf_d) {
    r.push_back(leaf_up_[leaf_s]);
    r.push_back(leaf_down_[leaf_d]);
  }
  r.push_back(nic_rx_[nd * nics + nic_d]);
  return r;
}

double Fabric::route_latency_s(int src, int dst) const {
  double s = 0;
  for (int l : route(src, dst)) s += links_[l].latency_s;
  return s;
}

double Fabric::route_bytes_per_s(int src, int dst) const {
  double bw = std::numeric_limits<double>::infinity();
  for (int l : route(src, dst)) bw = std::min(bw, links_[l].bytes_per_s);
  return bw;
}

void apply_attention_kernel(Topology& topology, std::string& kernel, const std::string& where,
                            const std::string& field) {
  if (kernel.empty()) kernel = topology.gpu.attention_curve;
  if (kernel == topology.gpu.attention_curve) return;
  const auto& kernels = topology.gpu.attention_kernels;
  const auto k = kernels.find(kernel);
  if (k == kernels.end()) {
    std::string known = topology.gpu.attention_curve;
    for (const auto& [name, factor] : kernels) known += ", " + name;
    fail_input(where, field, "topology " + topology.name + " prices no attention kernel '" + kernel +
                                 "' (expected one of: " + known + ")");
  }
  topology.gpu.attention.max_efficiency *= k->second;
}

bool same_gpu_spec(const GpuSpec& a, const GpuSpec& b) {
  const KernelCurve& x = a.attention;
  const KernelCurve& y = b.attention;
  return std::tie(a.name, a.memory_bytes, a.peak_flops, a.hbm_bytes_per_s, a.runtime_reserve_bytes, a.gemm_efficiency,
                  a.gemm_half_flops, a.lockstep_jitter, a.element_bytes, a.attention_curve, a.attention_kernels,
                  a.fp8_peak_flops, a.fp8_gemm_efficiency) ==
             std::tie(b.name, b.memory_bytes, b.peak_flops, b.hbm_bytes_per_s, b.runtime_reserve_bytes, b.gemm_efficiency,
                      b.gemm_half_flops, b.lockstep_jitter, b.element_bytes, b.attention_curve, b.attention_kernels,
                      b.fp8_peak_flops, b.fp8_gemm_efficiency) &&
         std::tie(x.max_efficiency, x.half_flops, x.tile_bytes_limit, x.backward_factor, x.merge_bytes, x.dq_merge_bytes,
                  x.slice_merge_bytes) == std::tie(y.max_efficiency, y.half_flops, y.tile_bytes_limit, y.backward_factor,
                                                   y.merge_bytes, y.dq_merge_bytes, y.slice_merge_bytes);
}

}  // namespace rm
