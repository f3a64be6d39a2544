// Closed forms for the attention work of a block pair (see attention_work.h).
//
// Every pair reduces to sub-blocks of R query rows x C key columns in which query row l
// (local index) may attend key column m iff m <= l + k, for a shift k:
//   contiguous  one R=C=c sub-block, k = (q_pos - kv_pos)·c
//   striped     one R=C=c sub-block, k = 0 if kv_pos <= q_pos else -1
//               (global q = l·P + q_pos, kv = m·P + kv_pos)
//   zigzag      four c/2 sub-blocks (chunk i and 2P-1-i on each side), each full,
//               empty or diagonal (k = 0)
//   no mask     k = +infinity (everything)
#include "planner/attention_work.h"

#include "planner/linear_precision.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace rm {

namespace {

constexpr int64_t kAll = std::numeric_limits<int64_t>::max() / 4;

int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

// sum_{t=0}^{n-1} floor((a·t + b) / m) for n, m > 0 and a, b >= 0 (AtCoder Library's
// floor_sum, O(log)).
int64_t floor_sum(int64_t n, int64_t m, int64_t a, int64_t b) {
  int64_t ans = 0;
  while (true) {
    if (a >= m) {
      ans += (n - 1) * n / 2 * (a / m);
      a %= m;
    }
    if (b >= m) {
      ans += n * (b / m);
      b %= m;
    }
    const int64_t y_max = a * n + b;
    if (y_max < m) break;
    n = y_max / m;
    b = y_max % m;
    std::swap(m, a);
  }
  return ans;
}

// Unmasked pairs: sum over rows l of clamp(l + k + 1, 0, C).
int64_t useful_pairs(int64_t R, int64_t C, int64_t k) {
  if (k >= C) return R * C;
  // Rows with l + k + 1 <= 0 contribute 0; rows with l + k + 1 >= C contribute C.
  const int64_t first = std::clamp<int64_t>(-k, 0, R);         // first row with >= 1 column
  const int64_t full_from = std::clamp<int64_t>(C - 1 - k, 0, R);  // first row with C columns
  int64_t sum = (R - full_from) * C;
  if (full_from > first) {
    // Arithmetic series of (l + k + 1) for l in [first, full_from).
    const int64_t lo = first + k + 1, hi = full_from - 1 + k + 1;
    sum += (lo + hi) * (full_from - first) / 2;
  }
  return sum;
}

// Sum over row tiles t = 0..nq-1 (rows t·bq .. t·bq+bq-1), times bq rows, of the columns
// covered by the kv tiles counted for the argument a_t = t·bq + b: (floor(a_t / bkv) + o)
// whole tiles of bkv columns while a_t < full_from, all C columns from there (o in {0, 1};
// none while that count is < 1). O(log) with floor_sum.
int64_t tile_columns_sum(int64_t nq, int64_t bq, int64_t b, int64_t o, int64_t bkv, int64_t full_from,
                         int64_t C) {
  if (nq <= 0) return 0;
  auto first_t_with_arg_at_least = [&](int64_t v) {  // smallest t with t·bq + b >= v
    const int64_t t = -floor_div(-(v - b), bq);        // ceil((v - b) / bq)
    return std::clamp<int64_t>(t, 0, nq);
  };
  const int64_t t0 = first_t_with_arg_at_least((1 - o) * bkv);
  const int64_t t1 = std::max(t0, first_t_with_arg_at_least(full_from));
  int64_t sum = 0;
  if (t1 > t0) {
    // sum_{t=t0}^{t1-1} (floor((t·bq + b)/bkv) + o) · bkv, argument >= 0 on this range.
    const int64_t n = t1 - t0;
    const int64_t s = floor_sum(n, bkv, bq, t0 * bq + b) + o * n;
    sum += bq * s * bkv;
  }
  return sum + (nq - t1) * bq * C;
}

// The columns of tile_columns_sum for one argument.
int64_t tile_columns(int64_t arg, int64_t o, int64_t bkv, int64_t full_from, int64_t C) {
  if (arg >= full_from) return C;
  const int64_t x = floor_div(arg, bkv) + o;
  return x <= 0 ? 0 : x * bkv;
}

// Pairs a tiled kernel computes for rows l attending columns m with
// l + k_lo < m <= l + k_hi (k_lo = kNoLower: no lower bound). A kv tile is run when it
// holds at least one allowed pair: for a row tile, tiles up to its last row's upper bound,
// less the tiles wholly left of its first row's lower bound.
constexpr int64_t kNoLower = std::numeric_limits<int64_t>::min() / 4;
int64_t executed_pairs(int64_t R, int64_t C, int64_t k_hi, int64_t k_lo, int64_t bq, int64_t bkv) {
  const int64_t ntkv = (C + bkv - 1) / bkv;
  const int64_t nq = R / bq;  // full row tiles
  const int64_t rest = R - nq * bq;
  int64_t sum = 0;
  if (k_hi >= C) {
    sum = R * C;
  } else {
    // Tile j runs when it starts at or before the last row's bound: j·bkv <= last + k_hi,
    // floor((last + k_hi) / bkv) + 1 tiles; all of them (the last one ragged) once
    // last + k_hi >= (ntkv - 1)·bkv. Last row of tile t: t·bq + bq - 1.
    const int64_t full = (ntkv - 1) * bkv;
    sum = tile_columns_sum(nq, bq, bq - 1 + k_hi, 1, bkv, full, C);
    if (rest > 0) sum += rest * tile_columns(R - 1 + k_hi, 1, bkv, full, C);
  }
  if (k_lo != kNoLower) {
    // Tile j is wholly left of the first row's bound when its last column is <= first +
    // k_lo: (j+1)·bkv <= first + k_lo + 1 for whole tiles, and every tile (the ragged one
    // too) once first + k_lo + 1 >= C.
    sum -= tile_columns_sum(nq, bq, k_lo + 1, 0, bkv, C, C);
    if (rest > 0) sum -= rest * tile_columns(nq * bq + k_lo + 1, 0, bkv, C, C);
  }
  return sum;
}

struct Pairs {
  int64_t useful = 0, executed = 0;
  // Rows l attend columns m with l + k_lo < m <= l + k_hi.
  void add(int64_t R, int64_t C, int64_t k_hi, int64_t k_lo, const AttentionTiles& t) {
    // A band at least one column wide covers, over a row tile's rows, one contiguous run
    // of columns (what executed_pairs counts); an empty band covers none.
    if (k_lo != kNoLower && k_lo >= k_hi) return;
    useful += useful_pairs(R, C, k_hi) - (k_lo == kNoLower ? 0 : useful_pairs(R, C, k_lo));
    executed += executed_pairs(R, C, k_hi, k_lo, std::min<int64_t>(t.block_q, R),
                               std::min<int64_t>(t.block_kv, C));
  }
};

// The lower bound for a sub-block whose global query - key offset is l - m + `shift`
// (contiguous rows and columns): a key is in the window when q - kv < W.
int64_t window_lower(int64_t shift, int64_t window) { return window > 0 ? shift - window : kNoLower; }

Pairs pair_counts(const TokenLayout& L, int q, int kv, bool causal, const AttentionTiles& t,
                  int64_t window) {
  const int64_t c = L.tokens_per_rank();
  Pairs p;
  if (!causal) {
    p.add(c, c, kAll, kNoLower, t);
    return p;
  }
  switch (L.lb) {
    case LoadBalance::kContiguous: {
      const int64_t k = static_cast<int64_t>(q - kv) * c;
      p.add(c, c, std::clamp<int64_t>(k, -2 * c, kAll), window_lower(k, window), t);
      break;
    }
    case LoadBalance::kStriped: {
      // Global q = l·P + q, kv = m·P + kv, dq = q - kv: in the window when
      // (l - m)·P + dq < W, i.e. m >= l - floor((W - 1 - dq) / P).
      const int64_t dq = q - kv;
      const int64_t lo = window > 0 ? -floor_div(window - 1 - dq, L.ring) - 1 : kNoLower;
      p.add(c, c, kv <= q ? 0 : -1, lo, t);
      break;
    }
    case LoadBalance::kZigzag: {
      const int64_t half = c / 2;
      const int64_t P2 = 2 * static_cast<int64_t>(L.ring);
      const int64_t q_chunks[2] = {q, P2 - 1 - q};
      const int64_t kv_chunks[2] = {kv, P2 - 1 - kv};
      for (int64_t qc : q_chunks) {
        for (int64_t kc : kv_chunks) {
          const int64_t k = (qc - kc) * half;
          if (qc > kc) p.add(half, half, window > 0 ? k : kAll, window_lower(k, window), t);
          else if (qc == kc) p.add(half, half, 0, window_lower(0, window), t);
        }
      }
      break;
    }
  }
  return p;
}

}  // namespace

