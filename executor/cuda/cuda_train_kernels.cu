// The transformer's kernels on a GPU (see cuda_train_kernels.h): the elementwise kernels
// first, then the TrainKernels implementation that launches them and cuBLAS.
// Shapes as in train_kernels.h: rows tokens, H hidden, F ffn hidden, V vocab, h heads of d.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/cuda_train_kernels.h"

namespace rm::gpu {

namespace {

using exec::ConstView;
using exec::Tensor;
using exec::View;

// As the cpu kernels (cpu_train_kernels.cc): Llama 2's RMSNorm epsilon and RoPE base.
constexpr float kRmsEps = 1e-5f;
constexpr double kRopeTheta = 10000.0;
constexpr int kThreads = 256;  // per block; the row kernels run one block per row

// Sum / max over the block's threads (kThreads, a multiple of 32); every thread gets it.
__device__ float block_reduce(float v, bool max) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o /= 2) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = max ? fmaxf(v, w) : v + w;
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = partial[0];
  for (int i = 1; i < kThreads / 32; ++i) v = max ? fmaxf(v, partial[i]) : v + partial[i];
  __syncthreads();  // partial is reused by the next call
  return v;
}

// y = x * r * g, r = 1 / rms(x), one block per row.   x, y [rows][n]; r [rows]; g [n]
__global__ void rmsnorm_forward_kernel(const float* x, const float* g, float* y, float* r, int n) {
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * n;
  float* yr = y + static_cast<int64_t>(blockIdx.x) * n;
  float ss = 0;
  for (int j = threadIdx.x; j < n; j += kThreads) ss += xr[j] * xr[j];
  const float ri = 1.0f / sqrtf(block_reduce(ss, false) / n + kRmsEps);
  for (int j = threadIdx.x; j < n; j += kThreads) yr[j] = xr[j] * g[j] * ri;
  if (threadIdx.x == 0) r[blockIdx.x] = ri;
}

// dx += dy g r - x r^3 (dy g . x) / n;  dg += dy x r (atomics across rows).
__global__ void rmsnorm_backward_kernel(const float* x, const float* r, const float* g,
                                        const float* dy, float* dx, float* dg, int n) {
  const int64_t off = static_cast<int64_t>(blockIdx.x) * n;
  const float ri = r[blockIdx.x];
  float dot = 0;
  for (int j = threadIdx.x; j < n; j += kThreads) dot += dy[off + j] * g[j] * x[off + j];
  dot = block_reduce(dot, false) / n;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    dx[off + j] += dy[off + j] * g[j] * ri - x[off + j] * (ri * ri * ri * dot);
    atomicAdd(&dg[j], dy[off + j] * x[off + j] * ri);
  }
}

// One thread per (row, pair k < d/2), over every head.   x [rows][heads d]; pos [c]
__global__ void rope_kernel(float* x, int64_t rows, int heads, int d, const int64_t* pos,
                            int64_t c, float sign) {
  const int half = d / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t i = idx / half;
  const int k = static_cast<int>(idx % half);
  const double angle = static_cast<double>(pos[i % c]) * pow(kRopeTheta, -2.0 * k / d);
  const float cs = static_cast<float>(cos(angle)), sn = sign * static_cast<float>(sin(angle));
  float* row = x + i * heads * d;
  for (int j = 0; j < heads; ++j) {
    const float a = row[j * d + k], b = row[j * d + k + half];
    row[j * d + k] = a * cs - b * sn;
    row[j * d + k + half] = a * sn + b * cs;
  }
}

__global__ void swiglu_forward_kernel(const float* u, const float* g, float* s, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) s[i] = u[i] / (1.0f + expf(-u[i])) * g[i];
}

__global__ void swiglu_backward_kernel(const float* ds, const float* u, const float* g, float* du,
                                       float* dg, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float sig = 1.0f / (1.0f + expf(-u[i]));
  dg[i] = ds[i] * u[i] * sig;
  du[i] = ds[i] * g[i] * sig * (1.0f + u[i] * (1.0f - sig));
}

// x[i] = table[tok[i]] (backward: table[tok[i]] += dx[i]), one thread per element.
__global__ void embedding_kernel(float* table, const int32_t* tok, float* x, int64_t rows, int n,
                                 bool backward) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * n) return;
  float* t = table + static_cast<int64_t>(tok[idx / n]) * n + idx % n;
  if (backward)
    atomicAdd(t, x[idx]);
  else
    x[idx] = *t;
}

