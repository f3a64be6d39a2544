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

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat>;
using MMap = Eigen::Map<Mat>;

// RMSNorm epsilon and RoPE base of Llama 2 (Touvron et al. 2023; Hugging Face config
// rms_norm_eps 1e-5, rope_theta 10000 as in Su et al. 2021, RoFormer).
constexpr float kRmsEps = 1e-5f;
constexpr double kRopeTheta = 10000.0;
// Initialisation std of GPT-2 / Megatron-LM (--init-method-std 0.02).
constexpr double kInitStd = 0.02;

// y = rmsnorm(x) * g row by row; r[i] = 1 / rms(x_i).   x, y [c][H]; r [c]; g [H]
void rmsnorm_forward(const Mat& x, const float* g, Mat& y, std::vector<float>& r) {
  const Eigen::Index n = x.cols();
  y.resize(x.rows(), n);
  r.resize(static_cast<size_t>(x.rows()));
  const Eigen::Map<const Eigen::RowVectorXf> gain(g, n);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    r[i] = 1.0f / std::sqrt(x.row(i).squaredNorm() / static_cast<float>(n) + kRmsEps);
    y.row(i) = x.row(i).cwiseProduct(gain) * r[i];
  }
}

// dx += d(rmsnorm)/dx^T dy; dg += sum_i dy_i * x_i * r_i.
void rmsnorm_backward(const Mat& x, const std::vector<float>& r, const float* g, const Mat& dy,
                      Mat& dx, float* dg) {
  const Eigen::Index n = x.cols();
  const Eigen::Map<const Eigen::RowVectorXf> gain(g, n);
  Eigen::Map<Eigen::RowVectorXf> dgain(dg, n);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    const Eigen::RowVectorXf dyg = dy.row(i).cwiseProduct(gain);
    dgain += dy.row(i).cwiseProduct(x.row(i)) * r[i];
    const float dot = dyg.dot(x.row(i)) / static_cast<float>(n);
    dx.row(i) += dyg * r[i] - x.row(i) * (r[i] * r[i] * r[i] * dot);
  }
}

// Rotary embedding in place, the half-split form of Llama's reference code: dims i and
// i + d/2 of each head rotate by pos * theta^(-2i/d). `sign` -1 applies the inverse (the
// backward of a rotation is its transpose).   x [c][heads * d]
void rope(Mat& x, int heads, int d, const int64_t* positions, float sign) {
  const int half = d / 2;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (int k = 0; k < half; ++k) {
      const double angle = static_cast<double>(positions[i]) *
                           std::pow(kRopeTheta, -2.0 * k / static_cast<double>(d));
      const float cs = static_cast<float>(std::cos(angle));
      const float sn = sign * static_cast<float>(std::sin(angle));
      for (int j = 0; j < heads; ++j) {
        float& a = x(i, j * d + k);
        float& b = x(i, j * d + k + half);
        const float a0 = a, b0 = b;
        a = a0 * cs - b0 * sn;
        b = a0 * sn + b0 * cs;
      }
    }
}

// Row-major [c][heads * d] <-> head-major [heads][c][d].
std::vector<float> to_heads(const Mat& x, int heads, int d) {
  const Eigen::Index c = x.rows();
  std::vector<float> t(static_cast<size_t>(heads) * c * d);
  for (int j = 0; j < heads; ++j)
    for (Eigen::Index i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) t[(j * c + i) * d + k] = x(i, j * d + k);
  return t;
}
Mat from_heads(const std::vector<float>& t, int heads, int d, int64_t c) {
  Mat x(c, static_cast<Eigen::Index>(heads) * d);
  for (int j = 0; j < heads; ++j)
    for (int64_t i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) x(i, j * d + k) = t[(j * c + i) * d + k];
  return x;
}

