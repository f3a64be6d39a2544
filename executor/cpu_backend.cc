// The cpu backend (see cpu_backend.h): tensors are std::vector<float> in the head-major
// layouts of backend.h; schedule buffers are keyed by buffer id.
#include "executor/cpu_backend.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <Eigen/Core>

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
    tokens_ = tokens;
    c_ = shape.c;
    head_ = c_ * shape.d;
    scale_ = 1.0f / std::sqrt(static_cast<float>(shape.d));
    tiles_ = {shape.block_q, shape.block_kv, shape.causal, shape.window, [this] { progress(); }};
    q_ = make_input(seed, InputTensor::kQ, shape.h);
    k_ = make_input(seed, InputTensor::kK, shape.h_kv);
    v_ = make_input(seed, InputTensor::kV, shape.h_kv);
    dout_ = make_input(seed, InputTensor::kDout, shape.h);
    out_.assign(q_.size(), 0.0f);
    lse_.assign(static_cast<size_t>(shape.h) * c_, kNegInf);
    if (shape.segments < 1 || c_ % shape.segments != 0)
      throw std::runtime_error("cpu backend: c = " + std::to_string(c_) +
                               " tokens do not split into " + std::to_string(shape.segments) +
                               " segments");
    block_out_.resize(head_);
    block_lse_.resize(c_);
  }

  void alloc(int buffer, BufferRole role) override {
    Buffer& b = buffers_[buffer];
    b.role = role;
    // K|V or dK|dV; an all-to-all's block holds its largest message, Q|K|V of one member.
    b.data.assign(role == BufferRole::kA2a ? a2a_bytes(A2aPayload::kQkv) / sizeof(float) : 2 * kv_elems(), 0.0f);
  }
  void free(int buffer) override { buffers_.erase(buffer); }
  std::size_t bytes_of(int buffer) const override {
    return get(buffer).data.size() * sizeof(float);
  }
  void load_own_kv(int buffer) override {
    std::vector<float>& b = get(buffer).data;
    std::copy(k_.begin(), k_.end(), b.begin());
    std::copy(v_.begin(), v_.end(), b.begin() + kv_elems());
  }
  void zero(int buffer) override {
    std::vector<float>& b = get(buffer).data;
    std::fill(b.begin(), b.end(), 0.0f);
  }

  void begin_forward() override {
    std::fill(out_.begin(), out_.end(), 0.0f);
    std::fill(lse_.begin(), lse_.end(), kNegInf);
  }

  void attention_forward(int kv_buffer, const std::vector<int64_t>& kv_tokens) override {
    const float* kv = get(kv_buffer).data.data();
    const int64_t d = shape_.d;
    for_each_block([&](int j, int g, int64_t q0, int64_t k0, int64_t seg) {
      attention_block_forward(q_.data() + j * head_ + q0 * d, tokens_.data() + q0, seg,
                              kv + g * head_ + k0 * d, kv + kv_elems() + g * head_ + k0 * d,
                              kv_tokens.data() + k0, seg, shape_.d, scale_, tiles_,
                              block_out_.data(), block_lse_.data());
      merge_out_lse(out_.data() + j * head_ + q0 * d, lse_.data() + j * c_ + q0,
                    block_out_.data(), block_lse_.data(), seg, shape_.d);
    });
  }

  void begin_backward() override {
    dq_.assign(q_.size(), 0.0f);
    dk_.assign(k_.size(), 0.0f);
    dv_.assign(v_.size(), 0.0f);
    rowdot_ = row_dot(dout_, out_);
  }

  void attention_backward(int kv_buffer, const std::vector<int64_t>& kv_tokens,
                          int dkv_buffer) override {
    const float* kv = get(kv_buffer).data.data();
    float* dkv = get(dkv_buffer).data.data();
    std::fill(dkv, dkv + 2 * kv_elems(), 0.0f);
    const int64_t d = shape_.d;
    for_each_block([&](int j, int g, int64_t q0, int64_t k0, int64_t seg) {
      const int64_t qo = j * head_ + q0 * d, ko = g * head_ + k0 * d;
      attention_block_backward(q_.data() + qo, dout_.data() + qo, lse_.data() + j * c_ + q0,
                               rowdot_.data() + j * c_ + q0, tokens_.data() + q0, seg,
                               kv + ko, kv + kv_elems() + ko, kv_tokens.data() + k0, seg,
                               shape_.d, scale_, tiles_, dq_.data() + qo, dkv + ko,
                               dkv + kv_elems() + ko);
    });
  }

  void accumulate(int dst_buffer, int src_buffer) override {
    std::vector<float>& dst = get(dst_buffer).data;
    const std::vector<float>& src = get(src_buffer).data;
    for (size_t i = 0; i < dst.size(); ++i) dst[i] += src[i];
  }

  void take_own_dkv(int buffer, bool add) override {
    const std::vector<float>& b = get(buffer).data;
    for (size_t i = 0; i < kv_elems(); ++i) {
      dk_[i] = (add ? dk_[i] : 0.0f) + b[i];
      dv_[i] = (add ? dv_[i] : 0.0f) + b[kv_elems() + i];
    }
  }

  // --- a2a: the head-sharded view (backend.h) -------------------------------------------
  void a2a_connect(int me, const std::vector<std::vector<int64_t>>& member_tokens) override {
    const int n = static_cast<int>(member_tokens.size());
    if (n < 1 || me < 0 || me >= n || shape_.h % n != 0 || shape_.h_kv % n != 0)
      throw std::runtime_error("cpu backend: an all-to-all over " + std::to_string(n) + " members splits " +
                               std::to_string(shape_.h) + " query and " + std::to_string(shape_.h_kv) +
                               " K,V heads unevenly (schedule error)");
    me_ = me;
    members_ = member_tokens;
    hp_ = shape_.h / n;
    hkvp_ = shape_.h_kv / n;
    n_tok_ = c_ * n;
    all_tokens_.resize(static_cast<size_t>(n_tok_));
    for (int64_t t = 0; t < n_tok_; ++t) all_tokens_[t] = t;
    const size_t rows = static_cast<size_t>(n_tok_) * shape_.d;
    qh_.assign(hp_ * rows, 0.0f);
    douth_.assign(hp_ * rows, 0.0f);
    outh_.assign(hp_ * rows, 0.0f);
    kh_.assign(hkvp_ * rows, 0.0f);
    vh_.assign(hkvp_ * rows, 0.0f);
    lseh_.assign(static_cast<size_t>(hp_) * n_tok_, kNegInf);
  }

  std::size_t a2a_bytes(A2aPayload what) const override {
    std::size_t heads = 0;
    for (const A2aPart& p : a2a_parts(what)) heads += static_cast<size_t>(p.heads);
    return heads * static_cast<size_t>(head_) * sizeof(float);
  }

  void a2a_pack(A2aPayload what, const std::vector<int>& blocks) override {
    const auto parts = a2a_parts(what);
    const bool to_heads = what == A2aPayload::kQkv || what == A2aPayload::kDout;
    for (int j = 0; j < static_cast<int>(blocks.size()); ++j) {
      float* block = j == me_ ? nullptr : get(blocks[j]).data.data();
      for (const A2aPart& p : parts) {
        for (int a = 0; a < p.heads; ++a)
          for (int64_t i = 0; i < c_; ++i) {
            // seq: this rank's row i of head (member * heads + a); heads: row `token` of head a.
            float* to = nullptr;
            const float* from = nullptr;
            if (to_heads) {  // this rank's tokens of j's heads
              from = p.seq->data() + ((static_cast<int64_t>(j) * p.heads + a) * c_ + i) * shape_.d;
              to = block ? block + (a * c_ + i) * shape_.d : p.heads_view->data() + row(a, tokens_[i]);
            } else {         // j's tokens of this rank's heads
              from = p.heads_view->data() + row(a, members_[j][i]);
              to = block ? block + (a * c_ + i) * shape_.d
                         : p.seq->data() + ((static_cast<int64_t>(me_) * p.heads + a) * c_ + i) * shape_.d;
            }
            std::copy(from, from + shape_.d, to);
          }
        if (block) block += static_cast<int64_t>(p.heads) * head_;
      }
    }
  }

  void a2a_unpack(A2aPayload what, const std::vector<int>& blocks) override {
    const auto parts = a2a_parts(what);
    const bool to_heads = what == A2aPayload::kQkv || what == A2aPayload::kDout;
    for (int k = 0; k < static_cast<int>(blocks.size()); ++k) {
      if (k == me_) continue;  // moved by the pack
      const float* block = get(blocks[k]).data.data();
      for (const A2aPart& p : parts) {
        for (int a = 0; a < p.heads; ++a)
          for (int64_t i = 0; i < c_; ++i) {
            const float* from = block + (a * c_ + i) * shape_.d;
            float* to = to_heads ? p.heads_view->data() + row(a, members_[k][i])  // k's tokens, my heads
                                 : p.seq->data() + ((static_cast<int64_t>(k) * p.heads + a) * c_ + i) * shape_.d;
            std::copy(from, from + shape_.d, to);
          }
        block += static_cast<int64_t>(p.heads) * head_;
      }
    }
  }

  void a2a_attention_forward() override {
    const int group = hp_ / hkvp_;
    for (int a = 0; a < hp_; ++a)
      attention_block_forward(qh_.data() + row(a, 0), all_tokens_.data(), n_tok_, kh_.data() + row(a / group, 0),
                              vh_.data() + row(a / group, 0), all_tokens_.data(), n_tok_, shape_.d, scale_, tiles_,
                              outh_.data() + row(a, 0), lseh_.data() + a * n_tok_);
  }

  void a2a_attention_backward() override {
    const int group = hp_ / hkvp_;
    dqh_.assign(qh_.size(), 0.0f);
    dkh_.assign(kh_.size(), 0.0f);
    dvh_.assign(vh_.size(), 0.0f);
    const std::vector<float> delta = row_dot(douth_, outh_);
    for (int a = 0; a < hp_; ++a) {
      const int64_t g = a / group;
      attention_block_backward(qh_.data() + row(a, 0), douth_.data() + row(a, 0), lseh_.data() + a * n_tok_,
                               delta.data() + a * n_tok_, all_tokens_.data(), n_tok_, kh_.data() + row(g, 0),
                               vh_.data() + row(g, 0), all_tokens_.data(), n_tok_, shape_.d, scale_, tiles_,
                               dqh_.data() + row(a, 0), dkh_.data() + row(g, 0), dvh_.data() + row(g, 0));
    }
  }

  void a2a_save(std::vector<float>& saved) const override {
    saved.clear();
    for (const std::vector<float>* t : {&qh_, &kh_, &vh_, &outh_, &lseh_}) saved.insert(saved.end(), t->begin(), t->end());
  }
  void a2a_restore(const std::vector<float>& saved) override {
    auto from = saved.begin();
    for (std::vector<float>* t : {&qh_, &kh_, &vh_, &outh_, &lseh_}) {
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
    t.tokens = tokens_;
    t.q = q_;
    t.k = k_;
    t.v = v_;
    t.dout = dout_;
    t.out = out_;
    t.lse = members_.empty() ? lse_ : lseh_;  // a2a: lse stays head-sharded
    if (!members_.empty()) t.lse_first_head = me_ * hp_;
    t.dq = dq_;
    t.dk = dk_;
    t.dv = dv_;
    return t;
  }

  void load(const float* q, const float* k, const float* v, const float* dout, const float* out,
            const float* lse) override {
    auto set = [](std::vector<float>& dst, const float* src) {
      if (src != nullptr) std::copy(src, src + dst.size(), dst.begin());
    };
    set(q_, q);
    set(k_, k);
    set(v_, v);
    set(dout_, dout);
    set(out_, out);
    set(lse_, lse);
  }
  void store_forward(float* out, float* lse) const override {
    std::copy(out_.begin(), out_.end(), out);
    std::copy(lse_.begin(), lse_.end(), lse);
  }
  void store_backward(float* dq, float* dk, float* dv) const override {
    std::copy(dq_.begin(), dq_.end(), dq);
    std::copy(dk_.begin(), dk_.end(), dk);
    std::copy(dv_.begin(), dv_.end(), dv);
  }

 private:
  struct Buffer {
    BufferRole role = BufferRole::kKv;
    std::vector<float> data;
  };

  size_t kv_elems() const { return static_cast<size_t>(shape_.h_kv) * head_; }

  // D = rowsum(dO * out), one value per row of d.
  std::vector<float> row_dot(const std::vector<float>& dout, const std::vector<float>& out) const {
    std::vector<float> r(dout.size() / shape_.d);
    for (size_t i = 0; i < r.size(); ++i) {
      double s = 0;
      for (int j = 0; j < shape_.d; ++j) s += double(dout[i * shape_.d + j]) * out[i * shape_.d + j];
      r[i] = static_cast<float>(s);
    }
    return r;
  }

  // a2a: offset of row `token` of head `head` in a head-sharded tensor [heads][N][d].
  int64_t row(int64_t head, int64_t token) const { return (head * n_tok_ + token) * shape_.d; }
  // One tensor of an all-to-all's payload: its sequence-sharded form [P * heads][c][d], its
  // head-sharded one [heads][N][d], and the heads per member; in message order.
  struct A2aPart {
    std::vector<float>* seq;
    std::vector<float>* heads_view;
    int heads;
  };
  std::vector<A2aPart> a2a_parts(A2aPayload what) const {
    auto* self = const_cast<CpuBackend*>(this);  // the parts name tensors a pack or unpack writes
    switch (what) {
      case A2aPayload::kQkv: return {{&self->q_, &self->qh_, hp_}, {&self->k_, &self->kh_, hkvp_}, {&self->v_, &self->vh_, hkvp_}};
      case A2aPayload::kDout: return {{&self->dout_, &self->douth_, hp_}};
      case A2aPayload::kOut: return {{&self->out_, &self->outh_, hp_}};
      case A2aPayload::kDqkv: return {{&self->dq_, &self->dqh_, hp_}, {&self->dk_, &self->dkh_, hkvp_}, {&self->dv_, &self->dvh_, hkvp_}};
      case A2aPayload::kNone: break;
    }
    throw std::runtime_error("cpu backend: an all-to-all op that moves nothing (schedule error)");
  }

  // Calls body(j, g, q0, k0, seg) for each query head j (reading K,V head g) and each pair
  // of segments: queries q0 .. q0+seg-1 against keys k0 .. k0+seg-1.
  template <class F>
  void for_each_block(F body) const {
    const int group = shape_.h / shape_.h_kv;
    const int64_t seg = c_ / shape_.segments;
    for (int j = 0; j < shape_.h; ++j)
      for (int64_t q0 = 0; q0 < c_; q0 += seg)
        for (int64_t k0 = 0; k0 < c_; k0 += seg) body(j, j / group, q0, k0, seg);
  }

  std::vector<float> make_input(uint64_t seed, InputTensor which, int heads) const {
    std::vector<float> x(static_cast<size_t>(heads) * head_);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < c_; ++i)
        for (int j = 0; j < shape_.d; ++j)
          x[(hh * c_ + i) * shape_.d + j] = input_value(seed, which, hh, tokens_[i], j);
    return x;
  }

  Buffer& get(int buffer) {
    auto it = buffers_.find(buffer);
    if (it == buffers_.end())
      throw std::runtime_error("cpu backend: buffer " + std::to_string(buffer) +
                               " used before alloc (schedule error)");
    return it->second;
  }
  const Buffer& get(int buffer) const { return const_cast<CpuBackend*>(this)->get(buffer); }

  char* region(int buffer, std::size_t offset, std::size_t bytes) {
    std::vector<float>& b = get(buffer).data;
    if (offset + bytes > b.size() * sizeof(float))
      throw std::runtime_error("cpu backend: transfer of " + std::to_string(bytes) +
                               " bytes at offset " + std::to_string(offset) + " exceeds buffer " +
                               std::to_string(buffer));
    return reinterpret_cast<char*>(b.data()) + offset;
  }

  AttentionShape shape_;
  std::vector<int64_t> tokens_;
  int64_t c_ = 0, head_ = 0;
  float scale_ = 1;
  TileShape tiles_;
  std::vector<float> q_, k_, v_, dout_, out_, lse_, rowdot_, dq_, dk_, dv_;
  std::vector<float> block_out_, block_lse_;
  // a2a (empty members_ otherwise): this rank's index, every member's tokens, the heads
  // each holds after the all-to-all, and the head-sharded view over all N tokens.
  int me_ = 0, hp_ = 0, hkvp_ = 0;
  int64_t n_tok_ = 0;
  std::vector<std::vector<int64_t>> members_;
  std::vector<int64_t> all_tokens_;
  std::vector<float> qh_, kh_, vh_, douth_, outh_, lseh_, dqh_, dkh_, dvh_;
  std::unordered_map<int, Buffer> buffers_;
  MpiTransport transport_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace rm::exec
