// Attention work closed forms against brute-force counts over tokens and tiles.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/schedule.h"

using namespace rm;

namespace {

ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "t";
  m.layers = 2;
  m.hidden = 64;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 16;
  m.ffn_hidden = 128;
  m.vocab = 100;
  m.gated_ffn = true;
  return m;
}

// Brute force: walk every token pair and every tile of the kernel's tiling. Zigzag is
// tiled per half-chunk (as in attention_work.h), the others over the whole local block.
struct Brute {
  int64_t useful = 0, executed = 0;
};

Brute brute(const TokenLayout& L, int q, int kv, bool causal, int bq, int bkv, int64_t window = 0) {
  const int64_t c = L.tokens_per_rank();
  auto allowed = [&](int64_t lq, int64_t lk) {
    const int64_t gq = L.global_index(q, lq), gk = L.global_index(kv, lk);
    return !causal || (gq >= gk && (window == 0 || gq - gk < window));
  };
  Brute b;
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j) b.useful += allowed(i, j);
  // Segments the kernel tiles separately.
  std::vector<std::pair<int64_t, int64_t>> segs;
  if (L.lb == LoadBalance::kZigzag) segs = {{0, c / 2}, {c / 2, c}};
  else segs = {{0, c}};
  for (auto [q0, q1] : segs) {
    for (auto [k0, k1] : segs) {
      const int64_t tq = std::min<int64_t>(bq, q1 - q0), tk = std::min<int64_t>(bkv, k1 - k0);
      for (int64_t a = q0; a < q1; a += tq) {
        for (int64_t bb = k0; bb < k1; bb += tk) {
          const int64_t ae = std::min(a + tq, q1), be = std::min(bb + tk, k1);
          bool any = false;
          for (int64_t i = a; i < ae && !any; ++i)
            for (int64_t j = bb; j < be && !any; ++j) any = allowed(i, j);
          if (any) b.executed += (ae - a) * (be - bb);
        }
      }
    }
  }
  return b;
}

}  // namespace

TEST_CASE("token layouts hold a permutation of the sequence, increasing per position") {
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    TokenLayout L{lb, 48, 4};
    std::set<int64_t> seen;
    for (int p = 0; p < 4; ++p) {
      for (int64_t l = 0; l < L.tokens_per_rank(); ++l) {
        seen.insert(L.global_index(p, l));
        if (l > 0) CHECK(L.global_index(p, l) > L.global_index(p, l - 1));
      }
    }
    CHECK(seen.size() == 48);
    CHECK(*seen.rbegin() == 47);
  }
  TokenLayout z{LoadBalance::kZigzag, 16, 2};  // chunks of 4: position 0 holds 0 and 3
  CHECK(z.global_index(0, 4) == 12);
  CHECK(z.global_index(1, 0) == 4);
  CHECK(z.global_index(1, 4) == 8);
}

TEST_CASE("divisibility per load balance") {
  CHECK_NOTHROW(TokenLayout::check_divisible(LoadBalance::kStriped, 12, 4, "x"));
  CHECK_THROWS_AS(TokenLayout::check_divisible(LoadBalance::kZigzag, 12, 4, "x"), InputError);
  CHECK_NOTHROW(TokenLayout::check_divisible(LoadBalance::kZigzag, 16, 4, "x"));
  CHECK_THROWS_AS(TokenLayout::check_divisible(LoadBalance::kContiguous, 10, 4, "x"), InputError);
}

