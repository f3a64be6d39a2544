// CostParams: every rate the cost model (and the simulator replaying a schedule) charges,
// in one place. Built from a topology's defaults (the YAML cites where each comes from);
// a calibrated profile (`--profile`) overwrites fields of the same struct, so no other
// code reads GPU peaks, efficiencies or link speeds directly.
//
// Units: FLOP/s, bytes/s, seconds.
#pragma once

#include <algorithm>
#include <array>

#include "planner/kernel_efficiency.h"
#include "planner/topology.h"

namespace rm {

inline constexpr int kLinkClassCount = 7;  // LinkClass enumerators
// Adam's update moves per parameter: reads and writes its states (`state_bytes`,
// memory_model.h optimizer_state_bytes: the master and the moments), the bf16 param, reads
// the bf16 grad (6 B).
// With fp32 master and moments (12 B): 30 B; the executor's Adam with bf16 moments (8 B): 22 B.
constexpr double optimizer_update_bytes(double state_bytes) { return 2 * state_bytes + 6; }

struct LinkOverride {
  double alpha_s = 0;           // end-to-end latency of one message; 0 = sum of route latencies
  double beta_bytes_per_s = 0;  // achieved bandwidth of each link of the class; 0 = topology's
};

// Seconds of one group collective as calibrated (CostParams::collectives, beta > 0):
// `peers` = members - 1, `shard` = each member's bytes, `passes` 2 for an all-reduce.
inline double fitted_collective_s(const LinkOverride& c, double peers, double shard, int passes) {
  return peers > 0 ? passes * (c.alpha_s + peers * shard / c.beta_bytes_per_s) : 0;
}

struct CostParams {
  double peak_flops = 0;       // per GPU
  KernelCurve attention;       // blockwise attention kernel efficiency vs tile size
  double gemm_efficiency = 0;  // fraction of peak of the linear layers (large GEMMs; see below)
  // GEMM size curve (topology gpu.gemm_half_flops; 0 = flat): in a plan that pays it
  // (data_parallel.h pays_gemm_size_curve: PyTorch-native frameworks, and FSDP plans priced
  // for no framework), a layer's linear GEMMs on one GPU per micro-step, W forward FLOPs
  // (micro_batch x c tokens, the TP member's weights), reach gemm_efficiency x W / (W +
  // gemm_half_flops) of peak: a fixed cost per layer and micro-step folded into the rate.
  // Megatron-Core plans, and whole-weight plans priced for no framework, run at
  // gemm_efficiency (validation/README.md, "Whole weights", "The GEMM size curve is the
  // framework's").
  double gemm_half_flops = 0;
  double hbm_bytes_per_s = 0;  // optimizer update is memory bound
  // Fixed cost per ring step beyond the transfer's own latency: stream event wait and the
  // next step's kernel and NCCL group launch. 5 us: NCCL's small-message send/recv
  // latency is a few us inside a node (nccl-tests sendrecv_perf, 8-byte rows), and a
  // kernel launch is ~2-5 us (CUDA C++ Best Practices Guide, "Kernel launch overhead").
  double step_sync_s = 5e-6;
  // Compute slowdown while transfers run (memory-bandwidth and SM interference); >= 1.
  double overlap_interference = 1;
  // Relative standard deviation of the GPUs' speeds (their attention kernels' mean times): a
  // p2p ring runs at the pace of the slowest of its P GPUs (straggler.h). The topology's
  // gpu.lockstep_jitter, absent (0) on every shipped GPU type: no published run isolates it,
  // and NeMo's ring of 32 at 1M tokens on H100 bounds it under 0.027 (validation/README.md,
  // "NeMo's other four long-sequence rows"); a cluster's own YAML can state it, and
  // `ringmaster calibrate` fits it on GPUs (a run's ring kernels, or benchmarks).
  double lockstep_jitter = 0;
  // What a p2p ring of `ranks` positions takes over its mean GPU's kernels.
  double lockstep_slowdown(int ranks) const;
  // Share of a ring transfer that proceeds while the rank computes (0..1): 1 where DMA
  // engines move the data (NVLink/NCCL: the step is max(compute, transfer)); about 0 for
  // MPI over shared memory without a progress thread, where the copy happens inside the
  // wait (the step is compute + transfer). Calibrated (profile.h); 1 by default.
  double transfer_overlap = 1;
  std::array<LinkOverride, kLinkClassCount> links{};
  // Group collectives (FSDP all-gather / reduce-scatter, DDP all-reduce, TP) as a calibrated
  // profile measured them, where the library's own algorithm and progress differ from
  // rings over the links (Open MPI's collectives on a CPU): alpha per pass and bus
  // bandwidth in nccl-tests' sense (busbw = (n-1)/n of the buffer per second, twice that
  // for an all-reduce), so one collective of `shard` bytes per member over n members takes
  // passes·(alpha + (n-1)·shard / busbw). beta 0 = not calibrated: priced as rings over
  // the fabric's links (collective_pattern.h).
  LinkOverride collectives{};
  // Share of a data-parallel collective that proceeds while the rank computes (0..1), as
  // transfer_overlap is for ring transfers: 1 where NCCL runs it on its own stream; about
  // 0 where the library moves it only inside a wait (Open MPI without a progress thread,
  // or a blocking call). Calibrated (profile.h); 1 by default.
  double collective_overlap = 1;

