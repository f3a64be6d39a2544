// The primitives the transformer's forward and backward pass (transformer.h) and the
// optimizer step (adamw.h, on FSDP's shards: fsdp.h) are written in, so that one
// orchestration (layer order, activation checkpointing, the FSDP calls behind
// ParamAccess, the attention callbacks, AdamW) drives every device: `cpu` (Eigen, this
// folder: cpu_train_kernels.cc; fp32 for training, fp64 for run --verify's reference) and
// `cuda` (cuBLAS SGEMM and small fp32 kernels, executor/cuda/cuda_train_kernels.cu).
//
// Tensors are row-major fp matrices [rows][cols] in the kernels' memory (host for cpu,
// device for cuda), allocated by the kernels and freed by the Tensor that owns them.
// Parameter and gradient pointers (ParamAccess) are in the same memory. Token ids,
// targets and positions are host arrays (the kernels copy what they need).
// Shapes as in transformer.h: rows = the batch's tokens, H hidden, F ffn hidden, V vocab,
// h / h_kv heads of dim d, c tokens of one sequence.
//
// Ordering: a call may return before its work is done (cuda: asynchronous on the
// kernels' stream); download(), cross_entropy() and squared_norm() (return host values)
// and synchronize() wait for everything before them. Not thread-safe: one kernels object per rank thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace rm::exec {

template <class T>
class TrainKernels;

// bfloat16 as the kernels store it: the upper 16 bits of an fp32 (8-bit exponent, 7-bit
// mantissa). Only the kernels convert it (to_bf16 / from_bf16 below: Eigen's conversion on
// the cpu, CUDA's on a GPU, both rounding to nearest even); under mixed precision the pass
// keeps its activations, parameters and gradients in it (bf16_kernels.h).
struct Bf16 {
  uint16_t bits = 0;
};

// The scalars of one AdamW update (adamw.h computes them once per step): gradients
// scaled by `clip` (clipping), moments decayed by b1 and b2, bias corrections bc1, bc2,
// the learning rate, eps, and the weight-decay factor (1 - lr * weight_decay, or 1).
struct AdamWScalars {
  double clip = 1, lr = 0, bc1 = 1, bc2 = 1, eps = 0;
  float b1 = 0, b2 = 0, decay = 1;
};

// A row-major view, read-only or writable, of a tensor, a parameter or a gradient.
template <class T>
struct ConstView {
  const T* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t size() const { return rows * cols; }
};
template <class T>
struct View {
  T* data = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t size() const { return rows * cols; }
  operator ConstView<T>() const { return {data, rows, cols}; }
};

// An allocation of the kernels' memory, [rows][cols]; move-only, freed by its owner.
template <class T>
class Tensor {
 public:
  Tensor() = default;
  Tensor(TrainKernels<T>* owner, T* data, int64_t rows, int64_t cols)
      : owner_(owner), data_(data), rows_(rows), cols_(cols) {}
  Tensor(Tensor&& o) noexcept { *this = std::move(o); }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(rows_, o.rows_);
    std::swap(cols_, o.cols_);
    return *this;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  ~Tensor() {
    if (data_ != nullptr) owner_->free(data_);
  }
  // Gives up ownership: the caller frees the data (with the owner's free()).
  T* release() {
    T* d = data_;
    data_ = nullptr;
    return d;
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t size() const { return rows_ * cols_; }
  operator View<T>() { return {data_, rows_, cols_}; }
  operator ConstView<T>() const { return {data_, rows_, cols_}; }

 private:
  TrainKernels<T>* owner_ = nullptr;
  T* data_ = nullptr;
  int64_t rows_ = 0, cols_ = 0;
};

template <class T>
class TrainKernels {
 public:
  virtual ~TrainKernels() = default;
  virtual std::string name() const = 0;
  // The device's dense bf16 peak FLOP/s, the denominator of the model FLOPs utilisation
  // train reports; 0 when unknown (the cpu).
  virtual double peak_flops() const { return 0; }

  // --- memory -------------------------------------------------------------------------
  // Contents undefined (zero() them when needed).
  virtual Tensor<T> alloc(int64_t rows, int64_t cols) = 0;
  virtual void free(T* data) = 0;  // called by ~Tensor
  virtual void zero(View<T> x) = 0;
  virtual void copy(View<T> dst, ConstView<T> src) = 0;  // same size
  // n elements between host memory and the kernels' memory.
  virtual void upload(T* dst, const T* host, int64_t n) = 0;
  virtual void download(T* host, const T* src, int64_t n) = 0;
  // Waits for all work posted so far (the callers' clocks bracket work with it).
  virtual void synchronize() = 0;

