// The tensor-core kernels against the fp64 reference: the sequence is split into blocks
// as a ring holds them (contiguous, striped or zigzag tokens), every (query block, K,V
// block) pair goes through the GPU kernels (forward merged in place, dQ accumulated,
// dK, dV summed per block), and the assembled out, lse, dQ, dK, dV must match dense
// attention over the same bf16-rounded inputs. Each case prints its errors.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/calibration_bench.h"
#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/cuda_backend.h"
#include "executor/reference_attention.h"

namespace rm::gpu {
namespace {

// bf16 (round to nearest even) and back, for inputs the reference shares with the GPU.
uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

enum class Layout { kContiguous, kStriped, kZigzag };

struct Case {
  int64_t n;
  int d, h, h_kv;
  int blocks;
  Layout layout;
  bool causal;
  int bq, bkv;
};

std::vector<int64_t> block_tokens(const Case& cs, int b) {
  const int64_t c = cs.n / cs.blocks;
  std::vector<int64_t> t;
  for (int64_t i = 0; i < c; ++i) {
    if (cs.layout == Layout::kContiguous) t.push_back(b * c + i);
    if (cs.layout == Layout::kStriped) t.push_back(i * cs.blocks + b);
  }
  if (cs.layout == Layout::kZigzag) {
    const int64_t half = c / 2;
    for (int64_t i = 0; i < half; ++i) t.push_back(b * half + i);
    for (int64_t i = 0; i < half; ++i) t.push_back((2 * cs.blocks - 1 - b) * half + i);
  }
  return t;
}

template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { RM_CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc"); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) {
    RM_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    RM_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

double rel_err(const std::vector<double>& got, const std::vector<double>& ref, bool skip_inf) {
  double err = 0, mx = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (skip_inf && std::isinf(ref[i])) {
      if (!std::isinf(got[i])) return std::numeric_limits<double>::infinity();
      continue;
    }
    err = std::max(err, std::abs(got[i] - ref[i]));
    mx = std::max(mx, std::abs(ref[i]));
  }
  return mx > 0 ? err / mx : err;
}

// Runs the case; returns the worst relative error over out, lse, dq, dk, dv.
double run_case(const Case& cs) {
  const int d = cs.d;
  const int64_t n = cs.n, c = n / cs.blocks;
  const uint64_t seed = 11;
  // Global inputs [heads][n][d], rounded to bf16.
  auto global = [&](exec::InputTensor which, int heads) {
    std::vector<uint16_t> x(static_cast<size_t>(heads) * n * d);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t t = 0; t < n; ++t)
        for (int j = 0; j < d; ++j)
          x[(hh * n + t) * d + j] = bf16_bits(exec::input_value(seed, which, hh, t, j));
    return x;
  };
  const auto q = global(exec::InputTensor::kQ, cs.h), k = global(exec::InputTensor::kK, cs.h_kv),
             v = global(exec::InputTensor::kV, cs.h_kv), dout = global(exec::InputTensor::kDout, cs.h);
  auto as_double = [](const std::vector<uint16_t>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_value(x[i]);
    return r;
  };
  const exec::ReferenceResult ref = exec::reference_attention(
      {n, d, cs.h, cs.h_kv, cs.causal}, as_double(q), as_double(k), as_double(v), as_double(dout),
      true);

  // A block's rows of a global tensor, [heads][c][d] (or [heads][c] when d == 1).
  auto gather = [&](const std::vector<uint16_t>& x, int heads, const std::vector<int64_t>& tok) {
    std::vector<uint16_t> r(static_cast<size_t>(heads) * c * d);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < c; ++i)
        std::copy_n(&x[(hh * n + tok[i]) * d], d, &r[(hh * c + i) * d]);
    return r;
  };

  AttentionDims dims;
  dims.h = cs.h;
  dims.h_kv = cs.h_kv;
  dims.d = d;
  dims.c_q = dims.c_kv = static_cast<int>(c);
  dims.segments = cs.layout == Layout::kZigzag ? 2 : 1;
  dims.causal = cs.causal;
  dims.scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Tiles tiles{cs.bq, cs.bkv};