PairFlops attention_pair_flops(const TokenLayout& layout, int q_pos, int kv_pos, bool causal,
                               int heads, int head_dim, const AttentionTiles& tiles, int64_t window) {
  const Pairs p = pair_counts(layout, q_pos, kv_pos, causal, tiles, causal ? window : 0);
  const double per_pair = 4.0 * head_dim * heads;
  return {per_pair * static_cast<double>(p.useful), per_pair * static_cast<double>(p.executed)};
}

namespace {

// A sliding window: the steps the ring needs and each step's largest work.
void windowed_steps(const TokenLayout& layout, const AttentionTiles& tiles, int64_t window,
                    double per_pair, RingAttentionWork& w) {
  const int P = layout.ring;
  double total = w.own_executed_max * P;
  if (layout.lb == LoadBalance::kContiguous) {
    // At step s >= 1 positions i >= s hold block i - s (positions i < s a future one).
    w.steps = window_blocks(layout.tokens_per_rank(), window, P);
    for (int s = 1; s < w.steps; ++s) {
      const Pairs p = pair_counts(layout, P - 1, P - 1 - s, true, tiles, window);
      w.step_executed.push_back(per_pair * static_cast<double>(p.executed));
      total += static_cast<double>(P - s) * w.step_executed.back();
    }
    for (int i = 0; i < P; ++i) {
      for (int s = 0; s < w.steps; ++s)
        w.position_step_executed.push_back(s == 0 ? w.own_executed_max : i >= s ? w.step_executed[s - 1] : 0.0);
    }
  } else {
    // Striped and zigzag spread the window over every block, and under it positions work at
    // different steps (zigzag's last position, whose two chunks touch, more at its own and
    // nothing at the last step): all pairs, O(P²). The ring runs until the last step at
    // which any position computes; the position with the most work stands for the ring's
    // compute (own and per-step work), and the cost model times the ring from every
    // position's (position_step_executed).
    total = 0;
    w.steps = 1;
    std::vector<double> work(static_cast<size_t>(P) * P);  // [position][step]
    for (int s = 0; s < P; ++s) {
      for (int i = 0; i < P; ++i) {
        const Pairs p = pair_counts(layout, i, (i - s + P) % P, true, tiles, window);
        work[static_cast<size_t>(i) * P + s] = per_pair * static_cast<double>(p.executed);
        total += work[static_cast<size_t>(i) * P + s];
        if (s > 0 && p.executed > 0) w.steps = std::max(w.steps, s + 1);
      }
    }
    int busiest = 0;
    double most = -1;
    for (int i = 0; i < P; ++i) {
      const double sum = std::accumulate(work.begin() + i * P, work.begin() + (i + 1) * P, 0.0);
      if (sum > most) most = sum, busiest = i;
    }
    for (int i = 0; i < P; ++i) {
      const auto row = work.begin() + static_cast<ptrdiff_t>(i) * P;
      w.position_step_executed.insert(w.position_step_executed.end(), row, row + w.steps);
    }
    const double* mine = &work[static_cast<size_t>(busiest) * P];
    w.own_executed_max = mine[0];
    w.step_executed.assign(mine + 1, mine + w.steps);
  }
  w.step_executed_max = w.step_executed.empty()
                            ? 0
                            : *std::max_element(w.step_executed.begin(), w.step_executed.end());
  w.executed_total = total;
}

}  // namespace

