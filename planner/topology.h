// A cluster as ringmaster models it: the GPU kind, how GPUs are joined inside a node,
// and how nodes are joined to each other. Loaded from topologies/*.yaml (shipped ones are
// compiled into the binary; see spec_library.h).
//
// Units: bytes, bytes per second (per direction), seconds, FLOP/s. Every link is full
// duplex and modelled as two directed links of the given bandwidth.
//
// Fabric turns a Topology and a GPU count into an explicit directed link graph with
// exactly one route function, used by the planner's link-sharing model and by the
// SimGrid platform alike, so both see the same links and the same paths.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/kernel_efficiency.h"

namespace rm {

struct GpuSpec {
  std::string name;                  // "A100-SXM4-80GB"
  double memory_bytes = 0;           // HBM capacity
  double peak_flops = 0;             // dense bf16 tensor-core FLOP/s (fp32 FLOP/s for cpu-local)
  double hbm_bytes_per_s = 0;
  double runtime_reserve_bytes = 0;  // CUDA context, NCCL buffers, allocator slack
  // Fraction of peak the linear layers' GEMMs reach: with gemm_half_flops > 0 the large-GEMM
  // limit of the size curve (cost_params.h gemm_flops_per_s), else at every size.
  double gemm_efficiency = 0;
  double gemm_half_flops = 0;  // a layer's GEMM FLOPs per micro-step at half the limit; 0 = flat
  double lockstep_jitter = 0;  // spread of these GPUs' speeds (CostParams::lockstep_jitter); 0 = none
  int element_bytes = 2;             // activations and K,V: 2 (bf16) on GPUs, 4 (fp32) on cpu-local
  KernelCurve attention;             // fraction of peak of the blockwise attention kernel vs tile
  // The implementation `attention` describes (gpu.attention.kernel; kDefaultAttentionKernel
  // unless the topology names another), and others by their throughput relative to it, by the
  // name a run states (--attention-kernel, a plan's or a corpus entry's `attention_kernel`).
  std::string attention_curve = kDefaultAttentionKernel;
  std::map<std::string, double> attention_kernels;
  // Float8 linear layers (linear_precision.h), from the optional `fp8` block: the dense fp8
  // tensor-core FLOP/s (0 = no fp8) and, optionally, the fraction of it the GEMMs reach
  // (0 = gemm_efficiency, the bf16 GEMMs' fraction of their peak).
  double fp8_peak_flops = 0;
  double fp8_gemm_efficiency = 0;
};

// Whether two GPU specs agree in every field above (the published corpus's record of a GPU
// type holds only for its constants as shipped: published_prediction.h corpus_gpu_type).
// A field added to GpuSpec or KernelCurve is added here too.
bool same_gpu_spec(const GpuSpec& a, const GpuSpec& b);


enum class IntraKind {
  kNvswitch,      // every GPU has one port to a non-blocking switch (DGX)
  kPcieTree,      // GPUs under PCIe switches, switches under CPU sockets, sockets joined
  kSharedMemory,  // cpu-local: cores as devices, copies through shared memory
  kNone,          // one device per node (TPU-style torus chip, single GPU)
};

struct IntraNode {
  IntraKind kind = IntraKind::kNone;
  double bytes_per_s = 0;  // per GPU port, per direction (NVLink, PCIe x16, memcpy)
  double latency_s = 0;
  // kPcieTree only.
  int gpus_per_switch = 0;
  double switch_uplink_bytes_per_s = 0;  // PCIe switch <-> CPU root port, per direction
  double socket_bytes_per_s = 0;         // CPU <-> CPU (UPI / xGMI), per direction
  double socket_latency_s = 0;
  int switches_per_socket = 1;
};

enum class InterKind { kNone, kFatTree, kTorus };

struct InterNode {
  InterKind kind = InterKind::kNone;
  double latency_s = 0;  // per hop
  // kFatTree.
  int nics_per_node = 0;
  double nic_bytes_per_s = 0;  // achieved, per NIC per direction
  bool rail_optimized = true;  // NIC i of every node on the rail-i leaf switch
  int nodes_per_leaf = 0;      // nodes one leaf switch serves
  double oversubscription = 1; // leaf down-bandwidth over up-bandwidth (1 = non-blocking)
  // kTorus: one device per node, nodes laid out x-fastest.
  std::array<int, 3> torus_dims{0, 0, 0};
  double torus_link_bytes_per_s = 0;  // per link per direction
};

struct Topology {
  std::string name;
  std::string source;  // file path or "builtin:<name>", for messages
  std::string note;    // one line shown by `ringmaster list`
  GpuSpec gpu;
  int gpus_per_node = 0;
  int max_nodes = 0;
  IntraNode intra;
  InterNode inter;