  static CostParams from_topology(const Topology& topo);

  // Bandwidth of one directed link as the cost model sees it (override or topology).
  double link_bytes_per_s(const Link& link) const;
  // Latency of one message from src to dst: the override of the slowest link class on
  // the route when calibrated, else the sum of the route's link latencies.
  double route_latency_s(const Fabric& fabric, int src, int dst) const;
  // FLOP/s the attention kernel reaches with these tiles (peak x efficiency).
  double attention_flops_per_s(int block_q, int block_kv, int head_dim) const {
    return peak_flops * attention.efficiency(block_q, block_kv, head_dim);
  }
  // FLOP/s of GEMMs whose work per micro-step is `work_flops` (a layer's linear layers, or
  // the output head): on the size curve above where `on_curve` (pays_gemm_size_curve),
  // else at its limit.
  double gemm_flops_per_s(double work_flops, bool on_curve) const {
    const double size =
        on_curve && gemm_half_flops > 0 ? work_flops / (work_flops + gemm_half_flops) : 1.0;
    return peak_flops * gemm_efficiency * size;
  }
  // Adding an fp32 dK,dV partial into its accumulator is memory bound: read both, write
  // one (3 x bytes over HBM). The schedule's kAccumulate op carries flops = bytes / 4
  // (one add per element) at accumulate_efficiency(), which gives the same seconds.
  double accumulate_s(double fp32_bytes) const { return 3 * fp32_bytes / hbm_bytes_per_s; }
  double accumulate_efficiency() const { return hbm_bytes_per_s / (12 * peak_flops); }
  // Memory-bound work priced by the HBM bytes it moves (norms, rotary, activations, the
  // loss, an all-to-all's layout copies): its ops carry flops = bytes at this efficiency.
  double elementwise_efficiency() const { return hbm_bytes_per_s / peak_flops; }
  // An all-to-all's layout copy of `bytes` (its pack or its unpack): read once, written
  // once. TransformerEngine's a2a (Megatron's --cp-comm-type a2a, a2a+p2p) copies at least
  // this on each side: movedim().contiguous() before the all_to_all_single and again after
  // it (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
  // flash_attn_a2a_communicate, which adds an index_select for the load-balanced order).
  static double a2a_copy_bytes(double bytes) { return 2 * bytes; }  // HBM bytes moved
  double a2a_copy_s(double bytes) const { return a2a_copy_bytes(bytes) / hbm_bytes_per_s; }
  // Merging one ring step's partial result (KernelCurve::merge_bytes, dq_merge_bytes) for
  // `elements` output elements (c·h·d): memory bound. The schedule's kMerge op carries
  // flops = elements at merge_efficiency(), which gives the same seconds.
  // `sliced`: a forward merge into a slice of the output, copied back (slice_merge_bytes).
  double merge_s(double elements, bool backward, bool sliced = false) const {
    return elements * merge_bytes(backward, sliced) / hbm_bytes_per_s;
  }
  double merge_efficiency(bool backward, bool sliced = false) const {
    const double b = merge_bytes(backward, sliced);
    return b > 0 ? hbm_bytes_per_s / (b * peak_flops) : 0;
  }
  double merge_bytes(bool backward, bool sliced) const {
    if (backward) return attention.dq_merge_bytes;
    if (attention.merge_bytes <= 0) return 0;  // the kernel merges in place: no slice either
    return attention.merge_bytes + (sliced ? attention.slice_merge_bytes : 0);
  }
  // The optimizer's rate over the bytes its update moves (optimizer_update_bytes); 0 =
  // memory bound at hbm_bytes_per_s (a calibrated profile sets it where the update is not,
  // as on a CPU).
  double optimizer_bytes_per_s = 0;
  // What of a collective of `x` seconds stays exposed when `window` seconds of compute run
  // between its post and its wait: x - o·min(window, x) (x - window at o = 1).
  double collective_exposed_s(double x, double window) const {
    return x - collective_overlap * std::min(std::max(0.0, window), x);
  }
  // Adam update of `params` parameters whose states take `state_bytes` each
  // (optimizer_state_bytes).
  double optimizer_s(double params, double state_bytes) const {
    return optimizer_update_bytes(state_bytes) * params /
           (optimizer_bytes_per_s > 0 ? optimizer_bytes_per_s : hbm_bytes_per_s);
  }
};

}  // namespace rm
