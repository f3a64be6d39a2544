#include "planner/calibration_fit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <Eigen/Dense>

#include "planner/input_error.h"
#include "planner/stats.h"
#include "planner/straggler.h"

namespace rm {
namespace {

// The k minimising sum(((k * x_i) - t_i) / t_i)^2: a one-parameter proportional fit in
// relative error.
double relative_scale(const std::vector<double>& x, const std::vector<double>& t) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double r = x[i] / t[i];
    num += r;
    den += r * r;
  }
  return den > 0 ? num / den : 0;
}

// Weighted least squares t ~ c0 + c1 * x with weights 1/t (relative error). Returns {c0, c1}.
Eigen::Vector2d relative_line(const std::vector<double>& x, const std::vector<double>& t) {
  const Eigen::Index n = static_cast<Eigen::Index>(x.size());
  Eigen::MatrixXd a(n, 2);
  Eigen::VectorXd y(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    double w = 1.0 / t[i];
    a(i, 0) = w;
    a(i, 1) = w * x[i];
    y(i) = 1.0;  // w * t_i
  }
  return a.colPivHouseholderQr().solve(y);
}

void require_positive(const std::vector<double>& v, const char* what) {
  for (double s : v)
    if (!(s > 0) || !std::isfinite(s))
      fail_input("calibration", what, "every measured value must be a finite number > 0 (got " +
                                          std::to_string(s) + ")");
}

// relative_scale for measured ~ x * factor, after checking that both are positive (named
// `x_what` and `measured_what` in the message).
double positive_scale(const std::vector<double>& x, const std::vector<double>& measured,
                      const char* x_what, const char* measured_what) {
  require_positive(x, x_what);
  require_positive(measured, measured_what);
  return relative_scale(x, measured);
}

// How well measured ~ x * factor fits.
FitQuality scale_quality(const std::vector<double>& x, double factor,
                         const std::vector<double>& measured) {
  std::vector<double> pred;
  for (double v : x) pred.push_back(v * factor);
  return fit_quality(pred, measured);
}

}  // namespace

FitQuality fit_quality(const std::vector<double>& predicted, const std::vector<double>& measured) {
  FitQuality q;
  q.points = static_cast<int>(measured.size());
  if (measured.empty()) return q;
  double mean = 0;
  for (double m : measured) mean += m;
  mean /= measured.size();
  double ss_res = 0, ss_tot = 0, sum_abs = 0, sum = 0;
  std::vector<double> abs_rel;
  for (size_t i = 0; i < measured.size(); ++i) {
    double e = measured[i] - predicted[i];
    ss_res += e * e;
    ss_tot += (measured[i] - mean) * (measured[i] - mean);
    double rel = e / predicted[i];  // ringmaster's one sign convention
    sum += rel;
    sum_abs += std::abs(rel);
    abs_rel.push_back(std::abs(rel));
  }
  // All points equal (one point, or a constant): R^2 is undefined; report 1 only for a
  // perfect prediction.
  q.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : (ss_res == 0 ? 1.0 : 0.0);
  q.mape = sum_abs / measured.size();
  q.mean_residual = sum / measured.size();
  std::sort(abs_rel.begin(), abs_rel.end());
  q.max_abs_residual = abs_rel.back();
  size_t k = static_cast<size_t>(std::ceil(0.9 * abs_rel.size())) - 1;
  q.p90_abs_residual = abs_rel[std::min(k, abs_rel.size() - 1)];
  return q;
}

double predict_kernel_seconds(const KernelCurve& curve, double peak_flops, const KernelSample& s) {
  const double eff = curve.efficiency_at(KernelCurve::tile_flops(s.block_q, s.block_kv, s.head_dim));
  const double t = s.forward_flops / (peak_flops * eff);
  return s.backward ? t * curve.backward_factor : t;
}

