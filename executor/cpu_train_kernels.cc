// The Eigen kernels of the transformer's pass (train_kernels.h). Tensors are allocated
// as Eigen's own matrices are (aligned_malloc): Eigen's vectorised loops and reductions
// split a row where its data is aligned, so this keeps the arithmetic of the pass as it
// was written on Eigen matrices, bit for bit, but for one thing: `A.u = A.b * W` went
// through a column-major temporary, and gemm() writes the row-major result directly.
#include <cmath>
#include <cstring>
#include <vector>

#include <Eigen/Dense>

#include "executor/train_kernels.h"

namespace rm::exec {

namespace {

template <class T>
using MatOf = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowOf = Eigen::Matrix<T, 1, Eigen::Dynamic>;
template <class T>
using ConstEigen = Eigen::Map<const MatOf<T>>;
template <class T>
using MutEigen = Eigen::Map<MatOf<T>>;

// RMSNorm epsilon and RoPE base of Llama 2 (Touvron et al. 2023; Hugging Face config
// rms_norm_eps 1e-5, rope_theta 10000 as in Su et al. 2021, RoFormer).
constexpr double kRmsEps = 1e-5;
constexpr double kRopeTheta = 10000.0;

template <class T>
ConstEigen<T> eigen(ConstView<T> v) {
  return ConstEigen<T>(v.data, v.rows, v.cols);
}
template <class T>
MutEigen<T> eigen(View<T> v) {
  return MutEigen<T>(v.data, v.rows, v.cols);
}

// bf16 storage to fp32 and back, rounded to nearest even.
float widen(Bf16 x) { return static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(x.bits)); }
Bf16 narrow(float x) { return Bf16{Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(x))}; }

template <class T>
class CpuTrainKernels final : public TrainKernels<T> {
 public:
  std::string name() const override { return "cpu"; }

