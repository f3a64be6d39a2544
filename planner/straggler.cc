// The straggler term of a lockstep ring (see straggler.h).
#include "planner/straggler.h"

#include <cmath>
#include <map>
#include <mutex>

namespace rm {

namespace {

double integrate_max(int n) {
  // E[max] = integral of x f(x), f = n phi Phi^(n-1), by Simpson's rule. The density
  // lies inside [-9, 9] for any n up to 2^30 (its mode is near sqrt(2 ln n) < 6.5), and
  // 1e-3 steps resolve it: below 1e-9 against the closed forms at n = 2 and 3.
  constexpr double lo = -9, hi = 9;
  constexpr int steps = 18000;  // even
  const double h = (hi - lo) / steps;
  const double inv_sqrt_2pi = 1 / std::sqrt(2 * M_PI);
  double sum = 0;
  for (int i = 0; i <= steps; ++i) {
    const double x = lo + i * h;
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double f = n * inv_sqrt_2pi * std::exp(-0.5 * x * x) * std::pow(cdf, n - 1);
    sum += (i == 0 || i == steps ? 1 : i % 2 == 1 ? 4 : 2) * x * f;
  }
  return sum * h / 3;
}

}  // namespace

double expected_max_standard_normal(int n) {
  if (n <= 1) return 0;
  // A search prices thousands of plans over a handful of ring sizes: remember each.
  static std::mutex mu;
  static std::map<int, double> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(n);
  if (it == known.end()) it = known.emplace(n, integrate_max(n)).first;
  return it->second;
}

double lockstep_slowdown(double jitter, int ranks) {
  if (jitter <= 0 || ranks <= 1) return 1;
  return 1 + jitter * expected_max_standard_normal(ranks);
}

}  // namespace rm
