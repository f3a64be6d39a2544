// The cpu backend's blockwise kernels against the fp64 reference, in one process: the
// query and key tokens are split into blocks as a ring would hold them, each block pair
// goes through the kernels, and the (out, lse) merge and dK, dV sums must reproduce the
// dense attention.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "executor/backend.h"
#include "executor/cpu_attention.h"
#include "executor/flush_denormals.h"
#include "executor/reference_attention.h"

namespace rm::exec {
namespace {

struct Case {
  int64_t n;
  int d, h, h_kv;
  int blocks;   // ring positions
  bool zigzag;  // token layout of the blocks
  bool causal;
  int bq, bkv;
  int64_t window = 0;  // causal sliding window (0 = none)
};

// Tokens held by block `b`: contiguous, or zigzag (chunks b and 2P-1-b).
std::vector<int64_t> block_tokens(const Case& cs, int b) {
  const int64_t c = cs.n / cs.blocks;
  std::vector<int64_t> t;
  if (!cs.zigzag) {
    for (int64_t i = 0; i < c; ++i) t.push_back(b * c + i);
  } else {
    const int64_t half = c / 2;
    for (int64_t i = 0; i < half; ++i) t.push_back(b * half + i);
    for (int64_t i = 0; i < half; ++i) t.push_back((2 * cs.blocks - 1 - b) * half + i);
  }
  return t;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err = std::max(err, std::abs(got[i] - ref[i]));
    mx = std::max(mx, std::abs(ref[i]));
  }
  return err / mx;
}

// Runs every (query block, kv block) pair through the kernels and compares the
// assembled out, lse, dq, dk, dv with the reference; returns the worst relative error.
double run_case(const Case& cs) {
  const int d = cs.d;
  const int64_t n = cs.n, c = n / cs.blocks;
  const int group = cs.h / cs.h_kv;
  const uint64_t seed = 7;
  // Global tensors, head-major [heads][n][d].
  auto global = [&](InputTensor which, int heads) {
    std::vector<double> x(static_cast<size_t>(heads) * n * d);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t t = 0; t < n; ++t)
        for (int j = 0; j < d; ++j) x[(hh * n + t) * d + j] = input_value(seed, which, hh, t, j);
    return x;
  };
  const auto q = global(InputTensor::kQ, cs.h), k = global(InputTensor::kK, cs.h_kv),
             v = global(InputTensor::kV, cs.h_kv), dout = global(InputTensor::kDout, cs.h);
  const ReferenceResult ref =
      reference_attention({n, d, cs.h, cs.h_kv, cs.causal, cs.window}, q, k, v, dout, true);

