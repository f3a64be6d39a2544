#include "planner/kernel_efficiency.h"

namespace rm {

double KernelCurve::tile_bytes(int bq, int bkv, int d) {
  // Q tile and K, V tiles in bf16, scores (bq x bkv) in fp32.
  return 2.0 * bq * d + 2.0 * 2.0 * bkv * d + 4.0 * bq * bkv;
}

double KernelCurve::efficiency(int bq, int bkv, int d) const {
  if (bq < 1 || bkv < 1 || d < 1 || !fits(bq, bkv, d)) return 0;
  return efficiency_at(tile_flops(bq, bkv, d));
}

}  // namespace rm