  int max_gpus() const { return gpus_per_node * max_nodes; }
};

// YAML spellings: "nvswitch", "pcie-tree", "shared-memory", "none"; "fat-tree", "torus", "none".
const char* to_string(IntraKind k);
const char* to_string(InterKind k);

// The link classes a profile can calibrate separately (alpha, beta per class).
enum class LinkClass { kNvlink, kPcie, kSocket, kNic, kSpine, kTorus, kSharedMemory };
const char* to_string(LinkClass c);

struct Link {
  std::string name;  // "n0.g3.up", "rail2.leaf0.up", ... unique, stable
  LinkClass cls;
  double bytes_per_s;  // this direction
  double latency_s;
};

// The links a transfer crosses, in order, held inline: the order search asks for millions
// of routes at thousands of GPUs, and a cache of them (one vector per pair asked for) cost a
// third of a 2,048-GPU plan's time and most of its memory. Fabric refuses tori whose
// longest route would not fit.
class Route {
 public:
  static constexpr int kMaxLinks = 64;
  Route() = default;
  // Copies only the links it holds: the rest of the array is never set, nor read.
  Route(const Route& o) : size_(o.size_) { std::copy(o.begin(), o.end(), links_.begin()); }
  Route& operator=(const Route& o) {
    size_ = o.size_;
    std::copy(o.begin(), o.end(), links_.begin());
    return *this;
  }
  const int* begin() const { return links_.data(); }
  const int* end() const { return links_.data() + size_; }
  size_t size() const { return static_cast<size_t>(size_); }
  bool empty() const { return size_ == 0; }
  int front() const { return links_[0]; }
  int operator[](size_t i) const { return links_[i]; }
  void push_back(int link) { links_[size_++] = link; }

 private:
  std::array<int, kMaxLinks> links_;
  int size_ = 0;
};

class Fabric {
 public:
  // Builds the link graph for the first `gpus` devices of `topo`.
  // Throws InputError if gpus is not in [1, topo.max_gpus()] or not a whole number of
  // nodes where the topology needs that.
  Fabric(const Topology& topo, int gpus);

  const Topology& topology() const { return topo_; }
  int gpus() const { return gpus_; }
  int nodes() const;
  int node_of(int gpu) const { return gpu / topo_.gpus_per_node; }
  int local_of(int gpu) const { return gpu % topo_.gpus_per_node; }

  const std::vector<Link>& links() const { return links_; }

  // The one route function: the directed links a transfer from src to dst crosses, in
  // order. Empty when src == dst. Deterministic (dimension-order on tori, no ECMP).
  Route route(int src, int dst) const;
  // Sum of link latencies along route(src, dst).
  double route_latency_s(int src, int dst) const;
  // Smallest link bandwidth along route(src, dst) (no sharing).
  double route_bytes_per_s(int src, int dst) const;

 private:
  Topology topo_;
  int gpus_;
  std::vector<Link> links_;
  // Link ids by role, filled by the constructor for compute_route.
  std::vector<int> gpu_up_, gpu_down_;        // per GPU, intra-node port
  std::vector<int> switch_up_, switch_down_;  // kPcieTree: per (node, switch)
  std::vector<int> socket_links_;             // kPcieTree: per (node, socket a, socket b)
  std::vector<int> nic_tx_, nic_rx_;          // kFatTree: per (node, nic)
  std::vector<int> leaf_up_, leaf_down_;      // kFatTree: per leaf
  std::vector<int> torus_out_;                // kTorus: per (device, direction 0..5), -1 if none
  int switches_per_node_ = 0, sockets_per_node_ = 0, leaves_per_group_ = 1;
  int add_link(std::string name, LinkClass cls, double bytes_per_s, double latency_s);
};

// Prices attention as `kernel` runs: an empty name becomes the GPU's curve's own
// (GpuSpec::attention_curve), which is priced as it is; another scales the curve by the GPU's
// factor for it. Throws InputError "<where>: <field>: ..." naming the known ones when the
// topology has no factor for it.
void apply_attention_kernel(Topology& topology, std::string& kernel, const std::string& where,
                            const std::string& field);

}  // namespace rm
