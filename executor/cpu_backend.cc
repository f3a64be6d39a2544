// The cpu backend (see cpu_backend.h): tensors are std::vector<float> in the head-major
// layouts of backend.h; schedule buffers are keyed by buffer id.
#include "executor/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <Eigen/Core>

#include "executor/buffer_table.h"
#include "executor/cpu_attention.h"
#include "executor/mpi_transport.h"

namespace rm::exec {

namespace {


class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void setup(const AttentionShape& shape, const std::vector<int64_t>& tokens,
             uint64_t seed) override {
    Eigen::setNbThreads(1);
    shape_ = shape;
    scale_ = 1.0f / std::sqrt(static_cast<float>(shape.d));
    tiles_ = {shape.block_q, shape.block_kv, shape.causal, shape.window, [this] { progress(); }};
    seq_.size(shape.c, shape.h, shape.h_kv, shape.d);
    seq_.tokens = tokens;
    seq_.q = make_input(seed, InputTensor::kQ, shape.h);
    seq_.k = make_input(seed, InputTensor::kK, shape.h_kv);
    seq_.v = make_input(seed, InputTensor::kV, shape.h_kv);
    seq_.dout = make_input(seed, InputTensor::kDout, shape.h);
    if (shape.segments < 1 || shape.c % shape.segments != 0)
      throw std::runtime_error("cpu backend: c = " + std::to_string(shape.c) +
                               " tokens do not split into " + std::to_string(shape.segments) +
                               " segments");
    ring_ = &seq_;
  }

  void alloc(int buffer, BufferRole role) override {
    // K|V or dK|dV of one block (the view's blocks hold as many elements as the rank's);
    // an all-to-all's block holds its largest message, Q|K|V of one member.
    const size_t n = role == BufferRole::kA2a ? a2a_bytes(A2aPayload::kQkv) / sizeof(float) : 2 * seq_.kv_elems();
    buffers_.add(buffer, role, std::vector<float>(n, 0.0f));
  }
  void free(int buffer) override { buffers_.remove(buffer); }
  std::size_t bytes_of(int buffer) const override { return buffers_.get(buffer).size() * sizeof(float); }
  void load_own_kv(int buffer) override {
    const Level& r = *ring_;
    std::vector<float>& b = buffers_.get(buffer, BufferRole::kKv);
    std::copy(r.k.begin(), r.k.end(), b.begin());
    std::copy(r.v.begin(), r.v.end(), b.begin() + r.kv_elems());
  }
  void zero(int buffer) override {
    std::vector<float>& b = buffers_.get(buffer, BufferRole::kDkv);
    std::fill(b.begin(), b.end(), 0.0f);
  }

  // Both levels start afresh (a2a: the view is what the ring kernels and the out all-to-all read).
  void begin_forward() override {
    for (Level* l : {&seq_, &view_}) {
      std::fill(l->out.begin(), l->out.end(), 0.0f);
      std::fill(l->lse.begin(), l->lse.end(), kNegInf);
    }
  }

  void attention_forward(int kv_buffer, const std::vector<int64_t>& kv_tokens) override {
    Level& r = *ring_;
    check_kv_tokens("cpu", kv_tokens.size(), r.tokens.size());
    const float* kv = buffers_.get(kv_buffer, BufferRole::kKv).data();
    const int64_t d = shape_.d;
    for_each_block(r, [&](int j, int g, int64_t q0, int64_t k0, int64_t seg) {
      attention_block_forward(r.q.data() + j * r.head + q0 * d, r.tokens.data() + q0, seg,
                              kv + g * r.head + k0 * d, kv + r.kv_elems() + g * r.head + k0 * d,
                              kv_tokens.data() + k0, seg, shape_.d, scale_, tiles_,
                              block_out_.data(), block_lse_.data());
      merge_out_lse(r.out.data() + j * r.head + q0 * d, r.lse.data() + j * r.c + q0,
                    block_out_.data(), block_lse_.data(), seg, shape_.d);
    });
  }

