// The transformer's forward and backward pass on one rank's tokens (see transformer.h).
// Reads top to bottom as llm.c does: embedding, layers, head and loss, then the same
// backwards; each block comments its tensors' shapes.
#include "executor/transformer.h"

#include <chrono>
#include <cmath>
#include <limits>

#include "executor/token_stream.h"
#include "planner/input_error.h"

namespace rm::exec {

namespace {

// Initialisation std of GPT-2 / Megatron-LM (--init-method-std 0.02).
constexpr double kInitStd = 0.02;

// What one layer's backward pass needs from its forward pass (rows = the batch's tokens).
template <class T>
struct LayerActs {
  Tensor<T> x, a;         // input, attention_norm(x)            [rows][H]
  Tensor<T> r1;           // its 1 / rms                         [rows][1]
  std::vector<LayerAttention<T>> attn;  // per sequence: q, k (after RoPE), v, out, lse
  Tensor<T> o;            // attention output                    [rows][h d]
  Tensor<T> x2, b;        // after the attention residual, ffn_norm(x2)   [rows][H]
  Tensor<T> r2;
  Tensor<T> u, g, s;      // w1 b, w3 b, silu(u) * g             [rows][F]

  void drop_ffn_intermediates() {
    u = Tensor<T>();
    g = Tensor<T>();
    s = Tensor<T>();
  }
  void drop_all_but_input() {
    Tensor<T> keep = std::move(x);
    *this = LayerActs();
    x = std::move(keep);
  }
  size_t bytes() const {
    size_t n = static_cast<size_t>(x.size() + a.size() + r1.size() + o.size() + x2.size() +
                                   b.size() + r2.size() + u.size() + g.size() + s.size());
    size_t views = 0;
    for (const auto& t : attn) {
      n += static_cast<size_t>(t.q.size() + t.k.size() + t.v.size() + t.out.size() + t.lse.size());
      views += t.a2a_view.size() * sizeof(float);
    }
    return n * sizeof(T) + views;
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
double Transformer::forward_backward(TrainKernels<T>& K, ParamAccess<T>& access,
                                     const TokenBatch& batch, double grad_scale,
                                     const AttentionFnOf<T>& attention_forward,
                                     const AttentionFnOf<T>& attention_backward,
                                     Checkpointing checkpointing, size_t* held_activation_bytes,
                                     PassTimes* times) const {
  const int H = m_.hidden, h = m_.heads, hkv = m_.kv_heads, d = m_.head_dim, F = m_.ffn_hidden,
            V = m_.vocab, L = m_.layers;
  const int64_t c = batch.c, n = batch.sequences, rows = n * c;  // rows: the batch's tokens
  const int64_t hd = int64_t{h} * d, kvd = int64_t{hkv} * d;
  const int head_unit = L + 1;
  const int32_t* tokens = batch.tokens;
  const int32_t* targets = batch.targets;
  auto W = [](const T* unit, size_t off, int64_t r, int64_t k) { return ConstView<T>{unit + off, r, k}; };
  auto dW = [](T* unit, size_t off, int64_t r, int64_t k) { return View<T>{unit + off, r, k}; };
  auto mat = [&](int64_t r, int64_t k) { return K.alloc(r, k); };
  // The GEMMs: c = a b, c += a b, c += a^T b (weight gradients), c (+)= a b^T.
  auto mm = [&](ConstView<T> a, ConstView<T> b, View<T> out) { K.gemm(a, false, b, false, out, false); };
  auto mm_add = [&](ConstView<T> a, ConstView<T> b, View<T> out) { K.gemm(a, false, b, false, out, true); };
  auto mm_tn_add = [&](ConstView<T> a, ConstView<T> b, View<T> out) { K.gemm(a, true, b, false, out, true); };
  auto mm_nt = [&](ConstView<T> a, ConstView<T> b, View<T> out) { K.gemm(a, false, b, true, out, false); };
  auto mm_nt_add = [&](ConstView<T> a, ConstView<T> b, View<T> out) { K.gemm(a, false, b, true, out, true); };
  // Laps of one clock: each stretch of this call goes to the GEMMs (lin), the elementwise
  // work (ew), or, for the attention calls and the collectives behind `access`, nowhere.
  PassTimes unused;
  PassTimes& pt = times ? *times : unused;
  double* const lin = &pt.linear_s;
  double* const ew = &pt.elementwise_s;
  auto lap_start = std::chrono::steady_clock::now();
  auto lap = [&](double* into) {
    K.synchronize();
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
  // Sequence m's rows of x [rows][heads d] as a head-major tensor [heads][c d], and back.
  auto heads_of = [&](ConstView<T> x, int64_t m, int heads) {
    Tensor<T> t = mat(heads, c * d);
    K.to_heads(x, m * c, heads, d, t);
    return t;
  };

  // SwiGLU intermediates of block l from its stored FFN input A.b.   u, g, s [rows][F]
  auto swiglu = [&](int l, const T* p, LayerActs<T>& A) {
    const LayerOffsets& o = layers_[l];
    A.u = mat(rows, F);
    A.g = mat(rows, F);
    mm(A.b, W(p, o.w1, H, F), A.u);
    mm(A.b, W(p, o.w3, H, F), A.g);
    lap(lin);
    A.s = mat(rows, F);
    K.swiglu_forward(A.u, A.g, A.s);  // silu(u) g
    lap(ew);
  };
  // Block l's forward from its stored input A.x with its parameters p: fills A and
  // returns the block's output [rows][H].
  auto layer_forward = [&](int l, const T* p, LayerActs<T>& A) -> Tensor<T> {
    const LayerOffsets& o = layers_[l];
    A.a = mat(rows, H);
    A.r1 = mat(rows, 1);
    K.rmsnorm_forward(A.x, p + o.attention_norm, A.a, A.r1);
    lap(ew);
    Tensor<T> q = mat(rows, hd), k = mat(rows, kvd), v = mat(rows, kvd);
    mm(A.a, W(p, o.wq, H, hd), q);
    mm(A.a, W(p, o.wk, H, kvd), k);
    mm(A.a, W(p, o.wv, H, kvd), v);
    lap(lin);
    K.rope(q, h, d, batch.positions, c, 1);
    K.rope(k, hkv, d, batch.positions, c, 1);
    A.attn.resize(static_cast<size_t>(n));
    A.o = mat(rows, hd);
    for (int64_t m = 0; m < n; ++m) {  // the ring joins one sequence at a time
      LayerAttention<T>& t = A.attn[static_cast<size_t>(m)];
      t.q = heads_of(q, m, h);
      t.k = heads_of(k, m, hkv);
      t.v = heads_of(v, m, hkv);
      t.out = mat(h, c * d);
      t.lse = mat(h, c);
      lap(ew);
      attention_forward(l, t);  // out [h][c][d], lse [h][c]
      lap(nullptr);
      K.from_heads(t.out, h, d, A.o, m * c);
    }
    lap(ew);
    A.x2 = mat(rows, H);  // x + o wo
    K.copy(A.x2, A.x);
    mm_add(A.o, W(p, o.wo, hd, H), A.x2);
    lap(lin);
    A.b = mat(rows, H);
    A.r2 = mat(rows, 1);
    K.rmsnorm_forward(A.x2, p + o.ffn_norm, A.b, A.r2);
    lap(ew);
    swiglu(l, p, A);
    Tensor<T> out = mat(rows, H);  // x2 + s w2
    K.copy(out, A.x2);
    mm_add(A.s, W(p, o.w2, F, H), out);
    lap(lin);
    return out;
  };

  // ---- embedding: x [rows][H]
  const T* pe = gather(0);
  Tensor<T> x = mat(rows, H);
  K.embedding_forward(W(pe, tok_embeddings_, V, H), tokens, x);
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
  Tensor<T> z = mat(rows, H), rf = mat(rows, 1);
  K.rmsnorm_forward(x, ph + norm_, z, rf);
  lap(ew);
  Tensor<T> logits = mat(rows, V);
  mm(z, W(ph, output_, H, V), logits);
  lap(lin);
  // logits become dlogits = (softmax - onehot) * grad_scale
  const double loss = K.cross_entropy(logits, targets, grad_scale);

  // ---- head, backward
  T* gh = grads_of(head_unit);
  mm_tn_add(z, logits, dW(gh, output_, H, V));
  Tensor<T> dz = mat(rows, H);
  mm_nt(logits, W(ph, output_, H, V), dz);
  lap(lin);
  Tensor<T> dx = mat(rows, H);
  K.zero(dx);
  K.rmsnorm_backward(x, rf, ph + norm_, dz, dx, gh + norm_);
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
    mm_tn_add(A.s, dx, dW(gp, o.w2, F, H));
    Tensor<T> ds = mat(rows, F);
    mm_nt(dx, W(p, o.w2, F, H), ds);
    lap(lin);
    Tensor<T> du = mat(rows, F), dg = mat(rows, F);
    K.swiglu_backward(ds, A.u, A.g, du, dg);
    lap(ew);
    mm_tn_add(A.b, du, dW(gp, o.w1, H, F));
    mm_tn_add(A.b, dg, dW(gp, o.w3, H, F));
    Tensor<T> db = mat(rows, H);
    mm_nt(du, W(p, o.w1, H, F), db);
    mm_nt_add(dg, W(p, o.w3, H, F), db);
    lap(lin);
    Tensor<T> dx2 = mat(rows, H);
    K.copy(dx2, dx);
    K.rmsnorm_backward(A.x2, A.r2, p + o.ffn_norm, db, dx2, gp + o.ffn_norm);
    lap(ew);
    // attention: x2 = x + o wo
    mm_tn_add(A.o, dx2, dW(gp, o.wo, hd, H));
    Tensor<T> dout = mat(rows, hd);
    mm_nt(dx2, W(p, o.wo, hd, H), dout);
    lap(lin);
    Tensor<T> dq = mat(rows, hd), dk = mat(rows, kvd), dv = mat(rows, kvd);
    for (int64_t m = 0; m < n; ++m) {
      LayerAttention<T>& t = A.attn[static_cast<size_t>(m)];
      t.dout = heads_of(dout, m, h);
      t.dq = mat(h, c * d);
      t.dk = mat(hkv, c * d);
      t.dv = mat(hkv, c * d);
      lap(ew);
      attention_backward(l, t);  // dq [h][c][d], dk, dv [h_kv][c][d]
      lap(nullptr);
      K.from_heads(t.dq, h, d, dq, m * c);
      K.from_heads(t.dk, hkv, d, dk, m * c);
      K.from_heads(t.dv, hkv, d, dv, m * c);
    }
    K.rope(dq, h, d, batch.positions, c, -1);
    K.rope(dk, hkv, d, batch.positions, c, -1);
    lap(ew);
    mm_tn_add(A.a, dq, dW(gp, o.wq, H, hd));
    mm_tn_add(A.a, dk, dW(gp, o.wk, H, kvd));
    mm_tn_add(A.a, dv, dW(gp, o.wv, H, kvd));
    Tensor<T> da = mat(rows, H);
    mm_nt(dq, W(p, o.wq, H, hd), da);
    mm_nt_add(dk, W(p, o.wk, H, kvd), da);
    mm_nt_add(dv, W(p, o.wv, H, kvd), da);
    lap(lin);
    dx = std::move(dx2);
    K.rmsnorm_backward(A.x, A.r1, p + o.attention_norm, da, dx, gp + o.attention_norm);
    done(l + 1, true);
    A = LayerActs<T>();  // this layer's activations are no longer needed
  }

  // ---- embedding, backward
  T* ge = grads_of(0);
  K.embedding_backward(dx, tokens, dW(ge, tok_embeddings_, V, H));
  lap(ew);
  access.reduce(0);
  lap(nullptr);
  return loss;
}

template double Transformer::forward_backward<float>(TrainKernels<float>&, ParamAccess<float>&,
                                                     const TokenBatch&, double,
                                                     const AttentionFnOf<float>&,
                                                     const AttentionFnOf<float>&, Checkpointing,
                                                     size_t*, PassTimes*) const;
template double Transformer::forward_backward<double>(TrainKernels<double>&, ParamAccess<double>&,
                                                      const TokenBatch&, double, const AttentionFnOf<double>&,
                                                      const AttentionFnOf<double>&, Checkpointing,
                                                      size_t*, PassTimes*) const;
template double Transformer::forward_backward<Bf16>(TrainKernels<Bf16>&, ParamAccess<Bf16>&, const TokenBatch&,
                                                    double, const AttentionFnOf<Bf16>&, const AttentionFnOf<Bf16>&,
                                                    Checkpointing, size_t*, PassTimes*) const;

}  // namespace rm::exec