RingAttentionWork ring_attention_work(const TokenLayout& layout, bool causal, int heads,
                                      int head_dim, const AttentionTiles& tiles, int64_t window) {
  const int P = layout.ring;
  RingAttentionWork w;
  w.steps = P;
  const double per_pair = 4.0 * head_dim * heads;
  if (!causal) window = 0;
  // Step 0: every position has the same own-block work in every layout (position-free
  // shapes: contiguous and striped diagonal with k = 0, zigzag two diagonals + one full;
  // a window cuts each the same way).
  const Pairs own = pair_counts(layout, 0, 0, causal, tiles, window);
  w.own_executed_max = per_pair * static_cast<double>(own.executed);
  w.useful_total = per_pair * attention_pairs(layout.seq_len, causal, window);
  if (window > 0) {
    windowed_steps(layout, tiles, window, per_pair, w);
    return w;
  }
  if (P > 1) {
    // At s > 0 position P-1 holds block P-1-s < P-1: full (contiguous), k = 0 (striped),
    // two full quarters (zigzag: every position does the same). That is the largest
    // off-own pair, so it bounds every step s > 0.
    const Pairs off = pair_counts(layout, P - 1, 0, causal, tiles, 0);
    w.step_executed_max = per_pair * static_cast<double>(off.executed);
  }
  // Executed total: own blocks + off-own pairs by class. Below-diagonal pairs: P(P-1)/2;
  // above: the same number.
  const double below = 0.5 * P * (P - 1.0);
  if (!causal || P == 1) {
    w.executed_total = w.own_executed_max * P + (causal ? 0.0 : 2 * below * w.own_executed_max);
  } else {
    const Pairs lower = pair_counts(layout, P - 1, 0, causal, tiles, 0);
    const Pairs upper = pair_counts(layout, 0, P - 1, causal, tiles, 0);
    w.executed_total = per_pair * (static_cast<double>(own.executed) * P +
                                   below * static_cast<double>(lower.executed + upper.executed));
  }
  return w;
}

