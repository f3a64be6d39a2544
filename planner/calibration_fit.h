// Fitting the cost model's parameters to measured times (Eigen least squares).
//
// Every fit minimises *relative* error of the predicted time (weighted least squares with
// weight 1/measured), because calibration points span orders of magnitude (a 64-byte
// message and a 64 MB one; a 16x16 tile and a 512x512 one): unweighted least squares
// would let the largest points decide everything and leave alpha and half_flops
// meaningless. Quality is reported in time space: R^2 of predicted against measured
// seconds and MAPE (mean absolute percentage error), plus a residual summary.
//
// The fitted forms are exactly the ones the planner's cost model evaluates:
//   attention kernel  t = flops / (peak * eff(F)),  eff = max_eff * F / (F + half_flops),
//                     F = 4*bq*bkv*d (one tile of one head; kernel_efficiency.h);
//                     1/eff is linear in 1/F, so this is linear least squares.
//                     Backward: t = backward_factor * forward_flops / (peak * eff(F)); the
//                     factor absorbs the backward kernel's own efficiency.
//   GEMM              t = flops / (peak * gemm_efficiency)
//   link (per class)  t = alpha + bytes / beta
//   interference      t_compute_while_transferring = factor * t_compute_alone
//   lockstep jitter   slowest of P = mean x (1 + jitter x E[max of P normals]) (straggler.h)
#pragma once

#include <string>
#include <vector>

#include "planner/kernel_efficiency.h"

namespace rm {

// How well a fitted curve predicts its own points. Residuals are relative, with the sign
// convention of every ringmaster error: (measured - predicted) / predicted.
struct FitQuality {
  int points = 0;
  double r2 = 0;                // 1 - SS_res / SS_tot on seconds
  double mape = 0;              // mean |relative residual| (a fraction: 0.05 = 5 %)
  double mean_residual = 0;     // mean relative residual (bias; > 0 = under-predicts)
  double max_abs_residual = 0;  // largest |relative residual|
  double p90_abs_residual = 0;  // 90th percentile of |relative residual|
};

// Quality of `predicted` against `measured` (same length, both > 0).
FitQuality fit_quality(const std::vector<double>& predicted, const std::vector<double>& measured);

// One timed attention tile-kernel call: a (bq x bkv) tiling with head dim d over `flops`
// executed FLOPs (forward FLOPs for a backward sample, see above).
struct KernelSample {
  int block_q = 0;
  int block_kv = 0;
  int head_dim = 0;
  bool backward = false;
  double forward_flops = 0;  // forward FLOPs of the work timed (a backward runs 2.5x: kBackwardFlopsFactor)
  double seconds = 0;
};

struct KernelFit {
  KernelCurve curve;  // max_efficiency, half_flops, backward_factor (tile_bytes_limit untouched)
  FitQuality forward;
  FitQuality backward;  // points == 0 when no backward samples were given
};

// Needs at least 2 forward samples with distinct tile FLOPs; throws InputError otherwise.
// `peak_flops` is the device peak the efficiencies are fractions of.
KernelFit fit_kernel_curve(const std::vector<KernelSample>& samples, double peak_flops);
// The same fit with half_flops fixed (records of one tile size show the curve's height,
// not its shape): fits max_efficiency and backward_factor only. Needs 1 forward sample.
KernelFit fit_kernel_height(const std::vector<KernelSample>& samples, double peak_flops,
                            double half_flops);
// Seconds the curve predicts for a sample (the planner's formula, kept next to the fit).
double predict_kernel_seconds(const KernelCurve& curve, double peak_flops, const KernelSample& s);

struct GemmSample {
  double flops = 0;
  double seconds = 0;
};
struct GemmFit {
  double efficiency = 0;
  FitQuality quality;
};
GemmFit fit_gemm(const std::vector<GemmSample>& samples, double peak_flops);

// One timed point-to-point message (one direction) on a link class.
struct TransferSample {
  double bytes = 0;
  double seconds = 0;
};
struct LinkFit {
  double alpha_s = 0;           // latency: time of an empty message
  double beta_bytes_per_s = 0;  // asymptotic bandwidth
  FitQuality quality;
};
// Needs at least 2 distinct message sizes; the line goes through each size's median time
// and its quality scores every sample. A negative fitted alpha (noise on a link whose
// latency is below the timer's resolution) is clamped to 0 and beta refitted.
LinkFit fit_link(const std::vector<TransferSample>& samples);

// measured ~ factor * x (a time predicted up to one factor), minimising relative error.
struct ScaleFit {
  double factor = 0;
  FitQuality quality;
};
ScaleFit fit_scale(const std::vector<double>& x, const std::vector<double>& measured);

// Compute time of the same work alone and while a transfer is in flight.
struct InterferenceSample {
  double alone_s = 0;
  double overlapped_s = 0;
};
struct InterferenceFit {
  double factor = 1;  // overlapped / alone, >= 1 after clamping (never a speed-up)
  FitQuality quality;
};
InterferenceFit fit_interference(const std::vector<InterferenceSample>& samples);

// One ring's kernels as its positions timed them: steps[s][i] is position i's seconds per
// FLOP in lockstep step s (so steps of unequal work compare), every step timed on all of
// the ring's positions.
using RingTimings = std::vector<std::vector<double>>;
struct JitterFit {
  double jitter = 0;   // CostParams::lockstep_jitter: the spread of the GPUs' speeds
  double noise = 0;    // the steps' own spread around each GPU's speed (which costs a ring little)
  FitQuality quality;  // each ring's slowest position's total over the mean, as lockstep_slowdown
};
// A position's speed is its mean relative deviation from its steps' means, d_i; with steps
// t = speed_i x (1 + noise z), the positions' d_i spread by jitter^2 + noise^2 / n over n
// steps, and noise^2 is the pooled spread of each position's steps around its d_i: so
// jitter^2 = sum d_i^2 / sum (P - 1) - noise^2 / n (clamped at 0), pooled over rings. Rings
// of one position or one step are skipped; needs one of 2 or more of each.
JitterFit fit_lockstep_jitter(const std::vector<RingTimings>& rings);

}  // namespace rm