// What one layer's backward pass needs from its forward pass.
struct LayerActs {
  Mat x, a;              // input, attention_norm(x)            [c][H]
  std::vector<float> r1;
  HostTensors attn;      // q, k (after RoPE), v, out, lse      head-major
  Mat o;                 // attention output                    [c][h d]
  Mat x2, b;             // after the attention residual, ffn_norm(x2)   [c][H]
  std::vector<float> r2;
  Mat u, g, s;           // w1 b, w3 b, silu(u) * g             [c][F]
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

double Transformer::forward_backward(const std::vector<float>& params, std::vector<float>& grads,
                                     const int32_t* tokens, const int32_t* targets,
                                     const int64_t* positions, int64_t c, double grad_scale,
                                     const AttentionFn& attention_forward,
                                     const AttentionFn& attention_backward) const {
  const int H = m_.hidden, h = m_.heads, hkv = m_.kv_heads, d = m_.head_dim, F = m_.ffn_hidden,
            V = m_.vocab;
  auto W = [&](size_t off, int64_t rows, int64_t cols) { return CMap(params.data() + off, rows, cols); };
  auto dW = [&](size_t off, int64_t rows, int64_t cols) { return MMap(grads.data() + off, rows, cols); };

  // ---- embedding: x [c][H]
  Mat x(c, H);
  for (int64_t i = 0; i < c; ++i) x.row(i) = W(tok_embeddings_, V, H).row(tokens[i]);

  // ---- layers, forward
  std::vector<LayerActs> acts(static_cast<size_t>(m_.layers));
  for (int l = 0; l < m_.layers; ++l) {
    const LayerOffsets& o = layers_[l];
    LayerActs& A = acts[l];
    A.x = x;
    rmsnorm_forward(A.x, params.data() + o.attention_norm, A.a, A.r1);
    Mat q = A.a * W(o.wq, H, int64_t{h} * d);      // [c][h d]
    Mat k = A.a * W(o.wk, H, int64_t{hkv} * d);    // [c][h_kv d]
    const Mat v = A.a * W(o.wv, H, int64_t{hkv} * d);
    rope(q, h, d, positions, 1.0f);
    rope(k, hkv, d, positions, 1.0f);
    A.attn.q = to_heads(q, h, d);
    A.attn.k = to_heads(k, hkv, d);
    A.attn.v = to_heads(v, hkv, d);
    attention_forward(l, A.attn);  // out [h][c][d], lse [h][c]
    A.o = from_heads(A.attn.out, h, d, c);
    A.x2 = A.x + A.o * W(o.wo, int64_t{h} * d, H);
    rmsnorm_forward(A.x2, params.data() + o.ffn_norm, A.b, A.r2);
    A.u = A.b * W(o.w1, H, F);
    A.g = A.b * W(o.w3, H, F);
    A.s = (A.u.array() / (1.0f + (-A.u.array()).exp())).matrix().cwiseProduct(A.g);  // silu(u) g
    x = A.x2 + A.s * W(o.w2, F, H);
  }

  // ---- head and loss: z [c][H], logits [c][V]
  Mat z;
  std::vector<float> rf;
  rmsnorm_forward(x, params.data() + norm_, z, rf);
  Mat logits = z * W(output_, H, V);
  double loss = 0;
  for (int64_t i = 0; i < c; ++i) {  // logits become dlogits = (softmax - onehot) * scale
    auto row = logits.row(i);
    const float mx = row.maxCoeff();
    const double target_logit = row(targets[i]) - mx;
    row.array() = (row.array() - mx).exp();
    const double sum = row.sum();
    loss += std::log(sum) - target_logit;
    row *= static_cast<float>(grad_scale / sum);
    row(targets[i]) -= static_cast<float>(grad_scale);
  }

  // ---- head, backward
  dW(output_, H, V).noalias() += z.transpose() * logits;
  const Mat dz = logits * W(output_, H, V).transpose();
  Mat dx = Mat::Zero(c, H);
  rmsnorm_backward(x, rf, params.data() + norm_, dz, dx, grads.data() + norm_);

  // ---- layers, backward: dx is d(loss)/d(layer output)
  for (int l = m_.layers - 1; l >= 0; --l) {
    const LayerOffsets& o = layers_[l];
    LayerActs& A = acts[l];
    // feed-forward: x3 = x2 + s w2
    dW(o.w2, F, H).noalias() += A.s.transpose() * dx;
    const Mat ds = dx * W(o.w2, F, H).transpose();  // [c][F]
    const Eigen::ArrayXXf sig = 1.0f / (1.0f + (-A.u.array()).exp());
    const Mat dg = (ds.array() * A.u.array() * sig).matrix();
    const Mat du = (ds.array() * A.g.array() * sig * (1.0f + A.u.array() * (1.0f - sig))).matrix();
    dW(o.w1, H, F).noalias() += A.b.transpose() * du;
    dW(o.w3, H, F).noalias() += A.b.transpose() * dg;
    const Mat db = du * W(o.w1, H, F).transpose() + dg * W(o.w3, H, F).transpose();
    Mat dx2 = dx;
    rmsnorm_backward(A.x2, A.r2, params.data() + o.ffn_norm, db, dx2, grads.data() + o.ffn_norm);
    // attention: x2 = x + o wo
    dW(o.wo, int64_t{h} * d, H).noalias() += A.o.transpose() * dx2;
    A.attn.dout = to_heads(dx2 * W(o.wo, int64_t{h} * d, H).transpose(), h, d);
    attention_backward(l, A.attn);  // dq [h][c][d], dk, dv [h_kv][c][d]
    Mat dq = from_heads(A.attn.dq, h, d, c), dk = from_heads(A.attn.dk, hkv, d, c);
    const Mat dv = from_heads(A.attn.dv, hkv, d, c);
    rope(dq, h, d, positions, -1.0f);
    rope(dk, hkv, d, positions, -1.0f);
    dW(o.wq, H, int64_t{h} * d).noalias() += A.a.transpose() * dq;
    dW(o.wk, H, int64_t{hkv} * d).noalias() += A.a.transpose() * dk;
    dW(o.wv, H, int64_t{hkv} * d).noalias() += A.a.transpose() * dv;
    const Mat da = dq * W(o.wq, H, int64_t{h} * d).transpose() +
                   dk * W(o.wk, H, int64_t{hkv} * d).transpose() +
                   dv * W(o.wv, H, int64_t{hkv} * d).transpose();
    dx = dx2;
    rmsnorm_backward(A.x, A.r1, params.data() + o.attention_norm, da, dx,
                     grads.data() + o.attention_norm);
  }

  // ---- embedding, backward
  for (int64_t i = 0; i < c; ++i) dW(tok_embeddings_, V, H).row(tokens[i]) += dx.row(i);
  return loss;
}

}  // namespace rm::exec