  // One block's rows of a global tensor, as fp32 [c][d] for head hh.
  auto rows = [&](const std::vector<double>& x, int hh, const std::vector<int64_t>& tok) {
    std::vector<float> r(c * d);
    for (int64_t i = 0; i < c; ++i)
      for (int j = 0; j < d; ++j) r[i * d + j] = static_cast<float>(x[(hh * n + tok[i]) * d + j]);
    return r;
  };
  const TileShape tiles{cs.bq, cs.bkv, cs.causal, cs.window, {}};
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> out(ref.out.size()), lse(ref.lse.size()), dq(ref.dq.size()),
      dk(ref.dk.size(), 0.0f), dv(ref.dv.size(), 0.0f);
  for (int hh = 0; hh < cs.h; ++hh) {
    const int g = hh / group;
    for (int qb = 0; qb < cs.blocks; ++qb) {
      const auto qt = block_tokens(cs, qb);
      const auto qr = rows(q, hh, qt), dor = rows(dout, hh, qt);
      std::vector<float> o(c * d, 0.0f), l(c, -INFINITY), ob(c * d), lb(c);
      for (int kb = 0; kb < cs.blocks; ++kb) {
        const auto kt = block_tokens(cs, kb);
        attention_block_forward(qr.data(), qt.data(), c, rows(k, g, kt).data(),
                                rows(v, g, kt).data(), kt.data(), c, d, scale, tiles, ob.data(),
                                lb.data());
        merge_out_lse(o.data(), l.data(), ob.data(), lb.data(), c, d);
      }
      std::vector<float> D(c), dqb(c * d, 0.0f);
      for (int64_t i = 0; i < c; ++i) {
        double s = 0;
        for (int j = 0; j < d; ++j) s += double(dor[i * d + j]) * o[i * d + j];
        D[i] = static_cast<float>(s);
      }
      for (int kb = 0; kb < cs.blocks; ++kb) {
        const auto kt = block_tokens(cs, kb);
        std::vector<float> dkb(c * d, 0.0f), dvb(c * d, 0.0f);
        attention_block_backward(qr.data(), dor.data(), l.data(), D.data(), qt.data(), c,
                                 rows(k, g, kt).data(), rows(v, g, kt).data(), kt.data(), c, d,
                                 scale, tiles, dqb.data(), dkb.data(), dvb.data());
        for (int64_t i = 0; i < c; ++i)
          for (int j = 0; j < d; ++j) {
            dk[(g * n + kt[i]) * d + j] += dkb[i * d + j];
            dv[(g * n + kt[i]) * d + j] += dvb[i * d + j];
          }
      }
      for (int64_t i = 0; i < c; ++i) {
        lse[hh * n + qt[i]] = l[i];
        for (int j = 0; j < d; ++j) {
          out[(hh * n + qt[i]) * d + j] = o[i * d + j];
          dq[(hh * n + qt[i]) * d + j] = dqb[i * d + j];
        }
      }
    }
  }
  const double errs[] = {rel_err(out, ref.out), rel_err(lse, ref.lse), rel_err(dq, ref.dq),
                         rel_err(dk, ref.dk), rel_err(dv, ref.dv)};
  std::printf("n=%lld d=%d h=%d h_kv=%d P=%d %s %s window %lld tiles %dx%d: out %.1e lse %.1e dq %.1e "
              "dk %.1e dv %.1e\n",
              static_cast<long long>(n), d, cs.h, cs.h_kv, cs.blocks,
              cs.zigzag ? "zigzag" : "contiguous", cs.causal ? "causal" : "full",
              static_cast<long long>(cs.window), cs.bq, cs.bkv, errs[0], errs[1], errs[2], errs[3], errs[4]);
  return *std::max_element(std::begin(errs), std::end(errs));
}

TEST_CASE("single block, non-causal, one tile: kernels match the fp64 reference") {
  CHECK(run_case({64, 16, 1, 1, 1, false, false, 64, 64}) < 1e-5);
}

TEST_CASE("a sliding window masks the band's edge inside tiles and skips tiles before it") {
  // Windows shorter than a tile, spanning several, and not a multiple of any; one block
  // and rings of 4 (contiguous and zigzag), so tiles are hidden before the window, partly
  // in it and whole inside it. A query always sees itself, so no row is empty.
  for (int64_t window : {5, 13, 40, 95}) {
    CAPTURE(window);
    CHECK(run_case({96, 16, 2, 1, 1, false, true, 20, 12, window}) < 1e-5);
    CHECK(run_case({128, 16, 2, 2, 4, false, true, 8, 16, window}) < 1e-5);
    CHECK(run_case({128, 16, 4, 2, 4, true, true, 16, 8, window}) < 1e-5);
  }
}

TEST_CASE("causal diagonal tiles are masked inside and skipped above the diagonal") {
  // Tiles smaller than the block, not dividing it: partial, hidden and visible tiles.
  CHECK(run_case({96, 16, 2, 2, 1, false, true, 20, 12}) < 1e-5);
}

TEST_CASE("the (out, lse) merge over ring blocks reproduces dense attention") {
  CHECK(run_case({128, 32, 2, 2, 4, false, false, 16, 16}) < 1e-5);
  CHECK(run_case({128, 32, 2, 2, 4, false, true, 16, 16}) < 1e-5);  // fully masked blocks
}

TEST_CASE("zigzag blocks: causal mask by global token index") {
  CHECK(run_case({128, 16, 2, 2, 4, true, true, 8, 16}) < 1e-5);
}

TEST_CASE("GQA: query heads share a kv head and dK, dV sum over the group") {
  CHECK(run_case({64, 16, 4, 2, 2, false, true, 16, 16}) < 1e-5);
  CHECK(run_case({64, 16, 4, 1, 2, true, false, 16, 16}) < 1e-5);
}