  std::vector<double> out(ref.out.size()), lse(ref.lse.size()), dq(ref.dq.size());
  std::vector<double> dk(ref.dk.size(), 0.0), dv(ref.dv.size(), 0.0);
  for (int b = 0; b < cs.blocks; ++b) {
    const auto qt = block_tokens(cs, b);
    const std::vector<int32_t> qt32(qt.begin(), qt.end());
    Dev<uint16_t> dq_in(gather(q, cs.h, qt)), ddo(gather(dout, cs.h, qt));
    Dev<int32_t> dqt(qt32);
    Dev<float> dout_acc(static_cast<size_t>(cs.h) * c * d), dlse(static_cast<size_t>(cs.h) * c);
    Dev<float> ddq(static_cast<size_t>(cs.h) * c * d), ddelta(static_cast<size_t>(cs.h) * c);
    Dev<float> ddk(static_cast<size_t>(cs.h_kv) * c * d), ddv(static_cast<size_t>(cs.h_kv) * c * d);
    fill(dout_acc.p, 0.f, dout_acc.n, nullptr);
    fill(dlse.p, -std::numeric_limits<float>::infinity(), dlse.n, nullptr);
    fill(ddq.p, 0.f, ddq.n, nullptr);
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1)
        attention_backward_prep(dims, reinterpret_cast<const bf16*>(ddo.p), dout_acc.p, ddelta.p,
                                nullptr);
      for (int j = 0; j < cs.blocks; ++j) {
        const auto kt = block_tokens(cs, j);
        const std::vector<int32_t> kt32(kt.begin(), kt.end());
        Dev<uint16_t> dk_in(gather(k, cs.h_kv, kt)), dv_in(gather(v, cs.h_kv, kt));
        Dev<int32_t> dkt(kt32);
        const auto* qp = reinterpret_cast<const bf16*>(dq_in.p);
        const auto* kp = reinterpret_cast<const bf16*>(dk_in.p);
        const auto* vp = reinterpret_cast<const bf16*>(dv_in.p);
        if (pass == 0) {
          attention_forward(dims, tiles, qp, kp, vp, dqt.p, dkt.p, dout_acc.p, dlse.p, true, nullptr);
          continue;
        }
        attention_backward(dims, qp, kp, vp, reinterpret_cast<const bf16*>(ddo.p), dlse.p,
                           ddelta.p, dqt.p, dkt.p, ddq.p, ddk.p, ddv.p, nullptr);
        const auto hk = ddk.get(), hv = ddv.get();
        for (int hh = 0; hh < cs.h_kv; ++hh)
          for (int64_t i = 0; i < c; ++i)
            for (int x = 0; x < d; ++x) {
              dk[(hh * n + kt[i]) * d + x] += hk[(hh * c + i) * d + x];
              dv[(hh * n + kt[i]) * d + x] += hv[(hh * c + i) * d + x];
            }
      }
    }
    RM_CUDA_CHECK(cudaDeviceSynchronize(), "test kernels");
    const auto ho = dout_acc.get(), hl = dlse.get(), hq = ddq.get();
    for (int hh = 0; hh < cs.h; ++hh)
      for (int64_t i = 0; i < c; ++i) {
        lse[hh * n + qt[i]] = hl[hh * c + i];
        for (int x = 0; x < d; ++x) {
          out[(hh * n + qt[i]) * d + x] = ho[(hh * c + i) * d + x];
          dq[(hh * n + qt[i]) * d + x] = hq[(hh * c + i) * d + x];
        }
      }
  }
  const double e[5] = {rel_err(out, ref.out, false), rel_err(lse, ref.lse, true),
                       rel_err(dq, ref.dq, false), rel_err(dk, ref.dk, false),
                       rel_err(dv, ref.dv, false)};
  std::printf(
      "n %5lld d %3d h %d/%d blocks %d %-10s %-10s tiles %3dx%-3d  rel err out %.1e lse %.1e "
      "dq %.1e dk %.1e dv %.1e\n",
      static_cast<long long>(n), d, cs.h, cs.h_kv, cs.blocks,
      cs.layout == Layout::kZigzag ? "zigzag" : cs.layout == Layout::kStriped ? "striped" : "contiguous",
      cs.causal ? "causal" : "non-causal", cs.bq, cs.bkv, e[0], e[1], e[2], e[3], e[4]);
  return *std::max_element(e, e + 5);
}

