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

#include <algorithm>
#include <limits>

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

// Columns a row tile computes: kv tiles j with j·bkv <= last_row + k are run (the tile
// holds at least one allowed pair), the last kv tile is ragged.
// Sum over the full row tiles t = 0..nq-1 of (bq rows x columns run), plus the ragged one.
int64_t executed_pairs(int64_t R, int64_t C, int64_t k, int64_t bq, int64_t bkv) {
  if (k >= C) return R * C;
  const int64_t ntkv = (C + bkv - 1) / bkv;
  // x(last) = number of kv tiles run by a row tile whose last row is `last`, clamped.
  auto cols_for_last_row = [&](int64_t last) -> int64_t {
    const int64_t x = floor_div(last + k, bkv) + 1;
    if (x <= 0) return 0;
    if (x >= ntkv) return C;
    return x * bkv;
  };
  const int64_t nq = R / bq;  // full row tiles
  int64_t sum = 0;
  if (nq > 0) {
    // x_t = floor((t·bq + bq - 1 + k) / bkv) + 1 for t in [0, nq), non-decreasing.
    // t0: first t with x_t >= 1; t1: first t with x_t >= ntkv.
    const int64_t b0 = bq - 1 + k;
    auto first_t_with_arg_at_least = [&](int64_t v) {  // smallest t with t·bq + b0 >= v
      const int64_t t = -floor_div(-(v - b0), bq);        // ceil((v - b0) / bq)
      return std::clamp<int64_t>(t, 0, nq);
    };
    const int64_t t0 = first_t_with_arg_at_least(0);
    const int64_t t1 = std::max(t0, first_t_with_arg_at_least((ntkv - 1) * bkv));
    if (t1 > t0) {
      // sum_{t=t0}^{t1-1} (floor((t·bq + b0)/bkv) + 1) · bkv, argument >= 0 on this range.
      const int64_t n = t1 - t0;
      const int64_t s = floor_sum(n, bkv, bq, t0 * bq + b0) + n;
      sum += bq * s * bkv;
    }
    sum += (nq - t1) * bq * C;
  }
  const int64_t rest = R - nq * bq;
  if (rest > 0) sum += rest * cols_for_last_row(R - 1);
  return sum;
}

struct Pairs {
  int64_t useful = 0, executed = 0;
  void add(int64_t R, int64_t C, int64_t k, const AttentionTiles& t) {
    useful += useful_pairs(R, C, k);
    executed += executed_pairs(R, C, k, std::min<int64_t>(t.block_q, R), std::min<int64_t>(t.block_kv, C));
  }
};

Pairs pair_counts(const TokenLayout& L, int q, int kv, bool causal, const AttentionTiles& t) {
  const int64_t c = L.tokens_per_rank();
  Pairs p;
  if (!causal) {
    p.add(c, c, kAll, t);
    return p;
  }
  switch (L.lb) {
    case LoadBalance::kContiguous: {
      const int64_t k = static_cast<int64_t>(q - kv) * c;
      p.add(c, c, std::clamp<int64_t>(k, -2 * c, kAll), t);
      break;
    }
    case LoadBalance::kStriped:
      p.add(c, c, kv <= q ? 0 : -1, t);
      break;
    case LoadBalance::kZigzag: {
      const int64_t half = c / 2;
      const int64_t P2 = 2 * static_cast<int64_t>(L.ring);
      const int64_t q_chunks[2] = {q, P2 - 1 - q};
      const int64_t kv_chunks[2] = {kv, P2 - 1 - kv};
      for (int64_t qc : q_chunks) {
        for (int64_t kc : kv_chunks) {
          if (qc > kc) p.add(half, half, kAll, t);
          else if (qc == kc) p.add(half, half, 0, t);
        }
      }
      break;
    }
  }
  return p;
}

}  // namespace

PairFlops attention_pair_flops(const TokenLayout& layout, int q_pos, int kv_pos, bool causal,
                               int heads, int head_dim, const AttentionTiles& tiles) {
  const Pairs p = pair_counts(layout, q_pos, kv_pos, causal, tiles);
  const double per_pair = 4.0 * head_dim * heads;
  return {per_pair * static_cast<double>(p.useful), per_pair * static_cast<double>(p.executed)};
}

RingAttentionWork ring_attention_work(const TokenLayout& layout, bool causal, int heads,
                                      int head_dim, const AttentionTiles& tiles) {
  const int P = layout.ring;
  RingAttentionWork w;
  const double per_pair = 4.0 * head_dim * heads;
  // Step 0: every position has the same own-block work in every layout (position-free
  // shapes: contiguous and striped diagonal with k = 0, zigzag two diagonals + one full).
  const Pairs own = pair_counts(layout, 0, 0, causal, tiles);
  w.own_executed_max = per_pair * static_cast<double>(own.executed);
  if (P > 1) {
    // At s > 0 position P-1 holds block P-1-s < P-1: full (contiguous), k = 0 (striped),
    // two full quarters (zigzag: every position does the same). That is the largest
    // off-own pair, so it bounds every step s > 0.
    const Pairs off = pair_counts(layout, P - 1, 0, causal, tiles);
    w.step_executed_max = per_pair * static_cast<double>(off.executed);
  }
  w.useful_total = per_pair * attention_pairs(layout.seq_len, causal);
  // Executed total: own blocks + off-own pairs by class. Below-diagonal pairs: P(P-1)/2;
  // above: the same number.
  const double below = 0.5 * P * (P - 1.0);
  if (!causal || P == 1) {
    w.executed_total = w.own_executed_max * P + (causal ? 0.0 : 2 * below * w.own_executed_max);
  } else {
    const Pairs lower = pair_counts(layout, P - 1, 0, causal, tiles);
    const Pairs upper = pair_counts(layout, 0, P - 1, causal, tiles);
    w.executed_total = per_pair * (static_cast<double>(own.executed) * P +
                                   below * static_cast<double>(lower.executed + upper.executed));
  }
  return w;
}

double attention_pairs(int64_t seq_len, bool causal) {
  const double n = static_cast<double>(seq_len);
  return causal ? n * (n + 1) / 2 : n * n;
}

double kv_block_bytes(int64_t c, const ModelSpec& m, int element_bytes) {
  return 2.0 * static_cast<double>(c) * m.head_dim * m.kv_heads * element_bytes;
}

double dkv_block_bytes(int64_t c, const ModelSpec& m) {
  return 2.0 * static_cast<double>(c) * m.head_dim * m.kv_heads * 4.0;
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

ElementwiseBytes elementwise_bytes_per_token(const ModelSpec& m, int element_bytes) {
  const double e = element_bytes;
  const double H = m.hidden;
  const double qk = static_cast<double>(m.heads + m.kv_heads) * m.head_dim;
  const double act = m.gated_ffn ? 3.0 * m.ffn_hidden : 2.0 * m.ffn_hidden;
  ElementwiseBytes b;
  b.layer_fwd = e * (2 * 2 * H + 2 * 3 * H + 2 * qk + act);
  b.loss_fwd = 10.0 * m.vocab;
  b.loss_bwd = 4.0 * m.vocab;
  return b;
}

}  // namespace rm