// One block per row: loss[row] = log sum exp(z) - z[target]; z becomes
// (softmax(z) - onehot) * scale.   z [rows][V]
__global__ void cross_entropy_kernel(float* z, const int32_t* targets, int V, float scale,
                                     double* loss) {
  float* row = z + static_cast<int64_t>(blockIdx.x) * V;
  const int t = targets[blockIdx.x];
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = block_reduce(mx, true);
  const float target_logit = row[t] - mx;
  __syncthreads();  // everyone read row[t] before it changes
  float sum = 0;
  for (int j = threadIdx.x; j < V; j += kThreads) {
    row[j] = expf(row[j] - mx);
    sum += row[j];
  }
  sum = block_reduce(sum, false);
  for (int j = threadIdx.x; j < V; j += kThreads) row[j] *= scale / sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    row[t] -= scale;
    loss[blockIdx.x] = log(static_cast<double>(sum)) - target_logit;
  }
}

// Rows row0 .. row0 + c of x [rows][heads d] <-> t [heads][c][d]; one thread per element.
__global__ void heads_kernel(float* x, int64_t row0, int heads, int d, int64_t c, float* t,
                             bool to_heads) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= heads * c * d) return;
  const int k = static_cast<int>(idx % d);
  const int64_t i = (idx / d) % c;
  const int j = static_cast<int>(idx / (c * d));
  float& xe = x[(row0 + i) * heads * d + j * d + k];
  if (to_heads)
    t[idx] = xe;
  else
    xe = t[idx];
}

