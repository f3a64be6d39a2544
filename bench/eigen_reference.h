// What the cpu benches measure against: this machine's Eigen SGEMM, timed in this thread's
// CPU time so that other processes on a shared machine do not skew the ratios.
#pragma once

#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <algorithm>
#include <ctime>
#include <limits>

namespace rm::bench {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// This thread's CPU time in seconds.
inline double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FLOP/s of a 512^3 fp32 GEMM on one thread (large enough for Eigen's best blocking), the
// best of 20 (the machine is shared), measured once per process.
inline double reference_gemm() {
  static const double rate = [] {
    Eigen::setNbThreads(1);
    const int n = 512;
    RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 20; ++r) {
      const double t0 = cpu_now();
      c.noalias() = a * b;
      benchmark::DoNotOptimize(c.data());
      best = std::min(best, cpu_now() - t0);
    }
    return 2.0 * n * n * n / best;
  }();
  return rate;
}

}  // namespace rm::bench
