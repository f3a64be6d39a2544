// The straggler term of lockstep rings (planner/straggler.h): the expected slowest of P and
// its fit from timed ring steps (cost_model_test.cc prices it by hand, agreement_test.cc
// replays it).
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "planner/calibration_fit.h"
#include "planner/input_error.h"
#include "planner/straggler.h"

using namespace rm;

TEST_CASE("the expected slowest of n standard normals, against closed forms and tables") {
  CHECK(expected_max_standard_normal(1) == 0);
  CHECK(expected_max_standard_normal(0) == 0);
  // n = 2: 1 / sqrt(pi); n = 3: 3 / (2 sqrt(pi)) (David & Nagaraja, Order Statistics, 3.2).
  CHECK(expected_max_standard_normal(2) == doctest::Approx(1 / std::sqrt(M_PI)).epsilon(1e-9));
  CHECK(expected_max_standard_normal(3) == doctest::Approx(1.5 / std::sqrt(M_PI)).epsilon(1e-9));
  // Tabulated expected maxima (Harter 1961, Biometrika 48: 151-165): 4, 8, 10, 100.
  CHECK(expected_max_standard_normal(4) == doctest::Approx(1.029375).epsilon(1e-6));
  CHECK(expected_max_standard_normal(8) == doctest::Approx(1.423600).epsilon(1e-6));
  CHECK(expected_max_standard_normal(10) == doctest::Approx(1.538753).epsilon(1e-6));
  CHECK(expected_max_standard_normal(100) == doctest::Approx(2.507594).epsilon(1e-6));
  // It keeps growing, slowly (about sqrt(2 ln n)), up to the largest jobs.
  CHECK(expected_max_standard_normal(131072) > expected_max_standard_normal(1024));
  CHECK(expected_max_standard_normal(131072) < std::sqrt(2 * std::log(131072.0)));
  CHECK(lockstep_slowdown(0, 32) == 1);
  CHECK(lockstep_slowdown(0.1, 1) == 1);
  CHECK(lockstep_slowdown(0.1, 2) == doctest::Approx(1 + 0.1 / std::sqrt(M_PI)));
}

TEST_CASE("the jitter fit: the spread of the positions' speeds, their steps' own noise apart") {
  // 400 rings of 8 positions, 50 steps each: position i's kernels take speed_i x (1 + 0.05 z)
  // of the step's, speed_i = 1 + 0.03 z'. The noise would read as a spread of 0.05 / sqrt(50)
  // = 0.007 in the positions' means; the fit takes it out.
  std::mt19937 rng(7);
  std::normal_distribution<double> z;
  auto rings_of = [&](double spread, double noise) {
    std::vector<RingTimings> rings;
    for (int r = 0; r < 400; ++r) {
      std::vector<double> speed(8);
      for (double& v : speed) v = 1 + spread * z(rng);
      RingTimings t;
      for (int s = 0; s < 50; ++s) {
        const double mean = 1e-12 * (1 + s % 5);  // steps of unequal work compare as rates
        t.emplace_back();
        for (double v : speed) t.back().push_back(mean * v * (1 + noise * z(rng)));
      }
      rings.push_back(t);
    }
    return rings;
  };
  const JitterFit fit = fit_lockstep_jitter(rings_of(0.03, 0.05));
  CHECK(fit.jitter == doctest::Approx(0.03).epsilon(0.05));
  CHECK(fit.noise == doctest::Approx(0.05).epsilon(0.05));
  CHECK(fit.quality.points == 400);
  // The slowest position's total over the mean, as lockstep_slowdown charges it: unbiased.
  CHECK(std::abs(fit.quality.mean_residual) < 0.005);
  // Noise alone is no spread of speeds.
  CHECK(fit_lockstep_jitter(rings_of(0, 0.05)).jitter < 0.003);
  CHECK(fit_lockstep_jitter({{{2e-12, 2e-12}, {3e-12, 3e-12}}}).jitter == 0);
  // A ring of one position, or of one step, shows no spread: nothing to fit.
  CHECK_THROWS_AS(fit_lockstep_jitter({{{1e-12}, {1e-12}}}), InputError);
  CHECK_THROWS_AS(fit_lockstep_jitter({{{1e-12, 2e-12}}}), InputError);
  CHECK_THROWS_AS(fit_lockstep_jitter({{{1e-12, 0.0}, {1e-12, 1e-12}}}), InputError);
}