TEST_CASE("pair FLOPs match brute force for every layout, tile and mask") {
  const int heads = 3, d = 8;
  const double per_pair = 4.0 * d * heads;
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    for (int P : {1, 2, 3, 4}) {
      for (int64_t c : {8, 12, 20}) {
        TokenLayout L{lb, c * P, P};
        for (const auto& tiles : {std::pair{4, 4}, {3, 5}, {8, 2}, {64, 64}, {6, 4}}) {
          const int bq = tiles.first, bkv = tiles.second;  // not a structured binding: clang 14 cannot capture one
          for (bool causal : {true, false}) {
            for (int q = 0; q < P; ++q) {
              for (int kv = 0; kv < P; ++kv) {
                const Brute b = brute(L, q, kv, causal, bq, bkv);
                const PairFlops f = attention_pair_flops(L, q, kv, causal, heads, d, {bq, bkv});
                INFO("lb=" << static_cast<int>(lb) << " P=" << P << " c=" << c << " tiles=" << bq
                           << "x" << bkv << " causal=" << causal << " q=" << q << " kv=" << kv);
                CHECK(f.useful == doctest::Approx(per_pair * b.useful));
                CHECK(f.executed == doctest::Approx(per_pair * b.executed));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("ring summary: step maxima and totals match the pairs") {
  const int heads = 2, d = 4;
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    for (int P : {1, 2, 5, 8}) {
      for (bool causal : {true, false}) {
        TokenLayout L{lb, 16 * P, P};
        const AttentionTiles t{4, 8};
        const RingAttentionWork w = ring_attention_work(L, causal, heads, d, t);
        double useful = 0, executed = 0;
        for (int s = 0; s < P; ++s) {
          double mx = 0;
          for (int i = 0; i < P; ++i) {
            const PairFlops f = attention_pair_flops(L, i, ((i - s) % P + P) % P, causal, heads, d, t);
            mx = std::max(mx, f.executed);
            useful += f.useful;
            executed += f.executed;
          }
          CHECK(mx == doctest::Approx(s == 0 ? w.own_executed_max : w.step_executed_max));
        }
        CHECK(useful == doctest::Approx(w.useful_total));
        CHECK(executed == doctest::Approx(w.executed_total));
      }
    }
  }
}

TEST_CASE("sliding window: pair FLOPs match brute force, ring steps and totals match the pairs, the busiest position's work") {
  const int heads = 2, d = 4;
  const double per_pair = 4.0 * d * heads;
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    for (int P : {1, 2, 3, 5}) {
      for (int64_t c : {8, 12}) {
        TokenLayout L{lb, c * P, P};
        for (int64_t W : {1, 2, 5, 9, 13, 30}) {
          for (const auto& tiles : {std::pair{4, 4}, {3, 5}, {8, 2}}) {
            const int bq = tiles.first, bkv = tiles.second;  // INFO's lambda: clang 14 cannot capture bindings
            const AttentionTiles t{bq, bkv};
            double executed = 0, useful = 0;
            int last_needed = 0;
            std::vector<double> step_max(P, 0.0), work(P * P, 0.0);  // work[position][step]
            for (int q = 0; q < P; ++q) {
              for (int kv = 0; kv < P; ++kv) {
                const Brute b = brute(L, q, kv, true, bq, bkv, W);
                const PairFlops f = attention_pair_flops(L, q, kv, true, heads, d, t, W);
                INFO("lb=" << static_cast<int>(lb) << " P=" << P << " c=" << c << " W=" << W << " tiles="
                           << bq << "x" << bkv << " q=" << q << " kv=" << kv);
                CHECK(f.useful == doctest::Approx(per_pair * b.useful));
                CHECK(f.executed == doctest::Approx(per_pair * b.executed));
                const int s = ((q - kv) % P + P) % P;
                step_max[s] = std::max(step_max[s], f.executed);
                work[q * P + s] = f.executed;
                if (f.executed > 0) last_needed = std::max(last_needed, s);
                executed += f.executed;
                useful += f.useful;
              }
            }
            const RingAttentionWork w = ring_attention_work(L, true, heads, d, t, W);
            INFO("lb=" << static_cast<int>(lb) << " P=" << P << " c=" << c << " W=" << W);
            CHECK(w.steps == last_needed + 1);
            // Contiguous: the last position does the most at every step. Striped and zigzag:
            // positions differ by step under a window, and the ring follows the one with the
            // most work in all (the first such).
            std::vector<double> expected = step_max;
            if (lb != LoadBalance::kContiguous) {
              int busiest = 0;
              double most = -1;
              for (int q = 0; q < P; ++q) {
                double sum = 0;
                for (int s = 0; s < P; ++s) sum += work[q * P + s];
                if (sum > most) most = sum, busiest = q;
              }
              expected.assign(work.begin() + busiest * P, work.begin() + (busiest + 1) * P);
            }
            CHECK(w.own_executed_max == doctest::Approx(expected[0]));
            REQUIRE(w.step_executed.size() == static_cast<size_t>(w.steps - 1));
            for (int s = 1; s < w.steps; ++s) CHECK(w.step_executed[s - 1] == doctest::Approx(expected[s]));
            CHECK(w.executed_total == doctest::Approx(executed));
            if (W < c * P) CHECK(w.useful_total == doctest::Approx(useful));
          }
        }
      }
    }
  }
  // Mistral's 4096-token window at 32K on a ring of 8 (c = 4K): the own block and one
  // neighbour's, so 2 steps of 8; ceil((W-1)/c) + 1.
  CHECK(window_blocks(4096, 4096, 8) == 2);
  CHECK(window_blocks(4096, 4097, 8) == 2);
  CHECK(window_blocks(4096, 4098, 8) == 3);
  CHECK(window_blocks(4096, 0, 8) == 8);
  CHECK(attention_pairs(10, true, 4) == 4 * 5 / 2 + 6 * 4);
  CHECK(attention_pairs(10, true, 0) == 55);
}

TEST_CASE("hand-computed cases") {
  // Contiguous causal diagonal block, c = 4, tiles 2x2: tiles (0,0) (1,0) (1,1) run, (0,1)
  // is masked: 12 executed pairs, 10 useful; x 4·d·h with d = 1, h = 1.
  TokenLayout L{LoadBalance::kContiguous, 8, 2};
  PairFlops f = attention_pair_flops(L, 0, 0, true, 1, 1, {2, 2});
  CHECK(f.useful == 40);
  CHECK(f.executed == 48);
  // Off-diagonal below: full 16 pairs; above: nothing.
  CHECK(attention_pair_flops(L, 1, 0, true, 1, 1, {2, 2}).executed == 64);
  CHECK(attention_pair_flops(L, 0, 1, true, 1, 1, {2, 2}).executed == 0);
  // Zigzag off-own pairs are half a block: c²/2 = 8 pairs.
  TokenLayout Z{LoadBalance::kZigzag, 8, 2};
  CHECK(attention_pair_flops(Z, 0, 1, true, 1, 1, {2, 2}).useful == 32);
  CHECK(attention_pair_flops(Z, 1, 0, true, 1, 1, {2, 2}).useful == 32);
  // Big sizes stay exact and fast: 1M tokens on one position, causal, 128x128 tiles.
  TokenLayout big{LoadBalance::kContiguous, 1 << 20, 1};
  const PairFlops b = attention_pair_flops(big, 0, 0, true, 1, 1, {128, 128});
  const double n = 1 << 20;
  CHECK(b.useful == doctest::Approx(4 * n * (n + 1) / 2));
  // 8192 row tiles, tile t runs t+1 tiles of 128x128.
  CHECK(b.executed == doctest::Approx(4.0 * 128 * 128 * 8192.0 * 8193 / 2));
}

TEST_CASE("bytes and linear FLOPs") {
  const ModelSpec m = tiny_model();
  CHECK(kv_block_bytes(100, m, 2) == 2.0 * 100 * 16 * 2 * 2);
  CHECK(dkv_block_bytes(100, m) == 2.0 * 100 * 16 * 2 * 4);
  const LinearFlops f = linear_flops_per_token(m);
  CHECK(f.qkv == 2.0 * 64 * (64 + 2 * 32));
  CHECK(f.out_proj == 2.0 * 64 * 64);
  CHECK(f.ffn == 2.0 * 3 * 64 * 128);
  CHECK(f.logits == 2.0 * 64 * 100);
  // Linear FLOPs of a layer are 2 x its parameters (one multiply-add per weight per token).
  CHECK(f.layer() == doctest::Approx(2 * m.layer_params()));
  CHECK(linear_recompute_flops_per_token(m, Checkpointing::kNone) == 0);
  CHECK(linear_recompute_flops_per_token(m, Checkpointing::kSelective) == 2.0 * 2 * 64 * 128);
  CHECK(linear_recompute_flops_per_token(m, Checkpointing::kFull) == f.layer());
}