namespace {

// Splits samples into forward and backward and checks them.
void split_kernel_samples(const std::vector<KernelSample>& samples,
                          std::vector<const KernelSample*>& fwd, std::vector<const KernelSample*>& bwd) {
  for (const auto& s : samples) {
    if (s.block_q <= 0 || s.block_kv <= 0 || s.head_dim <= 0 || !(s.forward_flops > 0))
      fail_input("calibration", "attention kernel sample",
                 "block_q, block_kv, head_dim and flops must be > 0");
    if (!(s.seconds > 0) || !std::isfinite(s.seconds))
      fail_input("calibration", "attention kernel seconds",
                 "every measured value must be a finite number > 0 (got " + std::to_string(s.seconds) + ")");
    (s.backward ? bwd : fwd).push_back(&s);
  }
  if (fwd.empty()) fail_input("calibration", "attention kernel", "needs forward timings (got none)");
}

// Quality of the forward curve, then backward_factor and its quality.
void finish_kernel_fit(KernelFit& fit, double peak_flops, const std::vector<const KernelSample*>& fwd,
                       const std::vector<const KernelSample*>& bwd) {
  std::vector<double> pred, meas;
  for (const auto* s : fwd) {
    pred.push_back(predict_kernel_seconds(fit.curve, peak_flops, *s));
    meas.push_back(s->seconds);
  }
  fit.forward = fit_quality(pred, meas);
  if (bwd.empty()) return;
  std::vector<double> bpred, bmeas;
  KernelCurve fwd_only = fit.curve;
  fwd_only.backward_factor = 1;
  for (const auto* s : bwd) {
    bpred.push_back(predict_kernel_seconds(fwd_only, peak_flops, *s));
    bmeas.push_back(s->seconds);
  }
  fit.curve.backward_factor = relative_scale(bpred, bmeas);
  for (double& p : bpred) p *= fit.curve.backward_factor;
  fit.backward = fit_quality(bpred, bmeas);
}

}  // namespace

KernelFit fit_kernel_curve(const std::vector<KernelSample>& samples, double peak_flops) {
  std::vector<const KernelSample*> fwd, bwd;
  split_kernel_samples(samples, fwd, bwd);
  std::vector<double> inv_f, inv_eff;
  std::set<double> distinct;
  for (const auto* s : fwd) {
    const double tile_flops = KernelCurve::tile_flops(s->block_q, s->block_kv, s->head_dim);
    inv_f.push_back(1.0 / tile_flops);
    distinct.insert(tile_flops);
    inv_eff.push_back(s->seconds * peak_flops / s->forward_flops);  // 1/eff of this point
  }
  if (distinct.size() < 2)
    fail_input("calibration", "attention kernel",
               "needs forward timings of at least 2 different tile sizes (got " +
                   std::to_string(distinct.size()) + ")");

  // 1/eff = 1/max_eff + (half_flops/max_eff) * (1/F).
  Eigen::Vector2d c = relative_line(inv_f, inv_eff);
  if (c(1) < 0) {
    // Larger tiles measured slower (cache spills dominate): no per-tile overhead is
    // visible, so the curve is flat at the mean efficiency.
    c(1) = 0;
    c(0) = relative_scale(std::vector<double>(inv_eff.size(), 1.0), inv_eff);
  }
  KernelFit fit;
  fit.curve.max_efficiency = 1.0 / c(0);
  fit.curve.half_flops = c(1) / c(0);
  finish_kernel_fit(fit, peak_flops, fwd, bwd);
  return fit;
}

KernelFit fit_kernel_height(const std::vector<KernelSample>& samples, double peak_flops,
                            double half_flops) {
  std::vector<const KernelSample*> fwd, bwd;
  split_kernel_samples(samples, fwd, bwd);
  KernelFit fit;
  fit.curve.max_efficiency = 1;
  fit.curve.half_flops = half_flops;
  std::vector<double> pred, meas;
  for (const auto* s : fwd) {
    pred.push_back(predict_kernel_seconds(fit.curve, peak_flops, *s));
    meas.push_back(s->seconds);
  }
  // Seconds scale as 1/max_efficiency.
  fit.curve.max_efficiency = 1.0 / relative_scale(pred, meas);
  finish_kernel_fit(fit, peak_flops, fwd, bwd);
  return fit;
}

GemmFit fit_gemm(const std::vector<GemmSample>& samples, double peak_flops) {
  if (samples.empty()) fail_input("calibration", "gemm", "needs at least 1 timed GEMM");
  std::vector<double> flops, t;
  for (const auto& s : samples) {
    flops.push_back(s.flops);
    t.push_back(s.seconds);
  }
  // t = flops * k with k = 1 / (peak * efficiency).
  const double k = positive_scale(flops, t, "gemm flops", "gemm seconds");
  GemmFit fit;
  fit.efficiency = 1.0 / (k * peak_flops);
  fit.quality = scale_quality(flops, k, t);
  return fit;
}