  // The sequence-sharded level's D (a2a: the view's comes with its dO, in the dout unpack).
  void begin_backward() override {
    seq_.begin_backward(shape_.d);
  }

  void attention_backward(int kv_buffer, const std::vector<int64_t>& kv_tokens,
                          int dkv_buffer) override {
    Level& r = *ring_;
    check_kv_tokens("cpu", kv_tokens.size(), r.tokens.size());
    const float* kv = buffers_.get(kv_buffer, BufferRole::kKv).data();
    float* dkv = buffers_.get(dkv_buffer, BufferRole::kDkv).data();
    std::fill(dkv, dkv + 2 * r.kv_elems(), 0.0f);
    const int64_t d = shape_.d;
    for_each_block(r, [&](int j, int g, int64_t q0, int64_t k0, int64_t seg) {
      const int64_t qo = j * r.head + q0 * d, ko = g * r.head + k0 * d;
      attention_block_backward(r.q.data() + qo, r.dout.data() + qo, r.lse.data() + j * r.c + q0,
                               r.rowdot.data() + j * r.c + q0, r.tokens.data() + q0, seg,
                               kv + ko, kv + r.kv_elems() + ko, kv_tokens.data() + k0, seg,
                               shape_.d, scale_, tiles_, r.dq.data() + qo, dkv + ko,
                               dkv + r.kv_elems() + ko);
    });
  }

  void accumulate(int dst_buffer, int src_buffer) override {
    std::vector<float>& dst = buffers_.get(dst_buffer, BufferRole::kDkv);
    const std::vector<float>& src = buffers_.get(src_buffer, BufferRole::kDkv);
    for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
  }

  void take_own_dkv(int buffer, bool add) override {
    Level& r = *ring_;
    const std::vector<float>& b = buffers_.get(buffer, BufferRole::kDkv);
    for (size_t i = 0; i < r.kv_elems(); ++i) {
      r.dk[i] = (add ? r.dk[i] : 0.0f) + b[i];
      r.dv[i] = (add ? r.dv[i] : 0.0f) + b[r.kv_elems() + i];
    }
  }

  // --- a2a: the head-sharded view (backend.h) -------------------------------------------
  // The view's rows are the group's tokens in increasing order: all N under a2a, the ring
  // position's block under a2a+p2p, whose ring kernels then work on the view.
  void a2a_connect(int me, const std::vector<std::vector<int64_t>>& member_tokens) override {
    const int n = static_cast<int>(member_tokens.size());
    if (n < 1 || me < 0 || me >= n || shape_.h % n != 0 || shape_.h_kv % n != 0)
      throw std::runtime_error("cpu backend: an all-to-all over " + std::to_string(n) + " members splits " +
                               std::to_string(shape_.h) + " query and " + std::to_string(shape_.h_kv) +
                               " K,V heads unevenly (schedule error)");
    me_ = me;
    members_ = member_tokens;
    std::vector<int64_t> all;
    for (const auto& t : member_tokens) all.insert(all.end(), t.begin(), t.end());
    std::sort(all.begin(), all.end());
    view_.size(static_cast<int64_t>(all.size()), shape_.h / n, shape_.h_kv / n, shape_.d);
    view_.tokens = std::move(all);
    if (view_.c % shape_.segments != 0)
      throw std::runtime_error("cpu backend: the all-to-all's view of " + std::to_string(view_.c) +
                               " tokens does not split into " + std::to_string(shape_.segments) + " segments");
    ring_ = &view_;
  }

  std::size_t a2a_bytes(A2aPayload what) const override {
    std::size_t heads = 0;
    for (const A2aPart& p : a2a_parts(what)) heads += static_cast<size_t>(p.heads);
    return heads * static_cast<size_t>(seq_.head) * sizeof(float);
  }

