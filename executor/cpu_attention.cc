// Blockwise attention on the CPU: every tile product is an Eigen GEMM on contiguous
// row-major tiles; the softmax bookkeeping works on whole tiles as Eigen array
// expressions so it vectorises. Scratch tiles live in thread-local storage so the hot
// loop does not allocate.
#include "executor/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <Eigen/Dense>

#include "executor/flush_denormals.h"

namespace rm::exec {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vec = Eigen::VectorXf;
using CMap = Eigen::Map<const RowMat>;
using MMap = Eigen::Map<RowMat>;


enum class TileMask { kHidden, kPartial, kVisible };

// Which pairs of a (q tile, kv tile) the causal mask (and window) lets through; both token
// lists are increasing, so the corners decide.
TileMask classify(const int64_t* q_tok, int64_t tq, const int64_t* k_tok, int64_t tk,
                  const TileShape& tiles) {
  if (!tiles.causal) return TileMask::kVisible;
  const int64_t w = tiles.window;
  if (k_tok[0] > q_tok[tq - 1]) return TileMask::kHidden;                // after every query
  if (w > 0 && k_tok[tk - 1] <= q_tok[0] - w) return TileMask::kHidden;  // before every window
  if (k_tok[tk - 1] <= q_tok[0] && (w == 0 || k_tok[0] > q_tok[tq - 1] - w)) return TileMask::kVisible;
  return TileMask::kPartial;
}

void apply_mask(RowMat& s, const int64_t* q_tok, const int64_t* k_tok, int64_t window) {
  for (Eigen::Index i = 0; i < s.rows(); ++i)
    for (Eigen::Index j = 0; j < s.cols(); ++j)
      if (k_tok[j] > q_tok[i] || (window > 0 && k_tok[j] <= q_tok[i] - window)) s(i, j) = kNegInf;
}

// s(i, :) = exp(s(i, :) - m(i)) row by row: rows of a row-major tile are contiguous, so
// the exp vectorises (a broadcast over a row-major tile falls back to scalar expf).
template <typename V>
void exp_rows_minus(RowMat& s, const V& m) {
  for (Eigen::Index i = 0; i < s.rows(); ++i) s.row(i).array() = (s.row(i).array() - m[i]).exp();
}

// Per-thread scratch tiles (one rank = one thread, but tests may run kernels anywhere).
struct Scratch {
  RowMat qs, s, dp, acc;
  Vec m, m_new, sum, alpha;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

double attention_block_forward(const float* q, const int64_t* q_tok, int64_t cq,
                               const float* k, const float* v, const int64_t* k_tok, int64_t ck,
                               int d, float scale, const TileShape& tiles, float* o, float* l) {
  const ScopedFlushDenormals flush;  // masked scores' exp
  Scratch& w = scratch();
  double flops = 0;
  for (int64_t q0 = 0; q0 < cq; q0 += tiles.block_q) {
    const int64_t tq = std::min<int64_t>(tiles.block_q, cq - q0);
    w.qs.noalias() = CMap(q + q0 * d, tq, d) * scale;
    w.acc.setZero(tq, d);
    w.m.setConstant(tq, kNegInf);
    w.sum.setZero(tq);
    for (int64_t k0 = 0; k0 < ck; k0 += tiles.block_kv) {
      const int64_t tk = std::min<int64_t>(tiles.block_kv, ck - k0);
      const TileMask mask = classify(q_tok + q0, tq, k_tok + k0, tk, tiles);
      if (mask == TileMask::kHidden) {
        // Keys only grow: past the queries every later tile is hidden too; before the
        // window a later one may reach it.
        if (k_tok[k0] > q_tok[q0 + tq - 1]) break;
        continue;
      }
      w.s.noalias() = w.qs * CMap(k + k0 * d, tk, d).transpose();
      if (mask == TileMask::kPartial) apply_mask(w.s, q_tok + q0, k_tok + k0, tiles.window);
      // Online softmax: rescale what was accumulated to the new running max. A row with
      // no visible key so far keeps max -inf; subtracting 0 instead keeps exp() at 0.
      w.m_new = w.m.cwiseMax(w.s.rowwise().maxCoeff());
      w.m_new = (w.m_new.array() == kNegInf).select(0.0f, w.m_new);
      w.alpha = (w.m - w.m_new).array().exp();
      exp_rows_minus(w.s, w.m_new);  // s becomes P
      w.sum = w.sum.cwiseProduct(w.alpha) + w.s.rowwise().sum();
      w.acc = w.alpha.asDiagonal() * w.acc;
      w.acc.noalias() += w.s * CMap(v + k0 * d, tk, d);
      w.m = w.m_new;
      flops += 4.0 * static_cast<double>(tq) * static_cast<double>(tk) * d;
      if (tiles.between_tiles) tiles.between_tiles();
    }
    MMap out(o + q0 * d, tq, d);
    for (int64_t i = 0; i < tq; ++i) {
      if (w.sum[i] > 0) {
        out.row(i) = w.acc.row(i) / w.sum[i];
        l[q0 + i] = w.m[i] + std::log(w.sum[i]);
      } else {
        out.row(i).setZero();
        l[q0 + i] = kNegInf;
      }
    }
  }
  return flops;
}

void merge_out_lse(float* out, float* lse, const float* o, const float* l, int64_t rows, int d) {
  for (int64_t i = 0; i < rows; ++i) {
    if (l[i] == kNegInf) continue;  // the block adds nothing to this query
    float* dst = out + i * d;
    const float* src = o + i * d;
    if (lse[i] == kNegInf) {
      std::copy(src, src + d, dst);
      lse[i] = l[i];
      continue;
    }
    const float mx = std::max(lse[i], l[i]);
    const float a = std::exp(lse[i] - mx), b = std::exp(l[i] - mx);
    const float sum = a + b;
    const float wa = a / sum, wb = b / sum;
    for (int j = 0; j < d; ++j) dst[j] = dst[j] * wa + src[j] * wb;
    lse[i] = mx + std::log(sum);
  }
}

double attention_block_backward(const float* q, const float* dout, const float* lse,
                                const float* D, const int64_t* q_tok, int64_t cq,
                                const float* k, const float* v, const int64_t* k_tok, int64_t ck,
                                int d, float scale, const TileShape& tiles, float* dq,
                                float* dk, float* dv) {
  const ScopedFlushDenormals flush;  // masked scores' exp
  Scratch& w = scratch();
  double flops = 0;
  for (int64_t k0 = 0; k0 < ck; k0 += tiles.block_kv) {
    const int64_t tk = std::min<int64_t>(tiles.block_kv, ck - k0);
    const CMap kt(k + k0 * d, tk, d), vt(v + k0 * d, tk, d);
    MMap dkt(dk + k0 * d, tk, d), dvt(dv + k0 * d, tk, d);
    for (int64_t q0 = 0; q0 < cq; q0 += tiles.block_q) {
      const int64_t tq = std::min<int64_t>(tiles.block_q, cq - q0);
      const TileMask mask = classify(q_tok + q0, tq, k_tok + k0, tk, tiles);
      if (mask == TileMask::kHidden) continue;  // other query tiles may see this one
      const CMap qt(q + q0 * d, tq, d), dot(dout + q0 * d, tq, d);
      const Eigen::Map<const Vec> lse_t(lse + q0, tq), d_t(D + q0, tq);
      w.s.noalias() = (qt * scale) * kt.transpose();
      if (mask == TileMask::kPartial) apply_mask(w.s, q_tok + q0, k_tok + k0, tiles.window);
      // P from the forward pass's lse (every query sees at least itself, so lse is finite).
      exp_rows_minus(w.s, lse_t);  // s becomes P
      dvt.noalias() += w.s.transpose() * dot;
      w.dp.noalias() = dot * vt.transpose();
      for (Eigen::Index i = 0; i < tq; ++i)  // dS = P (dP - D), row by row (contiguous)
        w.dp.row(i).array() = w.s.row(i).array() * (w.dp.row(i).array() - d_t[i]);
      MMap(dq + q0 * d, tq, d).noalias() += scale * (w.dp * kt);
      dkt.noalias() += scale * (w.dp.transpose() * qt);
      flops += 10.0 * static_cast<double>(tq) * static_cast<double>(tk) * d;
      if (tiles.between_tiles) tiles.between_tiles();
    }
  }
  return flops;
}

}  // namespace rm::exec
