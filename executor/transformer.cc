// The transformer's forward and backward pass on one rank's tokens (see transformer.h).
// Reads top to bottom as llm.c does: embedding, layers, head and loss, then the same
// backwards; each block comments its tensors' shapes.
#include "executor/transformer.h"

#include <chrono>
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
// backward of a rotation is its transpose). Row i is at positions[i % c] (sequences
// stacked).   x [rows][heads * d]; positions [c]
template <class T>
void rope(MatOf<T>& x, int heads, int d, const int64_t* positions, int64_t c, T sign) {
  const int half = d / 2;
  for (Eigen::Index i = 0; i < x.rows(); ++i)
    for (int k = 0; k < half; ++k) {
      const double angle = static_cast<double>(positions[i % c]) *
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

// Rows row0 .. row0 + c of row-major [rows][heads * d] <-> head-major [heads][c][d].
template <class T>
std::vector<T> to_heads(const MatOf<T>& x, int64_t row0, int64_t c, int heads, int d) {
  std::vector<T> t(static_cast<size_t>(heads) * c * d);
  for (int j = 0; j < heads; ++j)
    for (int64_t i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) t[(j * c + i) * d + k] = x(row0 + i, j * d + k);
  return t;
}
template <class T>
void from_heads(const std::vector<T>& t, int heads, int d, int64_t c, MatOf<T>& x, int64_t row0) {
  for (int j = 0; j < heads; ++j)
    for (int64_t i = 0; i < c; ++i)
      for (int k = 0; k < d; ++k) x(row0 + i, j * d + k) = t[(j * c + i) * d + k];
}

// What one layer's backward pass needs from its forward pass (rows = the batch's tokens).
template <class T>
struct LayerActs {
  MatOf<T> x, a;          // input, attention_norm(x)            [rows][H]
  std::vector<T> r1;
  std::vector<LayerAttention<T>> attn;  // per sequence: q, k (after RoPE), v, out, lse
  MatOf<T> o;             // attention output                    [rows][h d]
  MatOf<T> x2, b;         // after the attention residual, ffn_norm(x2)   [rows][H]
  std::vector<T> r2;
  MatOf<T> u, g, s;       // w1 b, w3 b, silu(u) * g             [rows][F]

  void drop_ffn_intermediates() { u = g = s = MatOf<T>(); }
  void drop_all_but_input() {
    MatOf<T> keep = std::move(x);
    *this = LayerActs();
    x = std::move(keep);
  }
  size_t bytes() const {
    size_t n = static_cast<size_t>(x.size() + a.size() + o.size() + x2.size() + b.size() +
                                   u.size() + g.size() + s.size()) +
               r1.size() + r2.size();
    for (const auto& t : attn) n += t.q.size() + t.k.size() + t.v.size() + t.out.size() + t.lse.size();
    return n * sizeof(T);
  }
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
  // Offsets are kept relative to their unit's begin (a unit's parameters arrive as one
  // gathered buffer).
  auto open_unit = [&](const std::string& name) { units_.push_back({name, num_params_, 0}); };
  auto close_unit = [&] { units_.back().end = num_params_; };
  open_unit("tok_embeddings");
  tok_embeddings_ = add("tok_embeddings", m_.vocab, H, true);
  close_unit();
  for (int l = 0; l < m_.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    open_unit("layers." + std::to_string(l));
    const size_t b = num_params_;
    LayerOffsets o{};
    o.attention_norm = add(p + "attention_norm", 1, H, false) - b;
    o.wq = add(p + "attention.wq", H, qd, true) - b;
    o.wk = add(p + "attention.wk", H, kvd, true) - b;
    o.wv = add(p + "attention.wv", H, kvd, true) - b;
    o.wo = add(p + "attention.wo", qd, H, true) - b;
    o.ffn_norm = add(p + "ffn_norm", 1, H, false) - b;
    o.w1 = add(p + "feed_forward.w1", H, F, true) - b;
    o.w3 = add(p + "feed_forward.w3", H, F, true) - b;
    o.w2 = add(p + "feed_forward.w2", F, H, true) - b;
    layers_.push_back(o);
    close_unit();
  }
  open_unit("norm+output");
  const size_t head = num_params_;
  norm_ = add("norm", 1, H, false) - head;
  output_ = add("output", H, m_.vocab, true) - head;
  close_unit();
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
double Transformer::forward_backward(ParamAccess<T>& access, const TokenBatch& batch,
                                     double grad_scale, const AttentionFnOf<T>& attention_forward,
                                     const AttentionFnOf<T>& attention_backward,
                                     Checkpointing checkpointing, size_t* held_activation_bytes,
                                     PassTimes* times) const {
  using Mat = MatOf<T>;
  using CMap = Eigen::Map<const Mat>;
  using MMap = Eigen::Map<Mat>;
  const int H = m_.hidden, h = m_.heads, hkv = m_.kv_heads, d = m_.head_dim, F = m_.ffn_hidden,
            V = m_.vocab, L = m_.layers;
  const int64_t c = batch.c, n = batch.sequences, rows = n * c;  // rows: the batch's tokens
  const int64_t hd = int64_t{h} * d, kvd = int64_t{hkv} * d;
  const int head_unit = L + 1;
  const int32_t* tokens = batch.tokens;
  const int32_t* targets = batch.targets;
  auto W = [](const T* unit, size_t off, int64_t r, int64_t k) { return CMap(unit + off, r, k); };
  auto dW = [](T* unit, size_t off, int64_t r, int64_t k) { return MMap(unit + off, r, k); };
  // Laps of one clock: each stretch of this call goes to the GEMMs (lin), the elementwise
  // work (ew), or, for the attention calls and the collectives behind `access`, nowhere.
  PassTimes unused;
  PassTimes& pt = times ? *times : unused;
  double* const lin = &pt.linear_s;
  double* const ew = &pt.elementwise_s;
  auto lap_start = std::chrono::steady_clock::now();
  auto lap = [&](double* into) {
    const auto now = std::chrono::steady_clock::now();
    if (into) *into += std::chrono::duration<double>(now - lap_start).count();
    lap_start = now;
  };
  auto gather = [&](int u) { lap(ew); const T* p = access.gather(u); lap(nullptr); return p; };
  auto grads_of = [&](int u) { lap(ew); T* g = access.grads(u); lap(nullptr); return g; };
  auto done = [&](int u, bool reduce) {
    lap(ew);
    if (reduce) access.reduce(u);
    access.release(u);
    lap(nullptr);
  };

  // SwiGLU intermediates of block l from its stored FFN input A.b.   u, g, s [rows][F]
  auto swiglu = [&](int l, const T* p, LayerActs<T>& A) {
    const LayerOffsets& o = layers_[l];
    A.u = A.b * W(p, o.w1, H, F);
    A.g = A.b * W(p, o.w3, H, F);
    lap(lin);
    A.s = (A.u.array() / (T(1) + (-A.u.array()).exp())).matrix().cwiseProduct(A.g);  // silu(u) g
    lap(ew);
  };
  // Block l's forward from its stored input A.x with its parameters p: fills A and
  // returns the block's output [rows][H].
  auto layer_forward = [&](int l, const T* p, LayerActs<T>& A) -> Mat {
    const LayerOffsets& o = layers_[l];
    rmsnorm_forward<T>(A.x, p + o.attention_norm, A.a, A.r1);
    lap(ew);
    Mat q = A.a * W(p, o.wq, H, hd);    // [rows][h d]
    Mat k = A.a * W(p, o.wk, H, kvd);   // [rows][h_kv d]
    const Mat v = A.a * W(p, o.wv, H, kvd);
    lap(lin);
    rope<T>(q, h, d, batch.positions, c, T(1));
    rope<T>(k, hkv, d, batch.positions, c, T(1));
    A.attn.resize(static_cast<size_t>(n));
    A.o.resize(rows, hd);
    for (int64_t m = 0; m < n; ++m) {  // the ring joins one sequence at a time
      LayerAttention<T>& t = A.attn[static_cast<size_t>(m)];
      t.q = to_heads<T>(q, m * c, c, h, d);
      t.k = to_heads<T>(k, m * c, c, hkv, d);
      t.v = to_heads<T>(v, m * c, c, hkv, d);
      lap(ew);
      attention_forward(l, t);  // out [h][c][d], lse [h][c]
      lap(nullptr);
      from_heads<T>(t.out, h, d, c, A.o, m * c);
    }
    lap(ew);
    A.x2 = A.x + A.o * W(p, o.wo, hd, H);
    lap(lin);
    rmsnorm_forward<T>(A.x2, p + o.ffn_norm, A.b, A.r2);
    lap(ew);
    swiglu(l, p, A);
    Mat out = A.x2 + A.s * W(p, o.w2, F, H);
    lap(lin);
    return out;
  };

  // ---- embedding: x [rows][H]
  const T* pe = gather(0);
  Mat x(rows, H);
  for (int64_t i = 0; i < rows; ++i) x.row(i) = W(pe, tok_embeddings_, V, H).row(tokens[i]);
  done(0, false);

  // ---- layers, forward (each block gathered, run, released: resharded after forward)
  std::vector<LayerActs<T>> acts(static_cast<size_t>(L));
  size_t held = 0;
  for (int l = 0; l < L; ++l) {
    LayerActs<T>& A = acts[l];
    A.x = std::move(x);
    x = layer_forward(l, gather(l + 1), A);
    done(l + 1, false);
    if (checkpointing == Checkpointing::kFull) A.drop_all_but_input();
    if (checkpointing == Checkpointing::kSelective) A.drop_ffn_intermediates();
    held += A.bytes();
  }
  if (held_activation_bytes) *held_activation_bytes = held;

  // ---- head and loss: z [rows][H], logits [rows][V]
  const T* ph = gather(head_unit);
  Mat z;
  std::vector<T> rf;
  rmsnorm_forward<T>(x, ph + norm_, z, rf);
  lap(ew);
  Mat logits = z * W(ph, output_, H, V);
  lap(lin);
  double loss = 0;
  for (int64_t i = 0; i < rows; ++i) {  // logits become dlogits = (softmax - onehot) * scale
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
  T* gh = grads_of(head_unit);
  dW(gh, output_, H, V).noalias() += z.transpose() * logits;
  const Mat dz = logits * W(ph, output_, H, V).transpose();
  lap(lin);
  Mat dx = Mat::Zero(rows, H);
  rmsnorm_backward<T>(x, rf, ph + norm_, dz, dx, gh + norm_);
  done(head_unit, true);

  // ---- layers, backward: dx is d(loss)/d(layer output)
  for (int l = L - 1; l >= 0; --l) {
    const LayerOffsets& o = layers_[l];
    LayerActs<T>& A = acts[l];
    const T* p = gather(l + 1);
    if (checkpointing == Checkpointing::kFull) (void)layer_forward(l, p, A);  // recompute
    if (checkpointing == Checkpointing::kSelective) swiglu(l, p, A);
    T* gp = grads_of(l + 1);
    // feed-forward: x3 = x2 + s w2
    dW(gp, o.w2, F, H).noalias() += A.s.transpose() * dx;
    const Mat ds = dx * W(p, o.w2, F, H).transpose();  // [rows][F]
    lap(lin);
    const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> sig =
        T(1) / (T(1) + (-A.u.array()).exp());
    const Mat dg = (ds.array() * A.u.array() * sig).matrix();
    const Mat du = (ds.array() * A.g.array() * sig * (T(1) + A.u.array() * (T(1) - sig))).matrix();
    lap(ew);
    dW(gp, o.w1, H, F).noalias() += A.b.transpose() * du;
    dW(gp, o.w3, H, F).noalias() += A.b.transpose() * dg;
    const Mat db = du * W(p, o.w1, H, F).transpose() + dg * W(p, o.w3, H, F).transpose();
    lap(lin);
    Mat dx2 = dx;
    rmsnorm_backward<T>(A.x2, A.r2, p + o.ffn_norm, db, dx2, gp + o.ffn_norm);
    lap(ew);
    // attention: x2 = x + o wo
    dW(gp, o.wo, hd, H).noalias() += A.o.transpose() * dx2;
    const Mat dout = dx2 * W(p, o.wo, hd, H).transpose();  // [rows][h d]
    lap(lin);
    Mat dq(rows, hd), dk(rows, kvd), dv(rows, kvd);
    for (int64_t m = 0; m < n; ++m) {
      LayerAttention<T>& t = A.attn[static_cast<size_t>(m)];
      t.dout = to_heads<T>(dout, m * c, c, h, d);
      lap(ew);
      attention_backward(l, t);  // dq [h][c][d], dk, dv [h_kv][c][d]
      lap(nullptr);
      from_heads<T>(t.dq, h, d, c, dq, m * c);
      from_heads<T>(t.dk, hkv, d, c, dk, m * c);
      from_heads<T>(t.dv, hkv, d, c, dv, m * c);
    }
    rope<T>(dq, h, d, batch.positions, c, T(-1));
    rope<T>(dk, hkv, d, batch.positions, c, T(-1));
    lap(ew);
    dW(gp, o.wq, H, hd).noalias() += A.a.transpose() * dq;
    dW(gp, o.wk, H, kvd).noalias() += A.a.transpose() * dk;
    dW(gp, o.wv, H, kvd).noalias() += A.a.transpose() * dv;
    const Mat da = dq * W(p, o.wq, H, hd).transpose() + dk * W(p, o.wk, H, kvd).transpose() +
                   dv * W(p, o.wv, H, kvd).transpose();
    lap(lin);
    dx = std::move(dx2);
    rmsnorm_backward<T>(A.x, A.r1, p + o.attention_norm, da, dx, gp + o.attention_norm);
    done(l + 1, true);
    A = LayerActs<T>();  // this layer's activations are no longer needed
  }

  // ---- embedding, backward
  T* ge = grads_of(0);
  for (int64_t i = 0; i < rows; ++i) dW(ge, tok_embeddings_, V, H).row(tokens[i]) += dx.row(i);
  lap(ew);
  access.reduce(0);
  lap(nullptr);
  return loss;
}

template double Transformer::forward_backward<float>(ParamAccess<float>&, const TokenBatch&, double,
                                                     const AttentionFnOf<float>&,
                                                     const AttentionFnOf<float>&, Checkpointing,
                                                     size_t*, PassTimes*) const;
template double Transformer::forward_backward<double>(ParamAccess<double>&, const TokenBatch&,
                                                      double, const AttentionFnOf<double>&,
                                                      const AttentionFnOf<double>&, Checkpointing,
                                                      size_t*, PassTimes*) const;

}  // namespace rm::exec
