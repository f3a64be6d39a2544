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

}  // namespace

// Named, not anonymous: the pass's coroutine frame (external linkage) holds them.
namespace transformer_detail {

// What one layer's backward pass needs from its forward pass (rows = the batch's tokens;
// mr = this TP member's rows of them, all of them with tp 1).
template <class T>
struct LayerActs {
  Tensor<T> x, a;         // input, attention_norm(x)            [mr][H]
  Tensor<T> r1;           // its 1 / rms                         [mr][1]
  std::vector<LayerAttention<T>> attn;  // per sequence: q, k (after RoPE), v, out, lse
  Tensor<T> o;            // attention output                    [rows][h d]
  Tensor<T> x2, b;        // after the attention residual, ffn_norm(x2)   [mr][H]
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

}  // namespace transformer_detail

using transformer_detail::LayerActs;

size_t Transformer::add(const std::string& name, int64_t rows, int64_t cols, bool decay, TpSplit split,
                        bool held) {
  const int64_t r = split == TpSplit::kRows ? rows / tp_ : rows, k = split == TpSplit::kCols ? cols / tp_ : cols;
  const size_t offset = num_params_;
  if (held) {
    tensors_.push_back({name, num_params_, r, k, decay, split, full_params_});
    num_params_ += static_cast<size_t>(r * k);
  }
  full_params_ += static_cast<size_t>(rows * cols);
  return offset;
}

Transformer::Transformer(const ModelSpec& model, const std::string& where, const ModelPart& part)
    : m_(model), part_(part), tp_(part.tp), tp_rank_(part.tp_rank) {
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
  const int tp = part.tp, tp_rank = part.tp_rank;
  if (tp < 1 || tp_rank < 0 || tp_rank >= tp || m_.heads % tp != 0 || m_.kv_heads % tp != 0 ||
      m_.ffn_hidden % tp != 0 || m_.vocab % tp != 0)
    fail_input(where, "plan.tp",
               "tp " + std::to_string(tp) + " must divide the " + std::to_string(m_.heads) + " query heads, " +
                   std::to_string(m_.kv_heads) + " kv heads, FFN hidden size " + std::to_string(m_.ffn_hidden) +
                   " and vocabulary " + std::to_string(m_.vocab) + " of model " + m_.name);
  if (part_.chunks.empty()) part_.chunks = {{0, m_.layers}};
  for (size_t k = 0; k < part_.chunks.size(); ++k) {
    const LayerRange& r = part_.chunks[k];
    const bool ends = (k == 0 && part_.embedding) || (k + 1 == part_.chunks.size() && part_.head);
    if (r.first < 0 || r.count < 0 || r.first + r.count > m_.layers || (r.count == 0 && !ends) ||
        (k > 0 && r.first < part_.chunks[k - 1].first + part_.chunks[k - 1].count))
      throw std::logic_error("Transformer: pipeline chunks outside the model's layers, empty or out of order");
  }
  auto chunk_of = [&](int l) {
    for (size_t k = 0; k < part_.chunks.size(); ++k)
      if (l >= part_.chunks[k].first && l < part_.chunks[k].first + part_.chunks[k].count) return static_cast<int>(k);
    return -1;
  };
  const int64_t H = m_.hidden, qd = int64_t{m_.heads} * m_.head_dim,
                kvd = int64_t{m_.kv_heads} * m_.head_dim, F = m_.ffn_hidden;
  // Offsets are kept relative to their unit's begin (a unit's parameters arrive as one
  // gathered buffer). Every tensor of the whole model is counted (its full_offset), those
  // of the part held.
  auto open_unit = [&](const std::string& name, bool held, ParamUnit::Kind kind, int chunk) {
    if (held) units_.push_back({name, num_params_, 0, kind, chunk});
  };
  auto close_unit = [&](bool held) {
    if (held) units_.back().end = num_params_;
  };
  const bool e = part_.embedding;
  open_unit("tok_embeddings", e, ParamUnit::kEmbedding, 0);
  tok_embeddings_ = add("tok_embeddings", m_.vocab, H, true, TpSplit::kRows, e);
  close_unit(e);
  for (size_t k = 0; k < part_.chunks.size(); ++k) {  // its first block's unit, its first layer
    int before = 0;
    for (size_t j = 0; j < k; ++j) before += part_.chunks[j].count;
    chunk_unit0_.push_back((e ? 1 : 0) + before);
    chunk_layer0_.push_back(before);
  }
  for (int l = 0; l < m_.layers; ++l) {
    const bool held = chunk_of(l) >= 0;
    const std::string p = "layers." + std::to_string(l) + ".";
    open_unit("layers." + std::to_string(l), held, ParamUnit::kBlock, chunk_of(l));
    const size_t b = num_params_;
    LayerOffsets o{};
    o.attention_norm = add(p + "attention_norm", 1, H, false, TpSplit::kNone, held) - b;
    o.wq = add(p + "attention.wq", H, qd, true, TpSplit::kCols, held) - b;
    o.wk = add(p + "attention.wk", H, kvd, true, TpSplit::kCols, held) - b;
    o.wv = add(p + "attention.wv", H, kvd, true, TpSplit::kCols, held) - b;
    o.wo = add(p + "attention.wo", qd, H, true, TpSplit::kRows, held) - b;
    o.ffn_norm = add(p + "ffn_norm", 1, H, false, TpSplit::kNone, held) - b;
    o.w1 = add(p + "feed_forward.w1", H, F, true, TpSplit::kCols, held) - b;
    o.w3 = add(p + "feed_forward.w3", H, F, true, TpSplit::kCols, held) - b;
    o.w2 = add(p + "feed_forward.w2", F, H, true, TpSplit::kRows, held) - b;
    if (held) layers_.push_back(o);
    close_unit(held);
  }
  const bool h = part_.head;
  open_unit("norm+output", h, ParamUnit::kHead, chunks() - 1);
  const size_t head = num_params_;
  norm_ = add("norm", 1, H, false, TpSplit::kNone, h) - head;
  output_ = add("output", H, m_.vocab, true, TpSplit::kCols, h) - head;
  close_unit(h);
}

std::vector<float> Transformer::init(uint64_t seed) const {
  if (num_params_ != full_params_) return part_slice(Transformer(m_, m_.name).init(seed));
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

std::vector<PartRun> Transformer::part_runs(int member) const {
  std::vector<PartRun> runs;
  for (const ParamTensor& t : tensors_) {
    const auto rows = static_cast<size_t>(t.rows), cols = static_cast<size_t>(t.cols);
    const auto j = static_cast<size_t>(member);
    switch (t.split) {
      case TpSplit::kNone: runs.push_back({t.offset, t.full_offset, rows * cols}); break;
      case TpSplit::kRows: runs.push_back({t.offset, t.full_offset + j * rows * cols, rows * cols}); break;
      case TpSplit::kCols:  // row i of the member's [rows][cols] is columns [j cols, (j + 1) cols) of the whole's
        for (size_t i = 0; i < rows; ++i)
          runs.push_back({t.offset + i * cols, t.full_offset + (i * tp_ + j) * cols, cols});
        break;
    }
  }
  return runs;
}

std::vector<float> Transformer::part_slice(const std::vector<float>& full) const {
  if (full.size() != full_params_) throw std::logic_error("part_slice: not the whole model's vector");
  std::vector<float> mine(num_params_);
  for (const PartRun& r : part_runs(tp_rank_))
    std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(r.full), r.n, mine.begin() + static_cast<std::ptrdiff_t>(r.local));
  return mine;
}

std::vector<float> Transformer::part_join(const std::vector<float>& members) const {
  if (members.size() != num_params_ * static_cast<size_t>(tp_)) throw std::logic_error("part_join: not tp members' vectors");
  std::vector<float> full(full_params_);
  for (int j = 0; j < tp_; ++j) {
    const auto base = members.begin() + static_cast<std::ptrdiff_t>(num_params_ * static_cast<size_t>(j));
    for (const PartRun& r : part_runs(j))
      std::copy_n(base + static_cast<std::ptrdiff_t>(r.local), r.n, full.begin() + static_cast<std::ptrdiff_t>(r.full));
  }
  return full;
}

template <class T>
PassTask Transformer::pass(TrainKernels<T>& K, ParamAccess<T>& access, TokenBatch batch, double grad_scale,
                           AttentionFnOf<T> attention_forward, AttentionFnOf<T> attention_backward,
                           Checkpointing checkpointing, StageIo<T>* io, size_t* held_activation_bytes,
                           PassTimes* times, TensorParallel<T>* tp, int chunk) const {
  // This member's heads, FFN columns and vocabulary entries (all of them with tp 1), and
  // the chunk's L layers from the model's layer0 (all of them, the whole model), held in
  // layers_ from lo; the chunk has the model's embedding and head where it is its first
  // and its last.
  const LayerRange& range = part_.chunks.at(static_cast<size_t>(chunk));
  const int H = m_.hidden, h = m_.heads / tp_, hkv = m_.kv_heads / tp_, d = m_.head_dim,
            F = m_.ffn_hidden / tp_, V = m_.vocab / tp_, L = range.count, layer0 = range.first,
            lo = chunk_layer0_[static_cast<size_t>(chunk)];
  const bool embedding = part_.embedding && chunk == 0, head = part_.head && chunk + 1 == chunks();
  const int64_t c = batch.c, n = batch.sequences, rows = n * c;  // rows: the batch's tokens
  if (tp_ > 1 && (tp == nullptr || tp->size() != tp_ || tp->rank() != tp_rank_ || rows % tp_ != 0))
    throw std::logic_error("Transformer::pass: a TP member's pass needs its group and rows divisible by tp");
  if (io == nullptr && (!embedding || !head))
    throw std::logic_error("Transformer::pass: a pipeline chunk's pass needs its StageIo");
  // Sequence parallelism: this member's rows [mine0, mine0 + mr) between the parallel regions.
  const int64_t mr = rows / tp_, mine0 = mr * tp_rank_;
  const int64_t hd = int64_t{h} * d, kvd = int64_t{hkv} * d;
  // Units: the embedding's (0), the chunk's blocks' from block_unit0, the head's (the last).
  const int block_unit0 = chunk_unit0_[static_cast<size_t>(chunk)], head_unit = static_cast<int>(units_.size()) - 1;
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
  // Tensor + sequence parallelism (none of it runs with tp 1): every member's rows of x
  // [mr][cols] (kept in `keep`; with tp 1, x itself), and this member's rows of the sum of
  // the members' partial results [rows][cols].
  auto all_rows = [&](ConstView<T> x, Tensor<T>& keep) -> ConstView<T> {
    if (tp_ == 1) return x;
    keep = mat(rows, x.cols);
    lap(ew);
    tp->all_gather(x, keep);
    lap(nullptr);
    return keep;
  };
  auto my_rows_sum = [&](Tensor<T> partial) -> Tensor<T> {
    if (tp_ == 1) return partial;
    Tensor<T> mine = mat(mr, partial.cols());
    lap(ew);
    tp->reduce_scatter(partial, mine);
    lap(nullptr);
    return mine;
  };
  // resid + (in w) summed over the members, on this member's rows (a row-parallel GEMM).
  auto residual_add = [&](ConstView<T> resid, ConstView<T> in, ConstView<T> w) -> Tensor<T> {
    Tensor<T> out = mat(mr, H);
    if (tp_ == 1) {
      K.copy(out, resid);
      mm_add(in, w, out);
      lap(lin);
      return out;
    }
    Tensor<T> partial = mat(rows, H);
    mm(in, w, partial);
    lap(lin);
    out = my_rows_sum(std::move(partial));
    K.add(out, resid);
    lap(ew);
    return out;
  };
  // RMSNorm's backward; a norm gain's gradient summed over the members (each saw its rows).
  auto norm_backward = [&](ConstView<T> x, ConstView<T> r, const T* g, ConstView<T> dy, View<T> dx, T* dg) {
    if (tp_ == 1) {
      K.rmsnorm_backward(x, r, g, dy, dx, dg);
      lap(ew);
      return;
    }
    Tensor<T> part = mat(1, H);
    K.zero(part);
    K.rmsnorm_backward(x, r, g, dy, dx, part.data());
    lap(ew);
    tp->all_reduce(part);
    lap(nullptr);
    K.add(View<T>{dg, 1, H}, part);
    lap(ew);
  };
  // Sequence m's rows of x [rows][heads d] as a head-major tensor [heads][c d], and back.
  auto heads_of = [&](ConstView<T> x, int64_t m, int heads) {
    Tensor<T> t = mat(heads, c * d);
    K.to_heads(x, m * c, heads, d, t);
    return t;
  };

  // SwiGLU intermediates of block l from its FFN input b (every member's rows).   u, g, s [rows][F]
  auto swiglu = [&](int l, const T* p, LayerActs<T>& A, ConstView<T> b) {
    const LayerOffsets& o = layers_[lo + l];
    A.u = mat(rows, F);
    A.g = mat(rows, F);
    mm(b, W(p, o.w1, H, F), A.u);
    mm(b, W(p, o.w3, H, F), A.g);
    lap(lin);
    A.s = mat(rows, F);
    K.swiglu_forward(A.u, A.g, A.s);  // silu(u) g
    lap(ew);
  };
  // Block l's forward from its stored input A.x with its parameters p: fills A and
  // returns the block's output [rows][H].
  auto layer_forward = [&](int l, const T* p, LayerActs<T>& A) -> Tensor<T> {
    const LayerOffsets& o = layers_[lo + l];
    A.a = mat(mr, H);
    A.r1 = mat(mr, 1);
    K.rmsnorm_forward(A.x, p + o.attention_norm, A.a, A.r1);
    lap(ew);
    Tensor<T> a_all;  // the QKV GEMMs' input: every member's rows
    const ConstView<T> as = all_rows(A.a, a_all);
    Tensor<T> q = mat(rows, hd), k = mat(rows, kvd), v = mat(rows, kvd);
    mm(as, W(p, o.wq, H, hd), q);
    mm(as, W(p, o.wk, H, kvd), k);
    mm(as, W(p, o.wv, H, kvd), v);
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
      attention_forward(layer0 + l, t);  // out [h][c][d], lse [h][c]
      lap(nullptr);
      K.from_heads(t.out, h, d, A.o, m * c);
    }
    lap(ew);
    A.x2 = residual_add(A.x, A.o, W(p, o.wo, hd, H));  // x + o wo
    A.b = mat(mr, H);
    A.r2 = mat(mr, 1);
    K.rmsnorm_forward(A.x2, p + o.ffn_norm, A.b, A.r2);
    lap(ew);
    Tensor<T> b_all;  // the FFN GEMMs' input: every member's rows
    swiglu(l, p, A, all_rows(A.b, b_all));
    return residual_add(A.x2, A.s, W(p, o.w2, F, H));  // x2 + s w2
  };