double attention_pairs(int64_t seq_len, bool causal, int64_t window) {
  const double n = static_cast<double>(seq_len);
  if (causal && window > 0 && window < seq_len) {
    // Query i attends min(i + 1, W) keys.
    const double W = static_cast<double>(window);
    return W * (W + 1) / 2 + (n - W) * W;
  }
  return causal ? n * (n + 1) / 2 : n * n;
}

ForwardMerge forward_merge(const TokenLayout& layout, bool causal, int q_pos, int kv_pos) {
  if (!causal || kv_pos <= q_pos) return {};
  if (layout.lb == LoadBalance::kStriped) return {1, true};
  if (layout.lb == LoadBalance::kZigzag) return {0.5, true};
  return {};
}

int window_blocks(int64_t c, int64_t window, int P) {
  // Block i - s's nearest pair to block i is (s-1)·c + 1 apart: needed while < W.
  if (window <= 0 || c <= 0) return P;
  return static_cast<int>(std::min<int64_t>(P, (window - 1 + c - 1) / c + 1));
}

int all_gather_blocks(const PlanChoice& choice, int64_t c, int64_t window) {
  const int P = std::max(1, choice.cp);
  return choice.load_balance == LoadBalance::kContiguous ? window_blocks(c, window, P) : P;
}

