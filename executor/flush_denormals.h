// Denormals flushed to zero while in scope, on this thread (x86's MXCSR FTZ and DAZ bits;
// a no-op elsewhere), as TensorFlow's ScopedFlushDenormal and torch.set_flush_denormal do.
// Why: Eigen 3.4's SSE exp clamps its argument to -88.7 (float) and -708 (double), so a
// masked score (-inf) becomes exp(-88.7) = 2.9e-39, a denormal, not 0; AVX-512 builds give 0.
// Each product with a denormal then takes a microcode assist on Intel cores: a causal
// 128 x 128 tile ran 14x slower per FLOP than a full one (BENCHMARKS.md, "Denormals in the
// cpu kernels"). Values below 1.2e-38 (float) only ever scale a sum by less than that.
#pragma once

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

namespace rm::exec {

class ScopedFlushDenormals {
 public:
#if defined(__SSE2__)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
#if defined(__SSE2__)
  static constexpr unsigned kFtz = 0x8000;  // flush-to-zero: denormal results become 0
  static constexpr unsigned kDaz = 0x0040;  // denormals-are-zero: denormal inputs read as 0
  unsigned saved_;
#endif
};

}  // namespace rm::exec