  void a2a_pack(A2aPayload what, const std::vector<int>& blocks) override {
    const auto parts = a2a_parts(what);
    const bool to_heads = what == A2aPayload::kQkv || what == A2aPayload::kDout;
    const int64_t c = seq_.c, d = shape_.d;
    for (int j = 0; j < static_cast<int>(blocks.size()); ++j) {
      float* block = j == me_ ? nullptr : buffers_.get(blocks[j], BufferRole::kA2a).data();
      for (const A2aPart& p : parts) {
        for (int a = 0; a < p.heads; ++a)
          for (int64_t i = 0; i < c; ++i) {
            // seq: this rank's row i of head (member * heads + a); view: head a's row of a token.
            const float* from = nullptr;
            float* to = nullptr;
            if (to_heads) {  // this rank's tokens of j's heads
              from = p.seq->data() + ((static_cast<int64_t>(j) * p.heads + a) * c + i) * d;
              to = block ? block + (a * c + i) * d : p.view->data() + view_row(a, seq_.tokens[i]);
            } else {         // j's tokens of this rank's heads
              from = p.view->data() + view_row(a, members_[j][i]);
              to = block ? block + (a * c + i) * d
                         : p.seq->data() + ((static_cast<int64_t>(me_) * p.heads + a) * c + i) * d;
            }
            std::copy(from, from + d, to);
          }
        if (block) block += static_cast<int64_t>(p.heads) * seq_.head;
      }
    }
  }

  void a2a_unpack(A2aPayload what, const std::vector<int>& blocks) override {
    const auto parts = a2a_parts(what);
    const bool to_heads = what == A2aPayload::kQkv || what == A2aPayload::kDout;
    const int64_t c = seq_.c, d = shape_.d;
    for (int k = 0; k < static_cast<int>(blocks.size()); ++k) {
      if (k == me_) continue;  // moved by the pack
      const float* block = buffers_.get(blocks[k], BufferRole::kA2a).data();
      for (const A2aPart& p : parts) {
        for (int a = 0; a < p.heads; ++a)
          for (int64_t i = 0; i < c; ++i) {
            const float* from = block + (a * c + i) * d;
            float* to = to_heads ? p.view->data() + view_row(a, members_[k][i])  // k's tokens, my heads
                                 : p.seq->data() + ((static_cast<int64_t>(k) * p.heads + a) * c + i) * d;
            std::copy(from, from + d, to);
          }
        block += static_cast<int64_t>(p.heads) * seq_.head;
      }
    }
    if (what == A2aPayload::kDout) view_.begin_backward(shape_.d);  // the view's D, now that dO is here
  }

  void a2a_attention_forward() override {
    Level& v = view_;
    const int group = v.h / v.h_kv;
    for (int a = 0; a < v.h; ++a)
      attention_block_forward(v.q.data() + a * v.head, v.tokens.data(), v.c, v.k.data() + (a / group) * v.head,
                              v.v.data() + (a / group) * v.head, v.tokens.data(), v.c, shape_.d, scale_, tiles_,
                              v.out.data() + a * v.head, v.lse.data() + a * v.c);
  }

  void a2a_attention_backward() override {
    Level& v = view_;
    const int group = v.h / v.h_kv;
    for (int a = 0; a < v.h; ++a) {
      const int64_t g = a / group;
      attention_block_backward(v.q.data() + a * v.head, v.dout.data() + a * v.head, v.lse.data() + a * v.c,
                               v.rowdot.data() + a * v.c, v.tokens.data(), v.c, v.k.data() + g * v.head,
                               v.v.data() + g * v.head, v.tokens.data(), v.c, shape_.d, scale_, tiles_,
                               v.dq.data() + a * v.head, v.dk.data() + g * v.head, v.dv.data() + g * v.head);
    }
  }

  void a2a_save(std::vector<float>& saved) const override {
    saved.clear();
    for (const std::vector<float>* t : {&view_.q, &view_.k, &view_.v, &view_.out, &view_.lse})
      saved.insert(saved.end(), t->begin(), t->end());
  }
  void a2a_restore(const std::vector<float>& saved) override {
    auto from = saved.begin();
    for (std::vector<float>* t : {&view_.q, &view_.k, &view_.v, &view_.out, &view_.lse}) {
      if (saved.end() - from < static_cast<std::ptrdiff_t>(t->size()))
        throw std::runtime_error("cpu backend: a2a_restore of a saved view of another shape");
      std::copy(from, from + static_cast<std::ptrdiff_t>(t->size()), t->begin());
      from += static_cast<std::ptrdiff_t>(t->size());
    }
  }