LinkFit fit_link(const std::vector<TransferSample>& samples) {
  std::vector<double> all_t;
  std::map<double, std::vector<double>> by_size;
  for (const auto& s : samples) {
    all_t.push_back(s.seconds);
    by_size[s.bytes].push_back(s.seconds);
  }
  require_positive(all_t, "transfer seconds");
  if (by_size.size() < 2)
    fail_input("calibration", "link", "needs transfers of at least 2 different sizes (got " +
                                          std::to_string(by_size.size()) + ")");
  // The line goes through each size's median time: on a shared machine one descheduled rank
  // stretches a few transfers by 10x, and a least-squares line through them can tip over
  // (the larger size "faster"). The quality below still scores every sample.
  std::vector<double> bytes, t;
  for (const auto& [b, times] : by_size) {
    bytes.push_back(b);
    t.push_back(median(times));
  }
  Eigen::Vector2d c = relative_line(bytes, t);
  LinkFit fit;
  if (c(0) < 0) {
    c(0) = 0;
    c(1) = relative_scale(bytes, t);
  }
  if (!(c(1) > 0))
    fail_input("calibration", "link",
               "time does not grow with message size; use a wider range of sizes");
  fit.alpha_s = c(0);
  fit.beta_bytes_per_s = 1.0 / c(1);
  std::vector<double> pred;
  for (const auto& s : samples) pred.push_back(c(0) + s.bytes * c(1));
  fit.quality = fit_quality(pred, all_t);
  return fit;
}

ScaleFit fit_scale(const std::vector<double>& x, const std::vector<double>& measured) {
  if (x.empty()) fail_input("calibration", "scale", "needs at least 1 sample");
  ScaleFit fit;
  fit.factor = positive_scale(x, measured, "predicted seconds", "measured seconds");
  fit.quality = scale_quality(x, fit.factor, measured);
  return fit;
}

InterferenceFit fit_interference(const std::vector<InterferenceSample>& samples) {
  if (samples.empty()) fail_input("calibration", "interference", "needs at least 1 sample");
  std::vector<double> alone, over;
  for (const auto& s : samples) {
    alone.push_back(s.alone_s);
    over.push_back(s.overlapped_s);
  }
  InterferenceFit fit;
  fit.factor = std::max(
      1.0, positive_scale(alone, over, "interference alone seconds", "interference overlapped seconds"));
  fit.quality = scale_quality(alone, fit.factor, over);
  return fit;
}

JitterFit fit_lockstep_jitter(const std::vector<RingTimings>& rings) {
  double between = 0, within = 0, between_dof = 0, within_dof = 0, noise_share = 0;
  std::vector<const RingTimings*> used;
  for (const RingTimings& ring : rings) {
    const size_t n = ring.size(), P = n > 0 ? ring.front().size() : 0;
    if (n < 2 || P < 2) continue;
    std::vector<std::vector<double>> e(n, std::vector<double>(P));  // relative deviations
    std::vector<double> d(P, 0.0);
    for (size_t s = 0; s < n; ++s) {
      if (ring[s].size() != P) fail_input("calibration", "lockstep jitter", "every step needs all the ring's positions");
      double mean = 0;
      for (double r : ring[s]) {
        if (!(r > 0)) fail_input("calibration", "lockstep jitter", "needs seconds per FLOP > 0");
        mean += r / P;
      }
      for (size_t i = 0; i < P; ++i) d[i] += (e[s][i] = ring[s][i] / mean - 1) / n;
    }
    for (size_t i = 0; i < P; ++i) {
      between += d[i] * d[i];
      for (size_t s = 0; s < n; ++s) within += (e[s][i] - d[i]) * (e[s][i] - d[i]);
    }
    between_dof += P - 1.0;
    within_dof += (P - 1.0) * (n - 1.0);
    noise_share += (P - 1.0) / n;  // what noise^2 adds to the positions' spread
    used.push_back(&ring);
  }
  if (used.empty()) fail_input("calibration", "lockstep jitter", "needs a ring of 2 positions or more timed over 2 steps or more");
  JitterFit fit;
  fit.noise = std::sqrt(within / within_dof);
  fit.jitter = std::sqrt(std::max(0.0, (between - noise_share * fit.noise * fit.noise) / between_dof));
  std::vector<double> predicted, measured;
  for (const RingTimings* ring : used) {
    std::vector<double> total(ring->front().size(), 0.0);
    for (const auto& step : *ring)
      for (size_t i = 0; i < step.size(); ++i) total[i] += step[i];
    double mean = 0;
    for (double t : total) mean += t / total.size();
    predicted.push_back(lockstep_slowdown(fit.jitter, static_cast<int>(total.size())));
    measured.push_back(*std::max_element(total.begin(), total.end()) / mean);
  }
  fit.quality = fit_quality(predicted, measured);
  return fit;
}

}  // namespace rm
