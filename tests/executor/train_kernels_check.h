// Every primitive of a TrainKernels<float> (executor/train_kernels.h) against plain fp64
// loops written from the definitions, on small hashed inputs moved through the kernels'
// own memory (upload, download). Shared by the cpu kernels' test (tests/executor) and the
// GPU test (tests/cuda), so both devices answer to the same reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/train_kernels.h"

namespace rm::exec::testing {

// One primitive's result: max |got - want| over max |want| of its outputs.
struct KernelError {
  std::string name;
  double rel_err = 0;
};

inline std::vector<KernelError> check_train_kernels(TrainKernels<float>& K) {
  // Shapes: 2 sequences of c tokens; odd sizes so no kernel fits them by luck.
  const int64_t c = 19, rows = 2 * c, H = 48, F = 72, V = 67;
  const int heads = 3, d = 16;  // heads * d == H
  uint64_t counter = 7;
  auto random = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(splitmix64(counter++) >> 40) * (2.0f / 16777216.0f) - 1.0f;
    return v;
  };
  auto dev = [&](const std::vector<float>& host, int64_t r, int64_t cols) {
    Tensor<float> t = K.alloc(r, cols);
    K.upload(t.data(), host.data(), t.size());
    return t;
  };
  auto host = [&](const Tensor<float>& t) {
    std::vector<float> v(static_cast<size_t>(t.size()));
    K.download(v.data(), t.data(), t.size());
    return v;
  };
  std::vector<KernelError> out;
  auto compare = [&](const std::string& name, const std::vector<float>& got, const std::vector<double>& want) {
    double diff = 0, scale = 1e-30;
    for (size_t i = 0; i < want.size(); ++i) {
      diff = std::max(diff, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    out.push_back({name, got.size() == want.size() ? diff / scale : INFINITY});
  };

  // gemm: every transpose pair, set and accumulate.   c [m][n] = op(a) [m][k] op(b) [k][n]
  const int64_t m = 23, k = 29, n = 31;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (int acc = 0; acc < 2; ++acc) {
        const std::vector<float> a = random(m * k), b = random(k * n), c0 = random(m * n);
        Tensor<float> da = ta ? dev(a, k, m) : dev(a, m, k), db = tb ? dev(b, n, k) : dev(b, k, n);
        Tensor<float> dc = dev(c0, m, n);
        K.gemm(da, ta != 0, db, tb != 0, dc, acc != 0);
        std::vector<double> want(static_cast<size_t>(m * n));
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double s = acc ? c0[i * n + j] : 0.0;
            for (int64_t p = 0; p < k; ++p)
              s += double{ta ? a[p * m + i] : a[i * k + p]} * (tb ? b[j * k + p] : b[p * n + j]);
            want[i * n + j] = s;
          }
        compare(std::string("gemm") + (ta ? " aT" : " a") + (tb ? " bT" : " b") + (acc ? " +=" : " ="),
                host(dc), want);
      }

  // RMSNorm forward and backward.   x, dy, dx [rows][H]; g, dg [H]
  {
    const std::vector<float> x = random(rows * H), g = random(H), dy = random(rows * H),
                             dx0 = random(rows * H), dg0 = random(H);
    Tensor<float> tx = dev(x, rows, H), tg = dev(g, 1, H), ty = K.alloc(rows, H), tr = K.alloc(rows, 1);
    K.rmsnorm_forward(tx, tg.data(), ty, tr);
    Tensor<float> tdy = dev(dy, rows, H), tdx = dev(dx0, rows, H), tdg = dev(dg0, 1, H);
    K.rmsnorm_backward(tx, tr, tg.data(), tdy, tdx, tdg.data());
    std::vector<double> y(x.size()), r(static_cast<size_t>(rows)), dx(dx0.begin(), dx0.end()),
        dg(dg0.begin(), dg0.end());
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0, dot = 0;
      for (int64_t j = 0; j < H; ++j) ss += double{x[i * H + j]} * x[i * H + j];
      r[i] = 1.0 / std::sqrt(ss / H + 1e-5);
      for (int64_t j = 0; j < H; ++j) {
        y[i * H + j] = x[i * H + j] * r[i] * g[j];
        dot += double{dy[i * H + j]} * g[j] * x[i * H + j];
        dg[j] += double{dy[i * H + j]} * x[i * H + j] * r[i];
      }
      for (int64_t j = 0; j < H; ++j)
        dx[i * H + j] += dy[i * H + j] * g[j] * r[i] - x[i * H + j] * r[i] * r[i] * r[i] * dot / H;
    }
    compare("rmsnorm_forward y", host(ty), y);
    compare("rmsnorm_forward r", host(tr), r);
    compare("rmsnorm_backward dx", host(tdx), dx);
    compare("rmsnorm_backward dg", host(tdg), dg);
  }

