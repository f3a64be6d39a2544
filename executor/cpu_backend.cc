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
    tiles_ = {shape.block_q, shape.block_kv, shape.causal, [this] { progress(); }};
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
    b.data.assign(2 * kv_elems(), 0.0f);  // K|V or dK|dV
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
    rowdot_.assign(lse_.size(), 0.0f);
    for (size_t r = 0; r < rowdot_.size(); ++r) {
      double s = 0;
      for (int j = 0; j < shape_.d; ++j) s += double(dout_[r * shape_.d + j]) * out_[r * shape_.d + j];
      rowdot_[r] = static_cast<float>(s);
    }
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
    t.lse = lse_;
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
  std::unordered_map<int, Buffer> buffers_;
  MpiTransport transport_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace rm::exec
