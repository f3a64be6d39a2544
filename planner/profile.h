// A calibration profile: the cost model's parameters as measured on one machine, with how
// well they fit and where the measurements came from. Written by `ringmaster calibrate`,
// read by `plan`, `sweep`, `simulate`, `tune` and `validate` (--profile). Format:
//
//   format: 1
//   hardware:                      # what it was measured on
//     hostname: box1
//     device_name: "AMD EPYC 7B13"  # CPU model (cpu backend) or GPU name (cuda backend)
//     device_count: 2               # ranks / devices used
//     backend: cpu                  # cpu | cuda
//   date: 2025-01-31T12:00:00Z     # ISO 8601, UTC
//   device_kind: cpu-local-core    # the topology GPU kind (gpu.name) it covers
//   peak_flops: 4.0e10             # the peak the efficiencies are fractions of (FLOP/s)
//   parameters:
//     attention: {max_efficiency: 0.5, half_flops: 2.0e5, backward_factor: 2.9}
//     gemm_efficiency: 0.8
//     links:                        # the link classes it covers (topology.h LinkClass)
//       shared-memory: {alpha_s: 2.0e-6, beta_bytes_per_s: 5.0e9}
//     overlap_interference: 1.05   # compute slowdown while transfers run (>= 1)
//     transfer_overlap: 0.0        # share of a transfer that proceeds during compute
//                                  # (1: DMA engines / NCCL; ~0: MPI without progress)
//     lockstep_jitter: 0.03        # optional: the relative standard deviation of the
//                                  # GPUs' speeds across a ring (straggler.h); absent = 0
//     hbm_bytes_per_s: 3.0e9       # optional: memory-bound (elementwise) ops' rate
//     optimizer_bytes_per_s: 1.0e9 # optional: the optimizer's rate over
//                                  # optimizer_update_bytes (both fitted from the
//                                  # records of `train` / `run` of step plans)
//     collectives: {alpha_s: 5.0e-5, beta_bytes_per_s: 2.0e9, overlap: 0.1}
//                                  # optional: data-parallel collectives as the library
//                                  # ran them (alpha per pass, nccl-tests bus bandwidth,
//                                  # share hidden behind compute; CostParams::collectives)
//   fits:                          # per fitted curve; residuals relative, as fractions
//     attention_forward: {points: 24, r2: 0.99, mape: 0.03, mean_residual: 0.0,
//                         max_abs_residual: 0.08, p90_abs_residual: 0.05}
//   sources: ["micro-benchmarks: ringmaster calibrate --backend cpu --np 2"]
//
// Units: seconds, bytes, bytes/s, FLOP/s. Efficiencies are relative to peak_flops, not to
// the topology's peak: applying a profile to a topology with another peak keeps the
// measured FLOP/s (efficiency is rescaled), so a profile stays right if a topology's
// nominal peak is edited.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/calibration_fit.h"
#include "planner/cost_params.h"
#include "planner/kernel_efficiency.h"
#include "planner/topology.h"

namespace rm {

struct ProfileHardware {
  std::string hostname;
  std::string device_name;  // CPU model or GPU name
  int device_count = 0;
  std::string backend;      // "cpu" or "cuda"
};

struct LinkParams {
  double alpha_s = 0;
  double beta_bytes_per_s = 0;
};

struct Profile {
  ProfileHardware hardware;
  std::string date;         // ISO 8601
  std::string device_kind;  // GpuSpec::name of the topology it was made for
  double peak_flops = 0;
  KernelCurve attention;    // max_efficiency, half_flops, backward_factor
  double gemm_efficiency = 0;
  std::map<LinkClass, LinkParams> links;
  double overlap_interference = 1;
  double transfer_overlap = 1;
  double lockstep_jitter = 0;        // 0 = none measured (or no ring ran on two ranks)
  double hbm_bytes_per_s = 0;        // 0 = not calibrated (the topology's is used)
  double optimizer_bytes_per_s = 0;  // 0 = not calibrated (memory bound at hbm_bytes_per_s)
  LinkParams collectives;            // beta 0 = not calibrated (rings over the links)
  double collective_overlap = 1;     // with collectives only
  // Fitted curve name ("attention_forward", "attention_backward", "gemm",
  // "link_shared-memory", "interference", "transfer_overlap", "elementwise", "optimizer",
  // "collectives")
  // -> how well it fits.
  std::map<std::string, FitQuality> fits;
  std::vector<std::string> sources;
};

LinkClass parse_link_class(const std::string& s, const std::string& where, const std::string& field);

// Throws InputError "<file>:<line>: <field>: <expected>" on any missing, out-of-range or
// unknown field.
Profile read_profile(const std::string& path);
Profile parse_profile(const std::string& yaml_text, const std::string& source);
std::string profile_to_yaml_string(const Profile& p);
void write_profile(const Profile& p, const std::string& path);  // temp file + rename

// The machine this process runs on: hostname and CPU model (from /proc/cpuinfo).
ProfileHardware local_cpu_hardware(int device_count);
// Now, as ISO 8601 UTC ("2025-01-31T12:00:00Z").
std::string iso8601_now();

// Why a profile may not describe `topo`: other device kind, link classes of the fabric it
// does not cover, a cpu profile applied on another CPU than it was measured on. Empty when
// it matches. One line per reason, for people (the CLI prints them as warnings).
std::vector<std::string> profile_mismatches(const Profile& p, const Topology& topo,
                                            const std::vector<LinkClass>& fabric_classes);

// Overwrites `params` with the profile's parameters: kernel curve (tile_bytes_limit kept),
// GEMM efficiency, interference, transfer overlap, and alpha/beta of every link class the profile covers.
// Efficiencies are rescaled from the profile's peak to params.peak_flops, so the FLOP/s
// the profile measured is what the cost model charges.
void apply_profile(const Profile& p, CostParams& params);

// Reads the profile at `path`, applies it for `fabric`, and prints each of
// profile_mismatches() on stderr as "ringmaster: warning: <path>: ...".
void load_and_apply_profile(const std::string& path, const Fabric& fabric, CostParams& params);

}  // namespace rm