int64_t effective_window(const ModelSpec& m, const Job& job) {
  return job.causal && m.sliding_window > 0 && m.sliding_window < job.seq_len ? m.sliding_window : 0;
}

double kv_block_bytes(int64_t c, const ModelSpec& m, int element_bytes) {
  return 2.0 * static_cast<double>(c) * m.head_dim * m.attention_kv_heads() * element_bytes;
}

double dkv_block_bytes(int64_t c, const ModelSpec& m) {
  return 2.0 * static_cast<double>(c) * m.head_dim * m.attention_kv_heads() * 4.0;
}

LinearFlops linear_flops_per_token(const ModelSpec& m) {
  const double hid = m.hidden;
  const double q = static_cast<double>(m.heads) * m.head_dim;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim;
  LinearFlops f;
  f.qkv = 2 * hid * (q + 2 * kv);
  f.out_proj = 2 * q * hid;
  const double up_mats = m.gated_ffn ? 2.0 : 1.0;  // gate + up, or up
  f.ffn = 2 * (up_mats + 1) * hid * m.ffn_hidden;
  f.ffn_recompute_selective = 2 * up_mats * hid * m.ffn_hidden;
  f.logits = 2 * hid * m.vocab;
  return f;
}

double linear_recompute_flops_per_token(const ModelSpec& m, Checkpointing ckpt) {
  const LinearFlops f = linear_flops_per_token(m);
  switch (ckpt) {
    case Checkpointing::kNone: return 0;
    case Checkpointing::kSelective: return f.ffn_recompute_selective;
    case Checkpointing::kFull: return f.layer();
  }
  return 0;
}

ElementwiseBytes elementwise_bytes_per_token(const ModelSpec& m, int element_bytes, bool eager, Fp8Recipe fp8) {
  const double e = element_bytes;
  const double H = m.hidden;
  const double qk = static_cast<double>(m.heads + m.kv_heads) * m.head_dim;
  const double act = m.gated_ffn ? 3.0 * m.ffn_hidden : 2.0 * m.ffn_hidden;
  ElementwiseBytes b;
  b.layer_fwd = e * (2 * 2 * H + 2 * 3 * H + 2 * qk + act);
  if (eager) {
    const double hd = static_cast<double>(m.heads) * m.head_dim;
    const double kvd = static_cast<double>(m.kv_heads) * m.head_dim;
    const double repeat_kv = m.kv_heads < m.heads ? 2 * e * (kvd + hd) : 0;  // K and V
    const double ffn = m.gated_ffn ? 10.0 * m.ffn_hidden : e * act;
    b.layer_fwd = 2 * 36 * H + e * 2 * 3 * H + 20 * qk + repeat_kv + 2 * e * hd + ffn;
  }
  static_assert(1 + kElementwiseBackwardFactor == 3, "a third of the casts per charge of layer_fwd");
  b.layer_fwd += fp8_cast_bytes_per_token_layer(m, fp8) / 3;
  b.loss_fwd = 10.0 * m.vocab;
  b.loss_bwd = 4.0 * m.vocab;
  return b;
}

TokenStepWork token_step_work(const ModelSpec& m, Checkpointing ckpt, int element_bytes) {
  const LinearFlops lf = linear_flops_per_token(m);
  const ElementwiseBytes ewb = elementwise_bytes_per_token(m, element_bytes);
  const double recompute_ew = ckpt == Checkpointing::kFull ? 1.0 : 0.0;
  TokenStepWork w;
  w.gemm_flops = m.layers * (lf.layer() * (1 + kLinearBackwardFactor) +
                             linear_recompute_flops_per_token(m, ckpt)) +
                 3 * lf.logits;
  w.elementwise_bytes =
      m.layers * ewb.layer_fwd * (1 + kElementwiseBackwardFactor + recompute_ew) + ewb.loss_fwd +
      ewb.loss_bwd;
  return w;
}

}  // namespace rm