  // --- the linear layers --------------------------------------------------------------
  // c = op(a) op(b) (accumulate: c += ...), op(x) = x or x^T as trans_* says.
  virtual void gemm(ConstView<T> a, bool trans_a, ConstView<T> b, bool trans_b, View<T> c,
                    bool accumulate) = 0;

  // --- elementwise work ---------------------------------------------------------------
  // RMSNorm (Zhang & Sennrich 2019) row by row, eps 1e-5 (Llama 2):
  // y = x / rms(x) * g, r[i] = 1 / rms(x_i).   x, y [rows][H]; r [rows][1]; g [H]
  virtual void rmsnorm_forward(ConstView<T> x, const T* g, View<T> y, View<T> r) = 0;
  // dx += d(rmsnorm)/dx^T dy; dg += sum_i dy_i * x_i * r_i.
  virtual void rmsnorm_backward(ConstView<T> x, ConstView<T> r, const T* g, ConstView<T> dy,
                                View<T> dx, T* dg) = 0;
  // Rotary embedding in place, Llama's half-split form, theta 10000: dims i and i + d/2 of
  // each head rotate by pos * theta^(-2i/d); `sign` -1 applies the inverse (the backward
  // of a rotation is its transpose). Row i is at positions[i % c] (sequences stacked).
  //   x [rows][heads * d]; positions [c]
  virtual void rope(View<T> x, int heads, int d, const int64_t* positions, int64_t c,
                    int sign) = 0;
  // SwiGLU's gate (Shazeer 2020): s = silu(u) * g; its backward du, dg from ds.
  //   all [rows][F]
  virtual void swiglu_forward(ConstView<T> u, ConstView<T> g, View<T> s) = 0;
  virtual void swiglu_backward(ConstView<T> ds, ConstView<T> u, ConstView<T> g, View<T> du,
                               View<T> dg) = 0;
  // x[i] = table[tokens[i]]; dtable[tokens[i]] += dx[i].   table [V][H]; x [rows][H]
  virtual void embedding_forward(ConstView<T> table, const int32_t* tokens, View<T> x) = 0;
  virtual void embedding_backward(ConstView<T> dx, const int32_t* tokens, View<T> dtable) = 0;
  // Softmax cross-entropy against `targets`: returns the sum of the rows' losses (nats)
  // and turns the logits into their gradient (softmax - onehot) * grad_scale in place.
  //   logits [rows][V]
  virtual double cross_entropy(View<T> logits, const int32_t* targets, double grad_scale) = 0;
  // Rows row0 .. row0 + c of x [rows][heads * d] <-> head-major t [heads][c * d] (the
  // attention's layout, backend.h).
  virtual void to_heads(ConstView<T> x, int64_t row0, int heads, int d, View<T> t) = 0;
  virtual void from_heads(ConstView<T> t, int heads, int d, View<T> x, int64_t row0) = 0;

  // --- the optimizer, on FSDP's shards -------------------------------------------------
  // y += x (same size): a micro-step's reduce-scattered gradients into the shard.
  virtual void add(View<T> y, ConstView<T> x) = 0;
  // The sum of x_i^2, accumulated in double (the gradient norm's share of this rank).
  virtual double squared_norm(ConstView<T> x) = 0;
  // One AdamW update of every element (all four the same size), as adamw.h writes it:
  //   g = grad * clip; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
  //   p = p * decay - lr * (m / bc1) / (sqrt(v / bc2) + eps)   (the last line in double).
  virtual void adamw(View<T> p, ConstView<T> grad, View<T> m, View<T> v, const AdamWScalars& s) = 0;
  // The same update with both moments stored in bf16, as Megatron-Core's precision-aware
  // optimizer keeps them (--exp-avg-dtype / --exp-avg-sq-dtype bf16, Transformer Engine's
  // FusedAdam): each read widened to fp32, updated and used as above, written back rounded to
  // nearest even.
  virtual void adamw_bf16_moments(View<T> p, ConstView<T> grad, View<Bf16> m, View<Bf16> v,
                                  const AdamWScalars& s) = 0;

  // --- bf16 storage (bf16_kernels.h) -------------------------------------------------
  // n values to bf16 (rounded to nearest even) and back, both in the kernels' memory.
  virtual void to_bf16(Bf16* dst, const T* src, int64_t n) = 0;
  virtual void from_bf16(T* dst, const Bf16* src, int64_t n) = 0;
};

// The Eigen kernels (cpu_train_kernels.cc), one per type; stateless, so shared.
template <class T>
TrainKernels<T>& cpu_train_kernels();

}  // namespace rm::exec