  // RoPE, forward and inverse, at positions 5, 8, 11, ... (stacked sequences share them).
  {
    std::vector<int64_t> pos(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) pos[i] = 5 + 3 * i;
    const std::vector<float> x = random(rows * H);
    for (float sign : {1.0f, -1.0f}) {
      Tensor<float> t = dev(x, rows, H);
      K.rope(t, heads, d, pos.data(), c, sign > 0 ? 1 : -1);
      std::vector<double> want(x.begin(), x.end());
      for (int64_t i = 0; i < rows; ++i)
        for (int p = 0; p < d / 2; ++p) {
          const double angle = static_cast<double>(pos[i % c]) * std::pow(10000.0, -2.0 * p / d);
          for (int j = 0; j < heads; ++j) {
            const double a = x[i * H + j * d + p], b = x[i * H + j * d + p + d / 2];
            want[i * H + j * d + p] = a * std::cos(angle) - sign * b * std::sin(angle);
            want[i * H + j * d + p + d / 2] = sign * a * std::sin(angle) + b * std::cos(angle);
          }
        }
      compare(sign > 0 ? "rope" : "rope inverse", host(t), want);
    }
  }

  // SwiGLU forward and backward.   u, g, s, ds [rows][F]
  {
    const std::vector<float> u = random(rows * F), g = random(rows * F), ds = random(rows * F);
    Tensor<float> tu = dev(u, rows, F), tg = dev(g, rows, F), ts = K.alloc(rows, F);
    Tensor<float> tds = dev(ds, rows, F), tdu = K.alloc(rows, F), tdg = K.alloc(rows, F);
    K.swiglu_forward(tu, tg, ts);
    K.swiglu_backward(tds, tu, tg, tdu, tdg);
    std::vector<double> s(u.size()), du(u.size()), dg(u.size());
    for (size_t i = 0; i < u.size(); ++i) {
      const double sig = 1.0 / (1.0 + std::exp(-double{u[i]}));
      s[i] = u[i] * sig * g[i];
      dg[i] = ds[i] * u[i] * sig;
      du[i] = ds[i] * g[i] * (sig + u[i] * sig * (1.0 - sig));
    }
    compare("swiglu_forward", host(ts), s);
    compare("swiglu_backward du", host(tdu), du);
    compare("swiglu_backward dg", host(tdg), dg);
  }

