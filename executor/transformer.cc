// The transformer's forward and backward pass on one rank's tokens (see transformer.h).
// Reads top to bottom as llm.c does: embedding, layers, head and loss, then the same
// backwards; each block comments its tensors' shapes.
#include "executor/transformer.h"

#include <cmath>
#include <limits>

#include <Eigen/Dense>

#include "executor/token_stream.h"
#include "planner/input_error.h"

namespace rm::exec {

namespace {

template <class T>
using MatOf = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using RowOf = Eigen::Matrix<T, 1, Eigen::Dynamic>;

// RMSNorm epsilon and RoPE base of Llama 2 (Touvron et al. 2023; Hugging Face config
// rms_norm_eps 1e-5, rope_theta 10000 as in Su et al. 2021, RoFormer).
constexpr double kRmsEps = 1e-5;
constexpr double kRopeTheta = 10000.0;
// Initialisation std of GPT-2 / Megatron-LM (--init-method-std 0.02).
constexpr double kInitStd = 0.02;

// y = rmsnorm(x) * g row by row; r[i] = 1 / rms(x_i).   x, y [c][H]; r [c]; g [H]
template <class T>
void rmsnorm_forward(const MatOf<T>& x, const T* g, MatOf<T>& y, std::vector<T>& r) {
  const Eigen::Index n = x.cols();
  y.resize(x.rows(), n);
  r.resize(static_cast<size_t>(x.rows()));
  const Eigen::Map<const RowOf<T>> gain(g, n);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    r[i] = T(1) / std::sqrt(x.row(i).squaredNorm() / static_cast<T>(n) + static_cast<T>(kRmsEps));
    y.row(i) = x.row(i).cwiseProduct(gain) * r[i];
  }
}

// dx += d(rmsnorm)/dx^T dy; dg += sum_i dy_i * x_i * r_i.
template <class T>
void rmsnorm_backward(const MatOf<T>& x, const std::vector<T>& r, const T* g, const MatOf<T>& dy,
                      MatOf<T>& dx, T* dg) {
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

// Rotary embedding in place, the half-split form of Llama's reference code: dims i and
// i + d/2 of each head rotate by pos * theta^(-2i/d). `sign` -1 applies the inverse (the
// backward of a rotation is its transpose).   x [c][heads * d]
template <class T>
void rope(MatOf<T>& x, int heads, int d, const int64_t* positions, T sign) {
  const int half = d / 2;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (int k = 0; k < half; ++k) {
      const double angle = static_cast<double>(positions[i]) *
                           std::pow(kRopeTheta, -2.0 * k / static_cast<double>(d));
      const T cs = static_cast<T>(std::cos(angle));
      const T sn = sign * static_cast<T>(std::sin(angle));
      for (int j = 0; j < heads; ++j) {
        T& a = x(i, j * d + k);
        T& b = x(i, j * d + k + half);
        const T a0 = a, b0 = b;
        a = a0 * cs - b0 * sn;
        b = a0 * sn + b0 * cs;
      }
    }
}

// Row-major [c][heads * d] <-> head-major [heads][c][d].
template <class T>
std::vector<T> to_heads(const MatOf<T>& x, int heads, int d) {
  const Eigen::Index c = x.rows();
  std::vector<T> t(static_cast<size_t>(heads) * c * d);
  for (int j = 0; j < heads; ++j)
    for (Eigen::Index i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) t[(j * c + i) * d + k] = x(i, j * d + k);
  return t;
}
template <class T>
MatOf<T> from_heads(const std::vector<T>& t, int heads, int d, int64_t c) {
  MatOf<T> x(c, static_cast<Eigen::Index>(heads) * d);
  for (int j = 0; j < heads; ++j)
    for (int64_t i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) x(i, j * d + k) = t[(j * c + i) * d + k];
  return x;
}

// What one layer's backward pass needs from its forward pass.
template <class T>
struct LayerActs {
  MatOf<T> x, a;          // input, attention_norm(x)            [c][H]
  std::vector<T> r1;
  LayerAttention<T> attn; // q, k (after RoPE), v, out, lse      head-major
  MatOf<T> o;             // attention output                    [c][h d]
  MatOf<T> x2, b;         // after the attention residual, ffn_norm(x2)   [c][H]
  std::vector<T> r2;
  MatOf<T> u, g, s;       // w1 b, w3 b, silu(u) * g             [c][F]
};

}  // namespace

size_t Transformer::add(const std::string& name, int64_t rows, int64_t cols, bool decay) {
  tensors_.push_back({name, num_params_, rows, cols, decay});
  num_params_ += static_cast<size_t>(rows * cols);
  return tensors_.back().offset;
}

Transformer::Transformer(const ModelSpec& model, const std::string& where) : m_(model) {
  if (m_.heads * m_.head_dim != m_.hidden)
    fail_input(where, "model " + m_.name,
               "train needs heads * head_dim == hidden (got " + std::to_string(m_.heads) + " * " +
                   std::to_string(m_.head_dim) + " != " + std::to_string(m_.hidden) + ")");
  if (!m_.gated_ffn)
    fail_input(where, "model " + m_.name + ": gated_ffn",
               "train implements the SwiGLU feed-forward (gated_ffn: true) only");
  if (m_.head_dim % 2 != 0)
    fail_input(where, "model " + m_.name + ": head_dim", "must be even for RoPE");
  if (m_.vocab < TokenStream::kMinVocab)
    fail_input(where, "model " + m_.name + ": vocab",
               "must hold the byte tokenizer's " + std::to_string(TokenStream::kMinVocab) +
                   " tokens (got " + std::to_string(m_.vocab) + ")");
  const int64_t H = m_.hidden, qd = int64_t{m_.heads} * m_.head_dim,
                kvd = int64_t{m_.kv_heads} * m_.head_dim, F = m_.ffn_hidden;
  tok_embeddings_ = add("tok_embeddings", m_.vocab, H, true);
  for (int l = 0; l < m_.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    LayerOffsets o{};
    o.attention_norm = add(p + "attention_norm", 1, H, false);
    o.wq = add(p + "attention.wq", H, qd, true);
    o.wk = add(p + "attention.wk", H, kvd, true);
    o.wv = add(p + "attention.wv", H, kvd, true);
    o.wo = add(p + "attention.wo", qd, H, true);
    o.ffn_norm = add(p + "ffn_norm", 1, H, false);
    o.w1 = add(p + "feed_forward.w1", H, F, true);
    o.w3 = add(p + "feed_forward.w3", H, F, true);
    o.w2 = add(p + "feed_forward.w2", F, H, true);
    layers_.push_back(o);
  }
  norm_ = add("norm", 1, H, false);
  output_ = add("output", H, m_.vocab, true);
}

std::vector<float> Transformer::init(uint64_t seed) const {
  std::vector<float> p(num_params_);
  const double out_scale = 1.0 / std::sqrt(2.0 * m_.layers);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    const ParamTensor& pt = tensors_[t];
    const size_t n = static_cast<size_t>(pt.rows * pt.cols);
    if (!pt.decay) {  // norm gains
      std::fill_n(p.begin() + static_cast<std::ptrdiff_t>(pt.offset), n, 1.0f);
      continue;
    }
    const bool is_out = pt.name.find("wo") != std::string::npos ||
                        pt.name.find("w2") != std::string::npos;
    const double sigma = kInitStd * (is_out ? out_scale : 1.0);
    uint64_t s = splitmix64(splitmix64(seed) ^ t);  // a counter from a random start per tensor
    for (size_t i = 0; i < n; i += 2) {  // Box-Muller: two normals per pair of uniforms
      const double u1 = (static_cast<double>(splitmix64(s++) >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = static_cast<double>(splitmix64(s++) >> 11) * 0x1.0p-53;
      const double rad = std::sqrt(-2.0 * std::log(u1));
      p[pt.offset + i] = static_cast<float>(sigma * rad * std::cos(2 * M_PI * u2));
      if (i + 1 < n) p[pt.offset + i + 1] = static_cast<float>(sigma * rad * std::sin(2 * M_PI * u2));
    }
  }
  return p;
}

template <class T>
double Transformer::forward_backward(const std::vector<T>& params, std::vector<T>& grads,
                                     const int32_t* tokens, const int32_t* targets,
                                     const int64_t* positions, int64_t c, double grad_scale,
                                     const AttentionFnOf<T>& attention_forward,
                                     const AttentionFnOf<T>& attention_backward) const {
  using Mat = MatOf<T>;
  using CMap = Eigen::Map<const Mat>;
  using MMap = Eigen::Map<Mat>;
  const int H = m_.hidden, h = m_.heads, hkv = m_.kv_heads, d = m_.head_dim, F = m_.ffn_hidden,
            V = m_.vocab;
  auto W = [&](size_t off, int64_t rows, int64_t cols) { return CMap(params.data() + off, rows, cols); };
  auto dW = [&](size_t off, int64_t rows, int64_t cols) { return MMap(grads.data() + off, rows, cols); };

  // ---- embedding: x [c][H]
  Mat x(c, H);
  for (int64_t i = 0; i < c; ++i) x.row(i) = W(tok_embeddings_, V, H).row(tokens[i]);

  // ---- layers, forward
  std::vector<LayerActs<T>> acts(static_cast<size_t>(m_.layers));
  for (int l = 0; l < m_.layers; ++l) {
    const LayerOffsets& o = layers_[l];
    LayerActs<T>& A = acts[l];
    A.x = x;
    rmsnorm_forward<T>(A.x, params.data() + o.attention_norm, A.a, A.r1);
    Mat q = A.a * W(o.wq, H, int64_t{h} * d);      // [c][h d]
    Mat k = A.a * W(o.wk, H, int64_t{hkv} * d);    // [c][h_kv d]
    const Mat v = A.a * W(o.wv, H, int64_t{hkv} * d);
    rope<T>(q, h, d, positions, T(1));
    rope<T>(k, hkv, d, positions, T(1));
    A.attn.q = to_heads<T>(q, h, d);
    A.attn.k = to_heads<T>(k, hkv, d);
    A.attn.v = to_heads<T>(v, hkv, d);
    attention_forward(l, A.attn);  // out [h][c][d], lse [h][c]
    A.o = from_heads<T>(A.attn.out, h, d, c);
    A.x2 = A.x + A.o * W(o.wo, int64_t{h} * d, H);
    rmsnorm_forward<T>(A.x2, params.data() + o.ffn_norm, A.b, A.r2);
    A.u = A.b * W(o.w1, H, F);
    A.g = A.b * W(o.w3, H, F);
    A.s = (A.u.array() / (T(1) + (-A.u.array()).exp())).matrix().cwiseProduct(A.g);  // silu(u) g
    x = A.x2 + A.s * W(o.w2, F, H);
  }

  // ---- head and loss: z [c][H], logits [c][V]
  Mat z;
  std::vector<T> rf;
  rmsnorm_forward<T>(x, params.data() + norm_, z, rf);
  Mat logits = z * W(output_, H, V);
  double loss = 0;
  for (int64_t i = 0; i < c; ++i) {  // logits become dlogits = (softmax - onehot) * scale
    auto row = logits.row(i);
    const T mx = row.maxCoeff();
    const double target_logit = row(targets[i]) - mx;
    row.array() = (row.array() - mx).exp();
    const double sum = row.sum();
    loss += std::log(sum) - target_logit;
    row *= static_cast<T>(grad_scale / sum);
    row(targets[i]) -= static_cast<T>(grad_scale);
  }

  // ---- head, backward
  dW(output_, H, V).noalias() += z.transpose() * logits;
  const Mat dz = logits * W(output_, H, V).transpose();
  Mat dx = Mat::Zero(c, H);
  rmsnorm_backward<T>(x, rf, params.data() + norm_, dz, dx, grads.data() + norm_);

  // ---- layers, backward: dx is d(loss)/d(layer output)
  for (int l = m_.layers - 1; l >= 0; --l) {
    const LayerOffsets& o = layers_[l];
    LayerActs<T>& A = acts[l];
    // feed-forward: x3 = x2 + s w2
    dW(o.w2, F, H).noalias() += A.s.transpose() * dx;
    const Mat ds = dx * W(o.w2, F, H).transpose();  // [c][F]
    const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> sig =
        T(1) / (T(1) + (-A.u.array()).exp());
    const Mat dg = (ds.array() * A.u.array() * sig).matrix();
    const Mat du = (ds.array() * A.g.array() * sig * (T(1) + A.u.array() * (T(1) - sig))).matrix();
    dW(o.w1, H, F).noalias() += A.b.transpose() * du;
    dW(o.w3, H, F).noalias() += A.b.transpose() * dg;
    const Mat db = du * W(o.w1, H, F).transpose() + dg * W(o.w3, H, F).transpose();
    Mat dx2 = dx;
    rmsnorm_backward<T>(A.x2, A.r2, params.data() + o.ffn_norm, db, dx2, grads.data() + o.ffn_norm);
    // attention: x2 = x + o wo
    dW(o.wo, int64_t{h} * d, H).noalias() += A.o.transpose() * dx2;
    A.attn.dout = to_heads<T>(dx2 * W(o.wo, int64_t{h} * d, H).transpose(), h, d);
    attention_backward(l, A.attn);  // dq [h][c][d], dk, dv [h_kv][c][d]
    Mat dq = from_heads<T>(A.attn.dq, h, d, c), dk = from_heads<T>(A.attn.dk, hkv, d, c);
    const Mat dv = from_heads<T>(A.attn.dv, hkv, d, c);
    rope<T>(dq, h, d, positions, T(-1));
    rope<T>(dk, hkv, d, positions, T(-1));
    dW(o.wq, H, int64_t{h} * d).noalias() += A.a.transpose() * dq;
    dW(o.wk, H, int64_t{hkv} * d).noalias() += A.a.transpose() * dk;
    dW(o.wv, H, int64_t{hkv} * d).noalias() += A.a.transpose() * dv;
    const Mat da = dq * W(o.wq, H, int64_t{h} * d).transpose() +
                   dk * W(o.wk, H, int64_t{hkv} * d).transpose() +
                   dv * W(o.wv, H, int64_t{hkv} * d).transpose();
    dx = dx2;
    rmsnorm_backward<T>(A.x, A.r1, params.data() + o.attention_norm, da, dx,
                     grads.data() + o.attention_norm);
  }

  // ---- embedding, backward
  for (int64_t i = 0; i < c; ++i) dW(tok_embeddings_, V, H).row(tokens[i]) += dx.row(i);
  return loss;
}

template double Transformer::forward_backward<float>(
    const std::vector<float>&, std::vector<float>&, const int32_t*, const int32_t*,
    const int64_t*, int64_t, double, const AttentionFnOf<float>&, const AttentionFnOf<float>&) const;
template double Transformer::forward_backward<double>(
    const std::vector<double>&, std::vector<double>&, const int32_t*, const int32_t*,
    const int64_t*, int64_t, double, const AttentionFnOf<double>&, const AttentionFnOf<double>&) const;

}  // namespace rm::exec