  int isend(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) override {
    return transport_.isend(region(buffer, offset, bytes), bytes, peer, tag);
  }
  int irecv(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) override {
    return transport_.irecv(region(buffer, offset, bytes), bytes, peer, tag);
  }
  void begin_phase() override { transport_.begin_phase(); }
  void end_phase() override { transport_.end_phase(); }
  void wait(int request) override { transport_.wait(request); }
  // Between kernel tiles: lets the posted transfers move.
  void progress() { transport_.progress(); }
  AttentionTiles tiles_run(bool backward) const override {
    (void)backward;  // the Eigen kernels run any tile, forward and backward alike
    return {shape_.block_q, shape_.block_kv};
  }

  double now() const override { return MPI_Wtime(); }
  void synchronize() override {}

  HostTensors download() const override {
    HostTensors t;
    t.tokens = seq_.tokens;
    t.q = seq_.q;
    t.k = seq_.k;
    t.v = seq_.v;
    t.dout = seq_.dout;
    t.out = seq_.out;
    t.lse = seq_.lse;
    t.dq = seq_.dq;
    t.dk = seq_.dk;
    t.dv = seq_.dv;
    if (!members_.empty()) {  // a2a: lse stays head-sharded, on the view's rows
      t.lse = view_.lse;
      t.lse_first_head = me_ * view_.h;
      t.lse_tokens = view_.tokens;
    }
    return t;
  }

  void load(const float* q, const float* k, const float* v, const float* dout, const float* out,
            const float* lse) override {
    auto set = [](std::vector<float>& dst, const float* src) {
      if (src != nullptr) std::copy(src, src + dst.size(), dst.begin());
    };
    set(seq_.q, q);
    set(seq_.k, k);
    set(seq_.v, v);
    set(seq_.dout, dout);
    set(seq_.out, out);
    set(seq_.lse, lse);
  }
  void store_forward(float* out, float* lse) const override {
    std::copy(seq_.out.begin(), seq_.out.end(), out);
    std::copy(seq_.lse.begin(), seq_.lse.end(), lse);
  }
  void store_backward(float* dq, float* dk, float* dv) const override {
    std::copy(seq_.dq.begin(), seq_.dq.end(), dq);
    std::copy(seq_.dk.begin(), seq_.dk.end(), dk);
    std::copy(seq_.dv.begin(), seq_.dv.end(), dv);
  }

 private:
  // One level's tensors in the layouts of backend.h: c tokens (increasing), h query and
  // h_kv K,V heads. seq_ is the rank's own (sequence-sharded); view_ the head-sharded one an
  // all-to-all lays out.
  struct Level {
    int64_t c = 0, head = 0;  // tokens; elements of one head (c * d)
    int h = 0, h_kv = 0;
    std::vector<int64_t> tokens;
    std::vector<float> q, k, v, dout, out, lse, rowdot, dq, dk, dv;
    void size(int64_t rows, int heads, int kv_heads, int d) {
      c = rows;
      head = c * d;
      h = heads;
      h_kv = kv_heads;
      q.assign(static_cast<size_t>(h) * head, 0.0f);
      dout.assign(q.size(), 0.0f);
      out.assign(q.size(), 0.0f);
      k.assign(static_cast<size_t>(h_kv) * head, 0.0f);
      v.assign(k.size(), 0.0f);
      lse.assign(static_cast<size_t>(h) * c, kNegInf);
    }
    size_t kv_elems() const { return static_cast<size_t>(h_kv) * head; }
    // Before a backward pass: dQ, dK, dV = 0, D = rowsum(dO * out).
    void begin_backward(int d) {
      dq.assign(q.size(), 0.0f);
      dk.assign(k.size(), 0.0f);
      dv.assign(v.size(), 0.0f);
      rowdot.resize(dout.size() / d);
      for (size_t i = 0; i < rowdot.size(); ++i) {
        double s = 0;
        for (int j = 0; j < d; ++j) s += double(dout[i * d + j]) * out[i * d + j];
        rowdot[i] = static_cast<float>(s);
      }
    }
  };

