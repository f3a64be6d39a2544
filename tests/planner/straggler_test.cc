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

TEST_CASE("the jitter fit: the pooled spread of seconds per FLOP across a step's positions") {
  // Steps of 8 positions, kernel times mean x (1 + 0.05 z): the pooled estimate comes back.
  std::mt19937 rng(7);
  std::normal_distribution<double> z;
  std::vector<LockstepSample> steps;
  for (int s = 0; s < 2000; ++s) {
    LockstepSample step;
    const double mean = 1e-12 * (1 + s % 5);  // steps of unequal length compare as rates
    for (int i = 0; i < 8; ++i) step.push_back(mean * (1 + 0.05 * z(rng)));
    steps.push_back(step);
  }
  steps.push_back({3e-12});  // one position: no spread to see, skipped
  const JitterFit fit = fit_lockstep_jitter(steps);
  CHECK(fit.jitter == doctest::Approx(0.05).epsilon(0.03));
  CHECK(fit.quality.points == 2000);
  // The slowest of 8 predicted as mean x lockstep_slowdown: unbiased within a percent.
  CHECK(std::abs(fit.quality.mean_residual) < 0.01);
  // Two equal positions: no jitter.
  CHECK(fit_lockstep_jitter({{2e-12, 2e-12}}).jitter == 0);
  CHECK_THROWS_AS(fit_lockstep_jitter({{1e-12}}), InputError);
  CHECK_THROWS_AS(fit_lockstep_jitter({{1e-12, 0.0}}), InputError);
}
