// Calibration: the fits recover known parameters from synthetic data (with and without
// noise), report honest R^2 / MAPE, and the profile file round-trips and rejects bad input
// with file:line and field.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>

#include <doctest/doctest.h>
#include <unistd.h>

#include "planner/calibration_fit.h"
#include "planner/input_error.h"
#include "planner/profile.h"
#include "tests/temp_path.h"

using namespace rm;

namespace {

constexpr double kPeak = 5e10;

// Synthetic forward and backward timings from a known curve, with multiplicative noise.
std::vector<KernelSample> kernel_samples(const KernelCurve& truth, double noise, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0, noise);
  std::vector<KernelSample> out;
  for (int bq : {16, 32, 64, 128, 256})
    for (int bkv : {16, 64, 256})
      for (int d : {32, 64, 128})
        for (bool bwd : {false, true}) {
          KernelSample s{bq, bkv, d, bwd, 4.0 * 1024 * 1024 * d, 0};
          s.seconds = predict_kernel_seconds(truth, kPeak, s) * (1 + n(rng));
          out.push_back(s);
        }
  return out;
}

std::string profile_error_of(const std::string& yaml) {
  try {
    parse_profile(yaml, "p.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const char* kGoodProfile = R"(format: 1
hardware: {hostname: box, device_name: "Test CPU", device_count: 2, backend: cpu}
date: 2025-01-31T12:00:00Z
device_kind: cpu-core
peak_flops: 5.0e10
parameters:
  attention: {max_efficiency: 0.5, half_flops: 2.0e5, backward_factor: 2.9}
  gemm_efficiency: 0.8
  links:
    shared-memory: {alpha_s: 2.0e-6, beta_bytes_per_s: 5.0e9}
  overlap_interference: 1.05
  transfer_overlap: 0.25
fits:
  gemm: {points: 4, r2: 0.99, mape: 0.01, mean_residual: 0, max_abs_residual: 0.02, p90_abs_residual: 0.02}
sources: [unit test]
)";

}  // namespace

TEST_CASE("kernel curve fit recovers exact parameters from noiseless data") {
  KernelCurve truth;
  truth.max_efficiency = 0.62;
  truth.half_flops = 3.0e5;
  truth.backward_factor = 3.1;
  KernelFit fit = fit_kernel_curve(kernel_samples(truth, 0, 1), kPeak);
  CHECK(fit.curve.max_efficiency == doctest::Approx(0.62).epsilon(1e-9));
  CHECK(fit.curve.half_flops == doctest::Approx(3.0e5).epsilon(1e-9));
  CHECK(fit.curve.backward_factor == doctest::Approx(3.1).epsilon(1e-9));
  CHECK(fit.forward.r2 == doctest::Approx(1.0));
  CHECK(fit.forward.mape < 1e-9);
  CHECK(fit.backward.points == 45);
  CHECK(fit.forward.points == 45);
}

TEST_CASE("kernel curve fit with 3% noise stays within a few percent, R^2 high, MAPE ~ noise") {
  KernelCurve truth;
  truth.max_efficiency = 0.4;
  truth.half_flops = 1.0e6;
  truth.backward_factor = 2.5;
  KernelFit fit = fit_kernel_curve(kernel_samples(truth, 0.03, 7), kPeak);
  CHECK(fit.curve.max_efficiency == doctest::Approx(0.4).epsilon(0.05).scale(0));
  CHECK(fit.curve.half_flops == doctest::Approx(1.0e6).epsilon(0.15).scale(0));
  CHECK(fit.curve.backward_factor == doctest::Approx(2.5).epsilon(0.03).scale(0));
  CHECK(fit.forward.r2 > 0.95);
  CHECK(fit.forward.mape > 0.01);
  CHECK(fit.forward.mape < 0.05);
}

TEST_CASE("kernel curve fit needs two tile sizes") {
  std::vector<KernelSample> one = {{64, 64, 64, false, 1e9, 0.1}, {64, 64, 64, false, 2e9, 0.2}};
  CHECK_THROWS_AS(fit_kernel_curve(one, kPeak), InputError);
}

TEST_CASE("link fit recovers alpha and beta: negative alpha is clamped") {
  std::vector<TransferSample> s;
  for (double b = 64; b <= 64e6; b *= 4) s.push_back({b, 3e-6 + b / 6e9});
  LinkFit fit = fit_link(s);
  CHECK(fit.alpha_s == doctest::Approx(3e-6).epsilon(1e-6).scale(0));
  CHECK(fit.beta_bytes_per_s == doctest::Approx(6e9).epsilon(1e-6).scale(0));
  CHECK(fit.quality.r2 == doctest::Approx(1.0));

  // Pure bandwidth with a slight downward bias at small sizes: the raw fit's alpha is
  // negative, which is meaningless, so it is clamped to 0.
  std::vector<TransferSample> t;
  for (double b = 1e3; b <= 1e7; b *= 10) t.push_back({b, b / 2e9 - (b < 1e4 ? 1e-7 : 0)});
  LinkFit clamped = fit_link(t);
  CHECK(clamped.alpha_s == 0);
  CHECK(clamped.beta_bytes_per_s == doctest::Approx(2e9).epsilon(0.1).scale(0));

  CHECK_THROWS_AS(fit_link({{100, 1e-6}, {100, 2e-6}}), InputError);
  CHECK_THROWS_AS(fit_link({{100, 1e-6}, {200, -1}}), InputError);
}

TEST_CASE("link fit goes through each size's median: a few skewed samples do not tip it") {
  // Blocking collectives on a loaded machine: two ranks descheduled at the small size
  // (3 ms), and at the large size two calls where the peer was already waiting (20 us).
  // A least-squares line through all ten has the large size faster; the medians do not.
  std::vector<TransferSample> s;
  for (double t : {1e-4, 1e-4, 1e-4, 3e-3, 3e-3}) s.push_back({1e6, t});
  for (double t : {1.5e-4, 1.5e-4, 1.5e-4, 2e-5, 2e-5}) s.push_back({2e6, t});
  LinkFit fit = fit_link(s);
  CHECK(fit.alpha_s == doctest::Approx(5e-5));
  CHECK(fit.beta_bytes_per_s == doctest::Approx(2e10));
  CHECK(fit.quality.points == 10);  // scored on every sample, not the medians
  CHECK(fit.quality.r2 < 0.5);
}

TEST_CASE("gemm and interference fits") {
  GemmFit g = fit_gemm({{1e9, 1e9 / (kPeak * 0.7)}, {4e9, 4e9 / (kPeak * 0.7)}}, kPeak);
  CHECK(g.efficiency == doctest::Approx(0.7));
  InterferenceFit i = fit_interference({{1.0, 1.1}, {2.0, 2.2}, {0.5, 0.55}});
  CHECK(i.factor == doctest::Approx(1.1));
  // A speed-up while transferring is noise, never a negative interference.
  CHECK(fit_interference({{1.0, 0.9}}).factor == 1.0);
}

TEST_CASE("fit_quality: R^2 and MAPE by hand") {
  FitQuality q = fit_quality({1.1, 1.9, 3.0}, {1.0, 2.0, 3.0});
  // ss_res = 0.01 + 0.01 = 0.02, ss_tot = 2 -> r2 = 0.99; residuals (measured - predicted) /
  // predicted = -0.1/1.1, +0.1/1.9, 0.
  CHECK(q.r2 == doctest::Approx(0.99));
  CHECK(q.mape == doctest::Approx((0.1 / 1.1 + 0.1 / 1.9) / 3));
  CHECK(q.max_abs_residual == doctest::Approx(0.1 / 1.1));
  CHECK(q.mean_residual == doctest::Approx((-0.1 / 1.1 + 0.1 / 1.9) / 3));
}

TEST_CASE("profile round trip through a file") {
  Profile p = parse_profile(kGoodProfile, "p.yaml");
  CHECK(p.hardware.device_count == 2);
  CHECK(p.links.at(LinkClass::kSharedMemory).beta_bytes_per_s == 5e9);
  CHECK(p.fits.at("gemm").points == 4);
  const std::string path = rm::test::temp_path("profile.yaml");
  write_profile(p, path);
  Profile q = read_profile(path);
  std::remove(path.c_str());
  CHECK(q.attention.half_flops == doctest::Approx(2e5));
  CHECK(q.attention.backward_factor == doctest::Approx(2.9));
  CHECK(q.links.at(LinkClass::kSharedMemory).alpha_s == doctest::Approx(2e-6).scale(0));
  CHECK(q.overlap_interference == doctest::Approx(1.05));
  CHECK(q.transfer_overlap == doctest::Approx(0.25));
  CHECK(q.lockstep_jitter == 0);  // absent: none measured
  CHECK(q.sources == std::vector<std::string>{"unit test"});
  // A fitted jitter is written, read back and applied.
  q.lockstep_jitter = 0.03;
  write_profile(q, path);
  const Profile r = read_profile(path);
  std::remove(path.c_str());
  CHECK(r.lockstep_jitter == doctest::Approx(0.03));
  CostParams params;
  params.peak_flops = 5e10;
  apply_profile(r, params);
  CHECK(params.lockstep_jitter == doctest::Approx(0.03));
  CHECK(q.date == p.date);
}

TEST_CASE("bad profiles name file, line and field") {
  std::string good = kGoodProfile;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return profile_error_of(s);
  };
  CHECK(profile_error_of(good).empty());
  CHECK(with("gemm_efficiency: 0.8", "gemm_efficiency: -1") ==
        "p.yaml:8: parameters.gemm_efficiency: expected a number in (0, 1000] (got -1)");
  CHECK(with("shared-memory:", "warp-drive:").find("p.yaml:10: parameters.links: unknown link class 'warp-drive'") == 0);
  CHECK(with("overlap_interference: 1.05", "overlap_interference: 0.5").find("p.yaml:11: parameters.overlap_interference") == 0);
  CHECK(with("backend: cpu", "backend: tpu").find("p.yaml:2: hardware.backend: expected cpu or cuda") == 0);
  CHECK(with("format: 1", "format: 7").find("p.yaml:1: format:") == 0);
  CHECK(with("  gemm_efficiency: 0.8\n", "").find("parameters.gemm_efficiency") != std::string::npos);
  CHECK(with("sources:", "colour: red\nsources:").find("p.yaml:15: colour: unknown key") == 0);
  // Hostile values: exit 2 with the field named, never a yaml-cpp conversion error (exit 1).
  CHECK(with("sources: [unit test]", "sources: [[1, 2]]") ==
        "p.yaml:15: sources: expected a list of strings (item 0 is a list)");
  CHECK(with("beta_bytes_per_s: 5.0e9", "beta_bytes_per_s: 1e308").find("p.yaml:10: parameters.links.shared-memory.beta_bytes_per_s: expected a number in (0, 1e+15]") == 0);
  CHECK(with("r2: 0.99", "r2: .nan").find("p.yaml:14: fits.gemm.r2: expected a number") == 0);
  CHECK(with("gemm_efficiency: 0.8", "gemm_efficiency: 0.8\n  gemm_efficiency: 0.9").find("p.yaml:9: parameters.gemm_efficiency: key given twice (first at line 8)") == 0);
  CHECK(with("{points: 4,", "{points: 4294967297,").find("fits.gemm.points: expected a whole number") != std::string::npos);
  CHECK(with("transfer_overlap: 0.25", "transfer_overlap: 0.25\n  lockstep_jitter: 0.02").empty());
  CHECK(with("transfer_overlap: 0.25", "transfer_overlap: 0.25\n  lockstep_jitter: 1").find("p.yaml:13: parameters.lockstep_jitter: expected a number in [0, 1)") == 0);
  // The optional collectives: each of its three keys, in range.
  const std::string coll = "gemm_efficiency: 0.8\n  collectives: {alpha_s: 1e-5, beta_bytes_per_s: 1e9, overlap: ";
  CHECK(with("gemm_efficiency: 0.8", coll + "0.2}").empty());
  CHECK(with("gemm_efficiency: 0.8", coll + "1.5}").find("p.yaml:9: parameters.collectives.overlap: expected a number in [0, 1]") == 0);
  CHECK(with("gemm_efficiency: 0.8", "gemm_efficiency: 0.8\n  collectives: {alpha_s: 1e-5, overlap: 0}")
            .find("parameters.collectives.beta_bytes_per_s") != std::string::npos);
}

TEST_CASE("a profile that fails its own reader is not written") {
  Profile p = parse_profile(kGoodProfile, "p.yaml");
  p.fits["gemm"].r2 = std::numeric_limits<double>::quiet_NaN();  // what one 1e308 s record gave
  const std::string path = "/tmp/rm-nan-profile-" + std::to_string(::getpid()) + ".yaml";
  CHECK_THROWS_WITH_AS(write_profile(p, path), doctest::Contains("fails its own reader"), InputError);
  CHECK(::access(path.c_str(), F_OK) != 0);
}

TEST_CASE("a profile from other hardware is flagged") {
  Profile p = parse_profile(kGoodProfile, "p.yaml");
  Topology t;
  t.name = "dgx";
  t.gpu.name = "A100";
  t.intra.kind = IntraKind::kNvswitch;
  auto why = profile_mismatches(p, t, {LinkClass::kNvlink, LinkClass::kNic, LinkClass::kNvlink});
  REQUIRE(why.size() == 3);
  CHECK(why[0].find("'cpu-core'") != std::string::npos);
  CHECK(why[1].find("'nvlink'") != std::string::npos);
  t.gpu.name = "cpu-core";
  CHECK(profile_mismatches(p, t, {LinkClass::kSharedMemory}).empty());
}

TEST_CASE("an unwritable profile path is an input error and leaves nothing behind") {
  Profile p = parse_profile(kGoodProfile, "p.yaml");
  CHECK_THROWS_AS(write_profile(p, "/nonexistent-dir/x/profile.yaml"), InputError);
}