  // Calls body(j, g, q0, k0, seg) for each query head j of `r` (reading K,V head g) and each
  // pair of segments: queries q0 .. q0+seg-1 against keys k0 .. k0+seg-1.
  template <class F>
  void for_each_block(const Level& r, F body) {
    const int group = r.h / r.h_kv;
    const int64_t seg = r.c / shape_.segments;
    block_out_.resize(static_cast<size_t>(seg * shape_.d));
    block_lse_.resize(static_cast<size_t>(seg));
    for (int j = 0; j < r.h; ++j)
      for (int64_t q0 = 0; q0 < r.c; q0 += seg)
        for (int64_t k0 = 0; k0 < r.c; k0 += seg) body(j, j / group, q0, k0, seg);
  }

  std::vector<float> make_input(uint64_t seed, InputTensor which, int heads) const {
    std::vector<float> x(static_cast<size_t>(heads) * seq_.head);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < seq_.c; ++i)
        for (int j = 0; j < shape_.d; ++j)
          x[(hh * seq_.c + i) * shape_.d + j] = input_value(seed, which, hh, seq_.tokens[i], j);
    return x;
  }

  // Offset of `token`'s row of head `head` in a view tensor [heads][view c][d].
  int64_t view_row(int64_t head, int64_t token) const {
    const auto it = std::lower_bound(view_.tokens.begin(), view_.tokens.end(), token);
    return (head * view_.c + (it - view_.tokens.begin())) * shape_.d;
  }
  // One tensor of an all-to-all's payload: its sequence-sharded form [P * heads][c][d], its
  // view [heads][view c][d], and the heads per member; in message order.
  struct A2aPart {
    std::vector<float>* seq;
    std::vector<float>* view;
    int heads;
  };
  std::vector<A2aPart> a2a_parts(A2aPayload what) const {
    auto* self = const_cast<CpuBackend*>(this);  // the parts name tensors a pack or unpack writes
    Level& s = self->seq_;
    Level& v = self->view_;
    switch (what) {
      case A2aPayload::kQkv: return {{&s.q, &v.q, v.h}, {&s.k, &v.k, v.h_kv}, {&s.v, &v.v, v.h_kv}};
      case A2aPayload::kDout: return {{&s.dout, &v.dout, v.h}};
      case A2aPayload::kOut: return {{&s.out, &v.out, v.h}};
      case A2aPayload::kDqkv: return {{&s.dq, &v.dq, v.h}, {&s.dk, &v.dk, v.h_kv}, {&s.dv, &v.dv, v.h_kv}};
      case A2aPayload::kNone: break;
    }
    throw std::runtime_error("cpu backend: an all-to-all op that moves nothing (schedule error)");
  }

  char* region(int buffer, std::size_t offset, std::size_t bytes) {
    std::vector<float>& b =
        buffers_.get_span(buffer, offset, bytes, [](const std::vector<float>& v) { return v.size() * sizeof(float); });
    return reinterpret_cast<char*>(b.data()) + offset;
  }

  AttentionShape shape_;
  float scale_ = 1;
  TileShape tiles_;
  Level seq_, view_;
  Level* ring_ = &seq_;  // what the ring kernels work on: seq_, or view_ once a2a_connect'ed
  std::vector<float> block_out_, block_lse_;
  // a2a (empty members_ otherwise): this rank's index and every member's tokens.
  int me_ = 0;
  std::vector<std::vector<int64_t>> members_;
  BufferTable<std::vector<float>> buffers_{"cpu"};
  MpiTransport transport_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace rm::exec