  // Embedding forward and backward, tokens repeating (the backward adds them up).
  {
    std::vector<int32_t> tok(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) tok[i] = static_cast<int32_t>((i * 7) % 11);
    const std::vector<float> table = random(V * H), dx = random(rows * H), dt0 = random(V * H);
    Tensor<float> tt = dev(table, V, H), tx = K.alloc(rows, H), tdx = dev(dx, rows, H),
                  tdt = dev(dt0, V, H);
    K.embedding_forward(tt, tok.data(), tx);
    K.embedding_backward(tdx, tok.data(), tdt);
    std::vector<double> x(static_cast<size_t>(rows * H)), dt(dt0.begin(), dt0.end());
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < H; ++j) {
        x[i * H + j] = table[tok[i] * H + j];
        dt[tok[i] * H + j] += dx[i * H + j];
      }
    compare("embedding_forward", host(tx), x);
    compare("embedding_backward", host(tdt), dt);
  }

  // Cross-entropy: the summed loss and the logits' gradient.   z [rows][V]
  {
    std::vector<float> z = random(rows * V);
    for (auto& v : z) v *= 4;
    std::vector<int32_t> tgt(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) tgt[i] = static_cast<int32_t>((i * 13) % V);
    const double scale = 0.25;
    Tensor<float> tz = dev(z, rows, V);
    const double loss = K.cross_entropy(tz, tgt.data(), scale);
    std::vector<double> dz(z.size());
    double want_loss = 0;
    for (int64_t i = 0; i < rows; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < V; ++j) mx = std::max(mx, double{z[i * V + j]});
      for (int64_t j = 0; j < V; ++j) sum += std::exp(z[i * V + j] - mx);
      want_loss += std::log(sum) + mx - z[i * V + tgt[i]];
      for (int64_t j = 0; j < V; ++j)
        dz[i * V + j] = scale * (std::exp(z[i * V + j] - mx) / sum - (j == tgt[i] ? 1.0 : 0.0));
    }
    compare("cross_entropy loss", {static_cast<float>(loss)}, {want_loss});
    compare("cross_entropy dlogits", host(tz), dz);
  }

  // Head-major layout: sequence 1's rows out and back into a zeroed matrix.
  {
    const std::vector<float> x = random(rows * H);
    Tensor<float> tx = dev(x, rows, H), th = K.alloc(heads, c * d), back = K.alloc(rows, H);
    K.to_heads(tx, c, heads, d, th);
    K.zero(back);
    K.from_heads(th, heads, d, back, c);
    std::vector<double> t(static_cast<size_t>(heads * c * d)), b(x.size(), 0.0);
    for (int j = 0; j < heads; ++j)
      for (int64_t i = 0; i < c; ++i)
        for (int p = 0; p < d; ++p) {
          t[(j * c + i) * d + p] = x[(c + i) * H + j * d + p];
          b[(c + i) * H + j * d + p] = x[(c + i) * H + j * d + p];
        }
    compare("to_heads", host(th), t);
    compare("from_heads", host(back), b);
  }

  // The optimizer's: add, squared norm, and an AdamW update with clipping and decay.
  {
    const int64_t N = 1000;  // more than one GPU block, not a multiple of one
    const std::vector<float> y0 = random(N), x = random(N), p0 = random(N), m0 = random(N);
    std::vector<float> v0 = random(N);
    for (auto& e : v0) e = e * e;  // a second moment is not negative
    Tensor<float> ty = dev(y0, 1, N), tx = dev(x, 1, N);
    K.add(ty, tx);
    std::vector<double> y(static_cast<size_t>(N));
    double sq = 0;
    for (int64_t i = 0; i < N; ++i) {
      y[i] = double{y0[i]} + x[i];
      sq += double{x[i]} * x[i];
    }
    compare("add", host(ty), y);
    compare("squared_norm", {static_cast<float>(K.squared_norm(tx))}, {sq});
    AdamWScalars s;
    s.clip = 0.5;
    s.lr = 1e-2;
    s.bc1 = 1 - 0.9 * 0.9;
    s.bc2 = 1 - 0.95 * 0.95;
    s.eps = 1e-5;
    s.b1 = 0.9f;
    s.b2 = 0.95f;
    s.decay = static_cast<float>(1 - 1e-2 * 0.1);
    // The update in fp64 from moments m_in, v_in: p, m, v.
    std::vector<double> p(static_cast<size_t>(N)), m(p.size()), v(p.size());
    auto update = [&](const std::vector<float>& m_in, const std::vector<float>& v_in) {
      for (int64_t i = 0; i < N; ++i) {
        const double g = x[i] * s.clip;
        m[i] = double{s.b1} * m_in[i] + (1 - double{s.b1}) * g;
        v[i] = double{s.b2} * v_in[i] + (1 - double{s.b2}) * g * g;
        p[i] = p0[i] * double{s.decay} - s.lr * (m[i] / s.bc1) / (std::sqrt(v[i] / s.bc2) + s.eps);
      }
    };
    Tensor<float> tp = dev(p0, 1, N), tm = dev(m0, 1, N), tv = dev(v0, 1, N);
    K.adamw(tp, tx, tm, tv, s);
    update(m0, v0);
    compare("adamw p", host(tp), p);
    compare("adamw m", host(tm), m);
    compare("adamw v", host(tv), v);

    // The same update with the moments stored in bf16 (adamw_bf16_moments): p from the
    // stored moments' exact values, and each new moment stored as the bf16 nearest its fp64
    // value: the error counted is what exceeds half a bf16 ulp (8 significant bits), 0
    // unless the kernel rounds wrongly or updates from other values.
    auto stored = [&](const std::vector<float>& x) {  // bf16 storage of x, in K's memory
      Tensor<float> words = K.alloc(1, (N + 1) / 2);   // N bf16 values
      K.to_bf16(reinterpret_cast<Bf16*>(words.data()), dev(x, 1, N).data(), N);
      return words;
    };
    auto widened = [&](const Tensor<float>& words) {
      Tensor<float> back = K.alloc(1, N);
      K.from_bf16(back.data(), reinterpret_cast<const Bf16*>(words.data()), N);
      return host(back);
    };
    Tensor<float> mb = stored(m0), vb = stored(v0), tp2 = dev(p0, 1, N);
    const std::vector<float> m1 = widened(mb), v1 = widened(vb);
    K.adamw_bf16_moments(tp2, tx, {reinterpret_cast<Bf16*>(mb.data()), 1, N}, {reinterpret_cast<Bf16*>(vb.data()), 1, N},
                         s);
    update(m1, v1);
    compare("adamw_bf16_moments p", host(tp2), p);
    auto beyond_half_ulp = [&](const std::string& name, const std::vector<float>& got, const std::vector<double>& want) {
      double excess = 0, scale = 1e-30;
      for (int64_t i = 0; i < N; ++i) {
        int e = 0;
        std::frexp(want[i], &e);
        excess = std::max(excess, std::abs(got[i] - want[i]) - std::ldexp(1.0, e - 9));
        scale = std::max(scale, std::abs(want[i]));
      }
      out.push_back({name, std::max(0.0, excess) / scale});
    };
    beyond_half_ulp("adamw_bf16_moments m", widened(mb), m);
    beyond_half_ulp("adamw_bf16_moments v", widened(vb), v);
  }

  // bf16 storage: to_bf16 rounds to nearest even (the upper 16 bits of the fp32, plus one
  // where the lower half is above 0x8000, or equal with the kept part odd), from_bf16 is
  // exact; the round trip is compared with that definition (relative error 0 expected).
  {
    const int64_t N = 1000;
    std::vector<float> x = random(N);
    for (int64_t i = 0; i < N; ++i) x[i] *= static_cast<float>(1 << (i % 16));  // many exponents
    Tensor<float> tx = dev(x, 1, N), back = K.alloc(1, N);
    Tensor<float> half = K.alloc(1, (N + 1) / 2);  // N bf16 values
    K.to_bf16(reinterpret_cast<Bf16*>(half.data()), tx.data(), N);
    K.from_bf16(back.data(), reinterpret_cast<const Bf16*>(half.data()), N);
    std::vector<double> want(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) {
      uint32_t u = 0;
      std::memcpy(&u, &x[i], sizeof u);
      u = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
      float f = 0;
      std::memcpy(&f, &u, sizeof f);
      want[i] = f;
    }
    compare("to_bf16 / from_bf16", host(back), want);
  }
  return out;
}

}  // namespace rm::exec::testing