  // ---- embedding: x [mr][H]. Vocabulary-parallel (Megatron's VocabParallelEmbedding):
  // a member looks up the tokens of its V entries, the others read a zero row (the
  // table's copy below, row V), and the rows are summed over the members.
  std::vector<int32_t> my_tokens;  // the tokens as rows of the table's copy
  if (tp_ > 1 && embedding)
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t local = tokens[i] - static_cast<int32_t>(V * tp_rank_);
      my_tokens.push_back(local >= 0 && local < V ? local : V);
    }
  Tensor<T> x;
  if (!embedding) {  // a later pipeline chunk: the previous one's output
    x = mat(mr, H);
    K.copy(x, io->input);
  } else if (tp_ == 1) {
    const T* pe = gather(0);
    x = mat(rows, H);
    K.embedding_forward(W(pe, tok_embeddings_, V, H), tokens, x);
  } else {
    const T* pe = gather(0);
    Tensor<T> table = mat(V + 1, H), partial = mat(rows, H);
    K.copy(View<T>{table.data(), V, H}, W(pe, tok_embeddings_, V, H));
    K.zero(View<T>{table.data() + int64_t{V} * H, 1, H});
    K.embedding_forward(table, my_tokens.data(), partial);
    x = my_rows_sum(std::move(partial));
  }
  if (embedding) done(0, false);

  // ---- layers, forward (each block gathered, run, released: resharded after forward)
  std::vector<LayerActs<T>> acts(static_cast<size_t>(L));
  size_t held = 0;
  for (int i = 0; i < L; ++i) {
    LayerActs<T>& A = acts[i];
    A.x = std::move(x);
    x = layer_forward(i, gather(block_unit0 + i), A);
    done(block_unit0 + i, false);
    if (checkpointing == Checkpointing::kFull) A.drop_all_but_input();
    if (checkpointing == Checkpointing::kSelective) A.drop_ffn_intermediates();
    held += A.bytes();
  }
  if (held_activation_bytes) *held_activation_bytes = held;
  // Between the forward and the backward the pass is suspended (PassTask): other passes
  // may run, so the clock restarts on resuming.
  auto suspended = [&] {
    lap(nullptr);
    return std::suspend_always{};
  };
  auto resumed = [&] { lap_start = std::chrono::steady_clock::now(); };

  double loss = 0;
  Tensor<T> dx;
  if (!head) {  // ---- the next chunk's input; later, the gradient of it
    io->output = std::move(x);
    co_await suspended();
    resumed();
    dx = mat(mr, H);
    K.copy(dx, io->grad);
  } else {
    // ---- head and loss: z [mr][H], logits [rows][V] (the member's vocabulary entries)
    const T* ph = gather(head_unit);
    Tensor<T> z = mat(mr, H), rf = mat(mr, 1);
    K.rmsnorm_forward(x, ph + norm_, z, rf);
    lap(ew);
    Tensor<T> z_all;
    const ConstView<T> zs = all_rows(z, z_all);
    Tensor<T> logits = mat(rows, V);
    mm(zs, W(ph, output_, H, V), logits);
    lap(lin);
    // logits become dlogits = (softmax - onehot) * grad_scale. With tp > 1 the softmax
    // needs every vocabulary entry: the all-to-all gives this member its rows' logits from
    // every member ([tp][mr][V], member-major: from_heads lays them side by side), and the
    // gradient goes back the same way.
    if (tp_ == 1) {
      loss = K.cross_entropy(logits, targets, grad_scale);
    } else {
      Tensor<T> parts = mat(tp_, mr * V), whole = mat(mr, int64_t{V} * tp_);
      lap(ew);
      tp->all_to_all(View<T>{logits.data(), tp_, mr * V}, parts);
      lap(nullptr);
      K.from_heads(parts, tp_, V, whole, 0);
      loss = K.cross_entropy(whole, targets + mine0, grad_scale);
      K.to_heads(whole, 0, tp_, V, parts);
      lap(ew);
      tp->all_to_all(parts, View<T>{logits.data(), tp_, mr * V});
      lap(nullptr);
    }

    co_await suspended();
    resumed();

    // ---- head, backward
    T* gh = grads_of(head_unit);
    mm_tn_add(zs, logits, dW(gh, output_, H, V));
    Tensor<T> dz_all = mat(rows, H);
    mm_nt(logits, W(ph, output_, H, V), dz_all);
    lap(lin);
    Tensor<T> dz = my_rows_sum(std::move(dz_all));
    dx = mat(mr, H);
    K.zero(dx);
    norm_backward(x, rf, ph + norm_, dz, dx, gh + norm_);
    done(head_unit, true);
  }

  // ---- layers, backward: dx is d(loss)/d(layer output)
  for (int l = L - 1; l >= 0; --l) {
    const LayerOffsets& o = layers_[lo + l];
    LayerActs<T>& A = acts[l];
    const T* p = gather(block_unit0 + l);
    if (checkpointing == Checkpointing::kFull) (void)layer_forward(l, p, A);  // recompute
    // The norm outputs were stored as this member's rows (Megatron-Core's
    // sequence-parallel Linears save their input split): every member's again, for the
    // weight gradients and the SwiGLU recompute (with tp 1, A.a and A.b themselves).
    Tensor<T> a_all, b_all;
    const ConstView<T> as = all_rows(A.a, a_all), bs = all_rows(A.b, b_all);
    if (checkpointing == Checkpointing::kSelective) swiglu(l, p, A, bs);
    T* gp = grads_of(block_unit0 + l);
    // feed-forward: x3 = x2 + s w2
    Tensor<T> dx_all;
    const ConstView<T> dxs = all_rows(dx, dx_all);
    mm_tn_add(A.s, dxs, dW(gp, o.w2, F, H));
    Tensor<T> ds = mat(rows, F);
    mm_nt(dxs, W(p, o.w2, F, H), ds);
    lap(lin);
    Tensor<T> du = mat(rows, F), dg = mat(rows, F);
    K.swiglu_backward(ds, A.u, A.g, du, dg);
    lap(ew);
    mm_tn_add(bs, du, dW(gp, o.w1, H, F));
    mm_tn_add(bs, dg, dW(gp, o.w3, H, F));
    Tensor<T> db = mat(rows, H);
    mm_nt(du, W(p, o.w1, H, F), db);
    mm_nt_add(dg, W(p, o.w3, H, F), db);
    lap(lin);
    db = my_rows_sum(std::move(db));
    Tensor<T> dx2 = mat(mr, H);
    K.copy(dx2, dx);
    norm_backward(A.x2, A.r2, p + o.ffn_norm, db, dx2, gp + o.ffn_norm);
    // attention: x2 = x + o wo
    Tensor<T> dx2_all;
    const ConstView<T> dx2s = all_rows(dx2, dx2_all);
    mm_tn_add(A.o, dx2s, dW(gp, o.wo, hd, H));
    Tensor<T> dout = mat(rows, hd);
    mm_nt(dx2s, W(p, o.wo, hd, H), dout);
    lap(lin);
    Tensor<T> dq = mat(rows, hd), dk = mat(rows, kvd), dv = mat(rows, kvd);
    for (int64_t m = 0; m < n; ++m) {
      LayerAttention<T>& t = A.attn[static_cast<size_t>(m)];
      t.dout = heads_of(dout, m, h);
      t.dq = mat(h, c * d);
      t.dk = mat(hkv, c * d);
      t.dv = mat(hkv, c * d);
      lap(ew);
      attention_backward(layer0 + l, t);  // dq [h][c][d], dk, dv [h_kv][c][d]
      lap(nullptr);
      K.from_heads(t.dq, h, d, dq, m * c);
      K.from_heads(t.dk, hkv, d, dk, m * c);
      K.from_heads(t.dv, hkv, d, dv, m * c);
    }
    K.rope(dq, h, d, batch.positions, c, -1);
    K.rope(dk, hkv, d, batch.positions, c, -1);
    lap(ew);
    mm_tn_add(as, dq, dW(gp, o.wq, H, hd));
    mm_tn_add(as, dk, dW(gp, o.wk, H, kvd));
    mm_tn_add(as, dv, dW(gp, o.wv, H, kvd));
    Tensor<T> da = mat(rows, H);
    mm_nt(dq, W(p, o.wq, H, hd), da);
    mm_nt_add(dk, W(p, o.wk, H, kvd), da);
    mm_nt_add(dv, W(p, o.wv, H, kvd), da);
    lap(lin);
    da = my_rows_sum(std::move(da));
    dx = std::move(dx2);
    norm_backward(A.x, A.r1, p + o.attention_norm, da, dx, gp + o.attention_norm);
    done(block_unit0 + l, true);
    A = LayerActs<T>();  // this layer's activations are no longer needed
  }

  if (!embedding) {  // ---- the gradient of the previous chunk's output
    io->input_grad = std::move(dx);
    lap(ew);
    co_return loss;
  }
  // ---- embedding, backward
  T* ge = grads_of(0);
  if (tp_ == 1) {
    K.embedding_backward(dx, tokens, dW(ge, tok_embeddings_, V, H));
  } else {  // every member's rows, into the table's copy; its zero row's sum dropped
    Tensor<T> dx_all, dtable = mat(V + 1, H);
    const ConstView<T> dxs = all_rows(dx, dx_all);
    K.zero(dtable);
    K.embedding_backward(dxs, my_tokens.data(), dtable);
    K.add(dW(ge, tok_embeddings_, V, H), ConstView<T>{dtable.data(), V, H});
  }
  lap(ew);
  access.reduce(0);
  lap(nullptr);
  co_return loss;
}

#define RM_TRANSFORMER_PASS(T)                                                                              \
  template PassTask Transformer::pass<T>(TrainKernels<T>&, ParamAccess<T>&, TokenBatch, double, AttentionFnOf<T>, \
                                         AttentionFnOf<T>, Checkpointing, StageIo<T>*, size_t*, PassTimes*,       \
                                         TensorParallel<T>*, int) const;
RM_TRANSFORMER_PASS(float)
RM_TRANSFORMER_PASS(double)
RM_TRANSFORMER_PASS(Bf16)
#undef RM_TRANSFORMER_PASS

}  // namespace rm::exec