  Tensor<T> alloc(int64_t rows, int64_t cols) override {
    T* p = static_cast<T*>(Eigen::internal::aligned_malloc(static_cast<size_t>(rows * cols) * sizeof(T)));
    return Tensor<T>(this, p, rows, cols);
  }
  void free(T* data) override { Eigen::internal::aligned_free(data); }
  void zero(View<T> x) override { eigen(x).setZero(); }
  void copy(View<T> dst, ConstView<T> src) override {
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.size()) * sizeof(T));
  }
  void upload(T* dst, const T* host, int64_t n) override {
    std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(T));
  }
  void download(T* host, const T* src, int64_t n) override {
    std::memcpy(host, src, static_cast<size_t>(n) * sizeof(T));
  }
  void synchronize() override {}

  void gemm(ConstView<T> a, bool trans_a, ConstView<T> b, bool trans_b, View<T> c,
            bool accumulate) override {
    const ConstEigen<T> A = eigen(a), B = eigen(b);
    MutEigen<T> C = eigen(c);
    auto run = [&](const auto& lhs, const auto& rhs) {
      if (accumulate)
        C.noalias() += lhs * rhs;
      else
        C.noalias() = lhs * rhs;
    };
    if (!trans_a && !trans_b) run(A, B);
    else if (trans_a && !trans_b) run(A.transpose(), B);
    else if (!trans_a && trans_b) run(A, B.transpose());
    else run(A.transpose(), B.transpose());
  }

  void rmsnorm_forward(ConstView<T> xv, const T* g, View<T> yv, View<T> rv) override {
    const ConstEigen<T> x = eigen(xv);
    MutEigen<T> y = eigen(yv);
    T* r = rv.data;
    const Eigen::Index n = x.cols();
    const Eigen::Map<const RowOf<T>> gain(g, n);
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      r[i] = T(1) / std::sqrt(x.row(i).squaredNorm() / static_cast<T>(n) + static_cast<T>(kRmsEps));
      y.row(i) = x.row(i).cwiseProduct(gain) * r[i];
    }
  }

  void rmsnorm_backward(ConstView<T> xv, ConstView<T> rv, const T* g, ConstView<T> dyv,
                        View<T> dxv, T* dg) override {
    const ConstEigen<T> x = eigen(xv), dy = eigen(dyv);
    MutEigen<T> dx = eigen(dxv);
    const T* r = rv.data;
    const Eigen::Index n = x.cols();
    const Eigen::Map<const RowOf<T>> gain(g, n);
    Eigen::Map<RowOf<T>> dgain(dg, n);
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const RowOf<T> dyg = dy.row(i).cwiseProduct(gain);
      dgain += dy.row(i).cwiseProduct(x.row(i)) * r[i];
      const T dot = dyg.dot(x.row(i)) / static_cast<T>(n);
      dx.row(i) += dyg * r[i] - x.row(i) * (r[i] * r[i] * r[i] * dot);
    }
  }

  void rope(View<T> xv, int heads, int d, const int64_t* positions, int64_t c, int sign) override {
    MutEigen<T> x = eigen(xv);
    const int half = d / 2;
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      for (int k = 0; k < half; ++k) {
        const double angle = static_cast<double>(positions[i % c]) *
                             std::pow(kRopeTheta, -2.0 * k / static_cast<double>(d));
        const T cs = static_cast<T>(std::cos(angle));
        const T sn = static_cast<T>(sign) * static_cast<T>(std::sin(angle));
        for (int j = 0; j < heads; ++j) {
          T& a = x(i, j * d + k);
          T& b = x(i, j * d + k + half);
          const T a0 = a, b0 = b;
          a = a0 * cs - b0 * sn;
          b = a0 * sn + b0 * cs;
        }
      }
  }

  void swiglu_forward(ConstView<T> uv, ConstView<T> gv, View<T> sv) override {
    const ConstEigen<T> u = eigen(uv), g = eigen(gv);
    eigen(sv) = (u.array() / (T(1) + (-u.array()).exp())).matrix().cwiseProduct(g);
  }

  void swiglu_backward(ConstView<T> dsv, ConstView<T> uv, ConstView<T> gv, View<T> duv,
                       View<T> dgv) override {
    const ConstEigen<T> ds = eigen(dsv), u = eigen(uv), g = eigen(gv);
    const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> sig =
        T(1) / (T(1) + (-u.array()).exp());
    eigen(dgv) = (ds.array() * u.array() * sig).matrix();
    eigen(duv) = (ds.array() * g.array() * sig * (T(1) + u.array() * (T(1) - sig))).matrix();
  }

  void embedding_forward(ConstView<T> table, const int32_t* tokens, View<T> xv) override {
    const ConstEigen<T> w = eigen(table);
    MutEigen<T> x = eigen(xv);
    for (int64_t i = 0; i < x.rows(); ++i) x.row(i) = w.row(tokens[i]);
  }

  void embedding_backward(ConstView<T> dxv, const int32_t* tokens, View<T> dtable) override {
    const ConstEigen<T> dx = eigen(dxv);
    MutEigen<T> dw = eigen(dtable);
    for (int64_t i = 0; i < dx.rows(); ++i) dw.row(tokens[i]) += dx.row(i);
  }

  double cross_entropy(View<T> logits, const int32_t* targets, double grad_scale) override {
    MutEigen<T> z = eigen(logits);
    double loss = 0;
    for (int64_t i = 0; i < z.rows(); ++i) {
      auto row = z.row(i);
      const T mx = row.maxCoeff();
      const double target_logit = row(targets[i]) - mx;
      row.array() = (row.array() - mx).exp();
      const double sum = row.sum();
      loss += std::log(sum) - target_logit;
      row *= static_cast<T>(grad_scale / sum);
      row(targets[i]) -= static_cast<T>(grad_scale);
    }
    return loss;
  }

  void to_heads(ConstView<T> x, int64_t row0, int heads, int d, View<T> t) override {
    const int64_t c = t.cols / d;
    for (int j = 0; j < heads; ++j)
      for (int64_t i = 0; i < c; ++i)
        for (int k = 0; k < d; ++k)
          t.data[(j * c + i) * d + k] = x.data[(row0 + i) * x.cols + j * d + k];
  }

  void from_heads(ConstView<T> t, int heads, int d, View<T> x, int64_t row0) override {
    const int64_t c = t.cols / d;
    for (int j = 0; j < heads; ++j)
      for (int64_t i = 0; i < c; ++i)
        for (int k = 0; k < d; ++k)
          x.data[(row0 + i) * x.cols + j * d + k] = t.data[(j * c + i) * d + k];
  }

  void add(View<T> y, ConstView<T> x) override {
    for (int64_t i = 0; i < x.size(); ++i) y.data[i] += x.data[i];
  }

  double squared_norm(ConstView<T> x) override {
    double sq = 0;
    for (int64_t i = 0; i < x.size(); ++i) sq += static_cast<double>(x.data[i]) * x.data[i];
    return sq;
  }

  void adamw(View<T> p, ConstView<T> grad, View<T> m, View<T> v, const AdamWScalars& s) override {
    const T b1 = static_cast<T>(s.b1), b2 = static_cast<T>(s.b2), decay = static_cast<T>(s.decay);
    for (int64_t i = 0; i < p.size(); ++i) {
      const T g = static_cast<T>(grad.data[i] * s.clip);
      m.data[i] = b1 * m.data[i] + (1 - b1) * g;
      v.data[i] = b2 * v.data[i] + (1 - b2) * g * g;
      const double mhat = m.data[i] / s.bc1, vhat = v.data[i] / s.bc2;
      p.data[i] = static_cast<T>(p.data[i] * decay - s.lr * mhat / (std::sqrt(vhat) + s.eps));
    }
  }

  void adamw_bf16_moments(View<T> p, ConstView<T> grad, View<Bf16> m, View<Bf16> v, const AdamWScalars& s) override {
    const float b1 = s.b1, b2 = s.b2;
    for (int64_t i = 0; i < p.size(); ++i) {
      const float g = static_cast<float>(grad.data[i] * s.clip);
      const float mi = b1 * widen(m.data[i]) + (1 - b1) * g;
      const float vi = b2 * widen(v.data[i]) + (1 - b2) * g * g;
      m.data[i] = narrow(mi);
      v.data[i] = narrow(vi);
      const double mhat = mi / s.bc1, vhat = vi / s.bc2;
      p.data[i] = static_cast<T>(p.data[i] * static_cast<T>(s.decay) - s.lr * mhat / (std::sqrt(vhat) + s.eps));
    }
  }

  void to_bf16(Bf16* dst, const T* src, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) dst[i] = narrow(static_cast<float>(src[i]));
  }
  void from_bf16(T* dst, const Bf16* src, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(widen(src[i]));
  }
};

}  // namespace

template <class T>
TrainKernels<T>& cpu_train_kernels() {
  static CpuTrainKernels<T> kernels;
  return kernels;
}

template TrainKernels<float>& cpu_train_kernels<float>();
template TrainKernels<double>& cpu_train_kernels<double>();

}  // namespace rm::exec