TEST_CASE("the reference over several of its 256-row blocks agrees with the kernels") {
  // The reference scores 256 query rows at a time against the keys they may see: rows past
  // the first block, a partial last block, GQA sums across threads, and windows that reach
  // back over a block boundary.
  CHECK(run_case({600, 8, 4, 2, 2, false, false, 64, 64}) < 1e-5);
  CHECK(run_case({600, 8, 4, 2, 2, true, true, 64, 64}) < 1e-5);
  for (int64_t window : {100, 300}) {
    CAPTURE(window);
    CHECK(run_case({600, 8, 4, 2, 2, false, true, 64, 32, window}) < 1e-5);
  }
}

TEST_CASE("a block whose keys are all hidden contributes nothing to the merge") {
  const int d = 4;
  const std::vector<int64_t> qt{0, 1}, kt{5, 6};
  std::vector<float> q(2 * d, 0.5f), k(2 * d, 0.5f), v(2 * d, 1.0f), o(2 * d, 9.0f), l(2, 0.0f);
  const double flops = attention_block_forward(q.data(), qt.data(), 2, k.data(), v.data(),
                                               kt.data(), 2, d, 0.5f, {8, 8, true, 0, {}}, o.data(),
                                               l.data());
  CHECK(flops == 0.0);
  CHECK(std::isinf(l[0]));
  CHECK(l[0] < 0);
  std::vector<float> out(2 * d, 3.0f), lse(2, 1.0f);
  merge_out_lse(out.data(), lse.data(), o.data(), l.data(), 2, d);
  CHECK(out[0] == 3.0f);
  CHECK(lse[1] == 1.0f);
}

TEST_CASE("keys no query may see get exactly zero dK and dV, and the caller's float mode comes back") {
  // One partial tile: keys 2 and 3 lie after both queries. Eigen's SSE and AVX2 exp turn
  // their masked scores into exp(-88.7) = 2.9e-39, a denormal that costs a microcode assist
  // in every product it enters; the kernels flush it to 0 (flush_denormals.h), so these
  // rows stay exactly 0 where they would hold denormals.
  const int d = 4;
  const std::vector<int64_t> qt{0, 1}, kt{0, 1, 2, 3};
  std::vector<float> q(2 * d, 0.5f), k(4 * d, 0.5f), v(4 * d, 1.0f), dout(2 * d, 1.0f);
  std::vector<float> o(2 * d), l(2), D(2, 0.0f), dq(2 * d, 0.0f), dk(4 * d, 0.0f), dv(4 * d, 0.0f);
  const TileShape tiles{8, 8, true, 0, {}};
#if defined(__SSE2__)
  const unsigned mode = _mm_getcsr();
#endif
  attention_block_forward(q.data(), qt.data(), 2, k.data(), v.data(), kt.data(), 4, d, 0.5f, tiles,
                          o.data(), l.data());
  attention_block_backward(q.data(), dout.data(), l.data(), D.data(), qt.data(), 2, k.data(),
                           v.data(), kt.data(), 4, d, 0.5f, tiles, dq.data(), dk.data(), dv.data());
#if defined(__SSE2__)
  CHECK(_mm_getcsr() == mode);
#endif
  CHECK(dv[d] != 0.0f);  // key 1: query 1 sees it
  for (int j = 2 * d; j < 4 * d; ++j) {
    CAPTURE(j);
    CHECK(dv[j] == 0.0f);
    CHECK(dk[j] == 0.0f);
  }
}

TEST_CASE("input_value is deterministic, lies between -1 and 1, and differs across tensors") {
  CHECK(input_value(1, InputTensor::kQ, 0, 5, 3) == input_value(1, InputTensor::kQ, 0, 5, 3));
  CHECK(input_value(1, InputTensor::kQ, 0, 5, 3) != input_value(1, InputTensor::kK, 0, 5, 3));
  CHECK(input_value(1, InputTensor::kQ, 0, 5, 3) != input_value(2, InputTensor::kQ, 0, 5, 3));
  double lo = 1, hi = -1;
  for (int t = 0; t < 1000; ++t) {
    const float x = input_value(3, InputTensor::kV, 1, t, 0);
    lo = std::min<double>(lo, x);
    hi = std::max<double>(hi, x);
  }
  CHECK(lo >= -1.0);
  CHECK(hi < 1.0);
  CHECK(hi - lo > 1.5);
}

}  // namespace
}  // namespace rm::exec