// y += x.
__global__ void add_kernel(float* y, const float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

// *sum += sum of x_i^2 over the block's elements (in double, one atomic per block).
__global__ void squared_norm_kernel(const float* x, int64_t n, double* sum) {
  __shared__ double partial[kThreads];
  double v = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    v += static_cast<double>(x[i]) * x[i];
  partial[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

// AdamW, one thread per element, the cpu kernels' arithmetic (train_kernels.h).
__global__ void adamw_kernel(float* p, const float* grad, float* m, float* v, int64_t n,
                             exec::AdamWScalars s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = static_cast<float>(grad[i] * s.clip);
  m[i] = s.b1 * m[i] + (1 - s.b1) * g;
  v[i] = s.b2 * v[i] + (1 - s.b2) * g * g;
  const double mhat = m[i] / s.bc1, vhat = v[i] / s.bc2;
  p[i] = static_cast<float>(p[i] * s.decay - s.lr * mhat / (sqrt(vhat) + s.eps));
}

// The same with the moments stored in bf16: widened, updated, used unrounded, stored
// rounded to nearest even (Transformer Engine's FusedAdam with bf16 moments).
__global__ void adamw_bf16_moments_kernel(float* p, const float* grad, uint16_t* m, uint16_t* v, int64_t n,
                                          exec::AdamWScalars s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = static_cast<float>(grad[i] * s.clip);
  const float mi = s.b1 * __bfloat162float(__ushort_as_bfloat16(m[i])) + (1 - s.b1) * g;
  const float vi = s.b2 * __bfloat162float(__ushort_as_bfloat16(v[i])) + (1 - s.b2) * g * g;
  m[i] = __bfloat16_as_ushort(__float2bfloat16_rn(mi));
  v[i] = __bfloat16_as_ushort(__float2bfloat16_rn(vi));
  const double mhat = mi / s.bc1, vhat = vi / s.bc2;
  p[i] = static_cast<float>(p[i] * s.decay - s.lr * mhat / (sqrt(vhat) + s.eps));
}

// bf16 <-> fp32, round to nearest even (__float2bfloat16_rn), one thread per element.
__global__ void to_bf16_kernel(uint16_t* dst, const float* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}
__global__ void from_bf16_kernel(float* dst, const uint16_t* src, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

void check_cublas(cublasStatus_t s, const char* op, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_cuda_error(op, std::string("cuBLAS status ") + std::to_string(static_cast<int>(s)), file, line);
}
#define RM_CUBLAS_CHECK(expr, op) check_cublas((expr), (op), __FILE__, __LINE__)

// A device buffer of host inputs (tokens, targets, positions), grown as needed. The
// kernels that read it run on the same stream before the next upload overwrites it.
template <class I>
class HostInput {
 public:
  ~HostInput() {
    if (data_ != nullptr) cudaFree(data_);
  }
  const I* upload(const I* host, int64_t n) {
    if (n > capacity_) {
      if (data_ != nullptr) RM_CUDA_CHECK(cudaFree(data_), "cudaFree (inputs)");
      RM_CUDA_CHECK(cudaMalloc(&data_, static_cast<size_t>(n) * sizeof(I)), "cudaMalloc (inputs)");
      capacity_ = n;
    }
    RM_CUDA_CHECK(cudaMemcpyAsync(data_, host, static_cast<size_t>(n) * sizeof(I),
                                  cudaMemcpyHostToDevice, 0),
                  "cudaMemcpyAsync (inputs)");
    return data_;
  }

 private:
  I* data_ = nullptr;
  int64_t capacity_ = 0;
};

class CudaTrainKernels final : public exec::TrainKernels<float> {
 public:
  explicit CudaTrainKernels(bool bf16_gemms)
      : compute_(bf16_gemms ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F) {
    int device = 0;
    RM_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
    // Keep freed tensors in the pool: the next step allocates the same sizes again.
    cudaMemPool_t pool;
    RM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
    uint64_t keep = UINT64_MAX;
    RM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                  "cudaMemPoolSetAttribute");
    RM_CUBLAS_CHECK(cublasCreate(&blas_), "cublasCreate");
    cudaDeviceProp prop{};
    RM_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    peak_ = peak_bf16_flops(prop.name);
  }
  ~CudaTrainKernels() override {
    cudaDeviceSynchronize();
    if (loss_ != nullptr) cudaFree(loss_);
    if (norm_ != nullptr) cudaFree(norm_);
    cublasDestroy(blas_);
  }

  std::string name() const override { return "cuda"; }
  double peak_flops() const override { return peak_; }

  Tensor<float> alloc(int64_t rows, int64_t cols) override {
    void* p = nullptr;
    RM_CUDA_CHECK(cudaMallocAsync(&p, static_cast<size_t>(std::max<int64_t>(rows * cols, 1)) * sizeof(float), 0),
                  "cudaMallocAsync");
    return Tensor<float>(this, static_cast<float*>(p), rows, cols);
  }
  void free(float* data) override { cudaFreeAsync(data, 0); }
  void zero(View<float> x) override {
    RM_CUDA_CHECK(cudaMemsetAsync(x.data, 0, bytes(x.size()), 0), "cudaMemsetAsync");
  }
  void copy(View<float> dst, ConstView<float> src) override {
    RM_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, bytes(src.size()), cudaMemcpyDeviceToDevice, 0),
                  "cudaMemcpyAsync (copy)");
  }
  void upload(float* dst, const float* host, int64_t n) override {
    RM_CUDA_CHECK(cudaMemcpy(dst, host, bytes(n), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
  }
  void download(float* host, const float* src, int64_t n) override {
    RM_CUDA_CHECK(cudaMemcpy(host, src, bytes(n), cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  }
  void synchronize() override { RM_CUDA_CHECK(cudaStreamSynchronize(0), "cudaStreamSynchronize"); }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, and a row-major
  // matrix is its transpose in column-major: so cuBLAS gets B first, each with its own
  // transpose flag, and the row lengths as leading dimensions.
  void gemm(ConstView<float> a, bool trans_a, ConstView<float> b, bool trans_b, View<float> c,
            bool accumulate) override {
    const int m = static_cast<int>(c.rows), n = static_cast<int>(c.cols);
    const int k = static_cast<int>(trans_a ? a.rows : a.cols);
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    RM_CUBLAS_CHECK(cublasGemmEx(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b.data,
                                 CUDA_R_32F, static_cast<int>(b.cols), a.data, CUDA_R_32F,
                                 static_cast<int>(a.cols), &beta, c.data, CUDA_R_32F, n, compute_,
                                 CUBLAS_GEMM_DEFAULT),
                    "cublasGemmEx");
  }

  void rmsnorm_forward(ConstView<float> x, const float* g, View<float> y, View<float> r) override {
    if (x.rows == 0) return;
    rmsnorm_forward_kernel<<<static_cast<unsigned>(x.rows), kThreads>>>(x.data, g, y.data, r.data,
                                                                       static_cast<int>(x.cols));
    RM_CUDA_CHECK_LAUNCH("rmsnorm_forward");
  }
  void rmsnorm_backward(ConstView<float> x, ConstView<float> r, const float* g,
                        ConstView<float> dy, View<float> dx, float* dg) override {
    if (x.rows == 0) return;
    rmsnorm_backward_kernel<<<static_cast<unsigned>(x.rows), kThreads>>>(
        x.data, r.data, g, dy.data, dx.data, dg, static_cast<int>(x.cols));
    RM_CUDA_CHECK_LAUNCH("rmsnorm_backward");
  }
  void rope(View<float> x, int heads, int d, const int64_t* positions, int64_t c, int sign) override {
    const int64_t n = x.rows * (d / 2);
    if (n == 0) return;
    const int64_t* pos = positions_.upload(positions, c);
    rope_kernel<<<blocks_for(n), kThreads>>>(x.data, x.rows, heads, d, pos, c, static_cast<float>(sign));
    RM_CUDA_CHECK_LAUNCH("rope");
  }
  void swiglu_forward(ConstView<float> u, ConstView<float> g, View<float> s) override {
    if (u.size() == 0) return;
    swiglu_forward_kernel<<<blocks_for(u.size()), kThreads>>>(u.data, g.data, s.data, u.size());
    RM_CUDA_CHECK_LAUNCH("swiglu_forward");
  }
  void swiglu_backward(ConstView<float> ds, ConstView<float> u, ConstView<float> g,
                       View<float> du, View<float> dg) override {
    if (u.size() == 0) return;
    swiglu_backward_kernel<<<blocks_for(u.size()), kThreads>>>(ds.data, u.data, g.data, du.data,
                                                               dg.data, u.size());
    RM_CUDA_CHECK_LAUNCH("swiglu_backward");
  }
  void embedding_forward(ConstView<float> table, const int32_t* tokens, View<float> x) override {
    embedding(const_cast<float*>(table.data), tokens, x.data, x.rows, x.cols, false);
  }
  void embedding_backward(ConstView<float> dx, const int32_t* tokens, View<float> dtable) override {
    embedding(dtable.data, tokens, const_cast<float*>(dx.data), dx.rows, dx.cols, true);
  }
  double cross_entropy(View<float> logits, const int32_t* targets, double grad_scale) override {
    if (logits.rows == 0) return 0;
    const int32_t* tgt = targets_.upload(targets, logits.rows);
    if (logits.rows > loss_rows_) {
      if (loss_ != nullptr) RM_CUDA_CHECK(cudaFree(loss_), "cudaFree (loss)");
      RM_CUDA_CHECK(cudaMalloc(&loss_, static_cast<size_t>(logits.rows) * sizeof(double)), "cudaMalloc (loss)");
      loss_rows_ = logits.rows;
    }
    cross_entropy_kernel<<<static_cast<unsigned>(logits.rows), kThreads>>>(
        logits.data, tgt, static_cast<int>(logits.cols), static_cast<float>(grad_scale), loss_);
    RM_CUDA_CHECK_LAUNCH("cross_entropy");
    std::vector<double> rows(static_cast<size_t>(logits.rows));
    RM_CUDA_CHECK(cudaMemcpy(rows.data(), loss_, rows.size() * sizeof(double), cudaMemcpyDeviceToHost),
                  "cudaMemcpy (loss)");
    double loss = 0;
    for (double l : rows) loss += l;  // in row order, as the cpu kernels add them
    return loss;
  }
  void to_heads(ConstView<float> x, int64_t row0, int heads, int d, View<float> t) override {
    layout(const_cast<float*>(x.data), row0, heads, d, t.data, t.cols / d, true);
  }
  void from_heads(ConstView<float> t, int heads, int d, View<float> x, int64_t row0) override {
    layout(x.data, row0, heads, d, const_cast<float*>(t.data), t.cols / d, false);
  }
  void add(View<float> y, ConstView<float> x) override {
    if (x.size() == 0) return;
    add_kernel<<<blocks_for(x.size()), kThreads>>>(y.data, x.data, x.size());
    RM_CUDA_CHECK_LAUNCH("add");
  }
  double squared_norm(ConstView<float> x) override {
    if (norm_ == nullptr) RM_CUDA_CHECK(cudaMalloc(&norm_, sizeof(double)), "cudaMalloc (norm)");
    RM_CUDA_CHECK(cudaMemsetAsync(norm_, 0, sizeof(double), 0), "cudaMemsetAsync (norm)");
    if (x.size() > 0) {
      // A grid-stride loop over at most 1024 blocks: few atomics, every SM busy.
      const unsigned blocks = std::min<unsigned>(blocks_for(x.size()), 1024);
      squared_norm_kernel<<<blocks, kThreads>>>(x.data, x.size(), norm_);
      RM_CUDA_CHECK_LAUNCH("squared_norm");
    }
    double sum = 0;
    RM_CUDA_CHECK(cudaMemcpy(&sum, norm_, sizeof sum, cudaMemcpyDeviceToHost), "cudaMemcpy (norm)");
    return sum;
  }
  void adamw(View<float> p, ConstView<float> grad, View<float> m, View<float> v,
             const exec::AdamWScalars& s) override {
    if (p.size() == 0) return;
    adamw_kernel<<<blocks_for(p.size()), kThreads>>>(p.data, grad.data, m.data, v.data, p.size(), s);
    RM_CUDA_CHECK_LAUNCH("adamw");
  }
  void adamw_bf16_moments(View<float> p, ConstView<float> grad, View<exec::Bf16> m, View<exec::Bf16> v,
                          const exec::AdamWScalars& s) override {
    if (p.size() == 0) return;
    adamw_bf16_moments_kernel<<<blocks_for(p.size()), kThreads>>>(p.data, grad.data,
                                                                 reinterpret_cast<uint16_t*>(m.data),
                                                                 reinterpret_cast<uint16_t*>(v.data), p.size(), s);
    RM_CUDA_CHECK_LAUNCH("adamw_bf16_moments");
  }
  void to_bf16(exec::Bf16* dst, const float* src, int64_t n) override {
    if (n == 0) return;
    to_bf16_kernel<<<blocks_for(n), kThreads>>>(reinterpret_cast<uint16_t*>(dst), src, n);
    RM_CUDA_CHECK_LAUNCH("to_bf16");
  }
  void from_bf16(float* dst, const exec::Bf16* src, int64_t n) override {
    if (n == 0) return;
    from_bf16_kernel<<<blocks_for(n), kThreads>>>(dst, reinterpret_cast<const uint16_t*>(src), n);
    RM_CUDA_CHECK_LAUNCH("from_bf16");
  }

 private:
  static size_t bytes(int64_t n) { return static_cast<size_t>(n) * sizeof(float); }
  // The kernels below read the side they do not write: the const_casts above only let
  // one kernel serve both directions.
  void embedding(float* table, const int32_t* tokens, float* x, int64_t rows, int64_t n,
                 bool backward) {
    if (rows * n == 0) return;
    const int32_t* tok = tokens_.upload(tokens, rows);
    embedding_kernel<<<blocks_for(rows * n), kThreads>>>(table, tok, x, rows, static_cast<int>(n),
                                                         backward);
    RM_CUDA_CHECK_LAUNCH(backward ? "embedding_backward" : "embedding_forward");
  }
  void layout(float* x, int64_t row0, int heads, int d, float* t, int64_t c, bool to) {
    const int64_t n = heads * c * d;
    if (n == 0) return;
    heads_kernel<<<blocks_for(n), kThreads>>>(x, row0, heads, d, c, t, to);
    RM_CUDA_CHECK_LAUNCH(to ? "to_heads" : "from_heads");
  }

  cublasComputeType_t compute_;
  cublasHandle_t blas_ = nullptr;
  double peak_ = 0;
  HostInput<int32_t> tokens_, targets_;
  HostInput<int64_t> positions_;
  double* loss_ = nullptr;
  int64_t loss_rows_ = 0;
  double* norm_ = nullptr;  // squared_norm's accumulator
};

}  // namespace

std::unique_ptr<exec::TrainKernels<float>> make_cuda_train_kernels(bool bf16_gemms) {
  return std::make_unique<CudaTrainKernels>(bf16_gemms);
}

}  // namespace rm::gpu