// bf16 inputs; P and dS rounded to bf16 before their products (cuda_backend.cc).
constexpr double kTolerance = 2e-2;

TEST_CASE("cuda kernels match the fp64 reference: contiguous, striped, zigzag: MHA and GQA") {
  const Case cases[] = {
      {512, 64, 4, 2, 2, Layout::kZigzag, true, 128, 128},
      {384, 128, 2, 2, 3, Layout::kContiguous, true, 64, 64},
      {300, 32, 4, 1, 1, Layout::kContiguous, false, 64, 128},
      {600, 64, 2, 1, 2, Layout::kZigzag, true, 128, 64},
      {512, 128, 4, 4, 4, Layout::kStriped, true, 128, 128},
      {256, 64, 8, 2, 2, Layout::kContiguous, false, 64, 64},
  };
  for (const Case& cs : cases) CHECK(run_case(cs) <= kTolerance);
}

TEST_CASE("merge_out_lse follows the log-sum-exp rule") {
  const int rows = 70, d = 40;
  std::vector<float> a(rows * d), b(rows * d), la(rows), lb(rows);
  for (int i = 0; i < rows * d; ++i) {
    a[i] = std::sin(0.1f * i);
    b[i] = std::cos(0.07f * i);
  }
  for (int r = 0; r < rows; ++r) {
    la[r] = r % 7 == 0 ? -std::numeric_limits<float>::infinity() : 0.3f * r - 5;
    lb[r] = r % 11 == 0 ? -std::numeric_limits<float>::infinity() : 4 - 0.2f * r;
  }
  Dev<float> da(a), db(b), dla(la), dlb(lb);
  merge_out_lse(da.p, dla.p, db.p, dlb.p, rows, d, nullptr);
  const auto out = da.get(), lse = dla.get();
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    const double x = la[r], y = lb[r];
    const double l = std::isinf(x) ? y : std::isinf(y) ? x : std::log(std::exp(x) + std::exp(y));
    if (std::isinf(l)) {
      CHECK(std::isinf(lse[r]));
      continue;
    }
    worst = std::max(worst, std::abs(lse[r] - l));
    for (int j = 0; j < d; ++j) {
      const double wa = std::isinf(x) ? 0 : std::exp(x - l), wb = std::isinf(y) ? 0 : std::exp(y - l);
      worst = std::max(worst, std::abs(out[r * d + j] - (a[r * d + j] * wa + b[r * d + j] * wb)));
    }
  }
  std::printf("merge_out_lse: max abs err %.1e\n", worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("calibrate's GPU grid asks for tiles and head dims the kernels run as asked") {
  for (bool small : {true, false}) {
    const exec::CalibrationGrid g = exec::CalibrationGrid::standard(small, 256, 512, true);
    for (auto [bq, bkv] : g.tiles) {
      const gpu::Tiles ran = gpu::forward_tiles({bq, bkv});
      CHECK(ran.block_q == bq);
      CHECK(ran.block_kv == bkv);
    }
    for (int d : g.head_dims) CHECK(gpu::head_dim_supported(d));
    CHECK(*std::min_element(g.tokens.begin(), g.tokens.end()) >= 2048);
  }
}

TEST_CASE("kernel timing with CUDA events gives positive times and FLOP rates") {
  cudaDeviceProp prop{};
  RM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  AttentionDims dims;
  dims.h = dims.h_kv = 8;
  dims.d = 128;
  dims.c_q = dims.c_kv = 2048;
  dims.causal = false;
  dims.scale = 1.0f / std::sqrt(128.0f);
  const KernelTiming t = time_attention_kernels(dims, {128, 128}, 3);
  CHECK(t.forward_s > 0);
  CHECK(t.backward_s > 0);
  std::printf("%s: c 2048, d 128, h 8, tiles 128x128: forward %.1f TFLOP/s, backward %.1f TFLOP/s\n",
              prop.name, t.forward_flops / t.forward_s * 1e-12, t.backward_flops / t.backward_s * 1e-12);
}

}  // namespace
}  // namespace rm::gpu
