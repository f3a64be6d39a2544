// How fast the blockwise attention kernel runs as a function of its tile sizes.
//
// efficiency(bq, bkv, d) = max_efficiency * F / (F + half_flops), F = 4*bq*bkv*d, the
// FLOPs of one (bq x bkv) tile of one head. The form says "a fixed per-tile cost
// (softmax bookkeeping, loads, launch) amortised over the tile's FLOPs"; it is linear in
// 1/F (1/eff = 1/max_eff + half_flops/max_eff * 1/F), so calibration fits it by least
// squares. Defaults per GPU kind come from published FlashAttention figures (cited in the
// topology YAML); a calibrated profile replaces them.
#pragma once

#include <string>

namespace rm {

// FLOPs of the attention backward over the forward's, for the same tiles: 2.5. Per
// (bq x bkv) tile of one head the forward runs two products, S = Q·Kᵀ and O += P·V
// (4·bq·bkv·d FLOPs); the FlashAttention-2 backward runs five, S again, dV += Pᵀ·dO,
// dP = dO·Vᵀ, dQ += dS·K and dK += dSᵀ·Q (10·bq·bkv·d) (Dao 2023, "FlashAttention-2",
// Algorithm 2; the cpu kernels count exactly these, executor/cpu_attention.h). Measurement
// records carry backward FLOPs = this x forward, and calibration divides them back.
inline constexpr double kBackwardFlopsFactor = 2.5;

// The attention implementation a GPU's curve describes unless its topology names another
// (gpu.attention.kernel: cudnn on B200, Transformer Engine's fused kernels); others are priced
// by a factor of the GPU's (GpuSpec::attention_kernels).
inline constexpr const char* kDefaultAttentionKernel = "flash_attn_2";

// An attention implementation's name, as topologies, plans and the corpus spell one: a-z, 0-9, '_'.
inline bool valid_attention_kernel_name(const std::string& name) {
  return !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
}

struct KernelCurve {
  double max_efficiency = 0;     // fraction of peak reached by very large tiles
  double half_flops = 0;         // tile FLOPs at which half of max_efficiency is reached
  double tile_bytes_limit = 0;   // on-chip memory (shared memory / cache) a tile must fit in
  // Backward time over forward time at the same tiles. Until calibrated: the FLOP ratio
  // (the backward assumed as efficient as the forward); a fit replaces it with what the
  // backward kernel really takes.
  double backward_factor = kBackwardFlopsFactor;
  // HBM bytes per output element that merging one ring step's partial result costs
  // outside the kernel (0 where the kernel merges in place): forward, the block's (out,
  // lse) into the running ones; backward, the block's dQ into the running dQ. Charged per
  // block after a rank's own (cost_params.h merge_s).
  double merge_bytes = 0;
  double dq_merge_bytes = 0;
  // Forward, on top of merge_bytes: a block whose partial covers a slice of the output
  // (striped causal, a block of a later ring position: its first query row sees no key)
  // is merged into that slice and copied back (cost_params.h merge_s, `sliced`).
  double slice_merge_bytes = 0;

  // Fraction of peak FLOP/s for tiles of bq x bkv with head dim d; 0 if the tile does
  // not fit in tile_bytes_limit.
  double efficiency(int bq, int bkv, int d) const;
  // The curve alone at F = tile_flops(bq, bkv, d), without the on-chip fit check (the
  // calibration fits use it while tile_bytes_limit is still unset).
  double efficiency_at(double tile_flops) const {
    return max_efficiency * tile_flops / (tile_flops + half_flops);
  }
  // F: the FLOPs of one (bq x bkv) tile of one head.
  static double tile_flops(int bq, int bkv, int d) { return 4.0 * bq * bkv * d; }
  // Bytes of one tile's working set: Q tile, K and V tiles (bf16) and the fp32 scores.
  static double tile_bytes(int bq, int bkv, int d);
  bool fits(int bq, int bkv, int d) const { return tile_bytes(bq, bkv, d) <= tile_bytes_limit; }
};

}  // namespace rm
