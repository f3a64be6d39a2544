// The cuda backend (see cuda_backend.h): device tensors in the layouts of backend.h
// (bf16 Q, K, V, dO and K,V blocks; fp32 out, lse, dQ, dK, dV and dK,dV accumulators).
#include "executor/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "executor/buffer_table.h"
#include "executor/cuda/local_transport.h"
#include "executor/cuda/nccl_transport.h"
#include "executor/train_kernels.h"
#include "planner/input_error.h"

namespace rm::exec {

namespace {

using gpu::bf16;
using gpu::check_mpi;
using gpu::CudaError;

// The largest relative error (verify.h's measure) --verify accepts from this backend:
// inputs are rounded to bf16 (the reference uses the same rounded values), and P and dS
// are rounded to bf16 before their tensor-core products, which leaves errors of a few
// 1e-3 of a tensor's scale; 2e-2 is FlashAttention's own bf16 test bound.
constexpr double kBf16VerifyTolerance = 2e-2;

double timeout_from_env() {
  const char* s = std::getenv("RINGMASTER_CUDA_TIMEOUT");
  if (s == nullptr || *s == '\0') return 300;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || *end != '\0' || !(v > 0))
    throw InputError("RINGMASTER_CUDA_TIMEOUT: expected a positive number of seconds (got '" +
                     std::string(s) + "')");
  return v;
}

// One cudaMalloc'd allocation, freed with the owner.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes) : bytes_(bytes) {
    RM_CUDA_CHECK(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMemory() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override {
    if (compute_ != nullptr) {
      cudaStreamSynchronize(compute_);
      transport_.reset();
      cudaEventDestroy(done_);
      cudaStreamDestroy(compute_);
    }
    if (kv_tok_host_ != nullptr) cudaFreeHost(kv_tok_host_);
  }

  std::string name() const override { return "cuda"; }

  void setup(const AttentionShape& shape, const std::vector<int64_t>& tokens,
             uint64_t seed) override {
    check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    gpu::set_error_context("rank " + std::to_string(rank_));
    if (!gpu::head_dim_supported(shape.d))
      throw InputError("model: head_dim " + std::to_string(shape.d) +
                       " is not supported by the cuda kernels (32, 64 or 128)");
    if (shape.c > INT_MAX / 2 || (!tokens.empty() && tokens.back() > INT_MAX))
      throw InputError("plan: seq_len too large for the cuda kernels (token indices are int32)");
    timeout_s_ = timeout_from_env();
    choose_device_and_transport();

    shape_ = shape;
    dims_.h = shape.h;
    dims_.h_kv = shape.h_kv;
    dims_.d = shape.d;
    dims_.c_q = dims_.c_kv = static_cast<int>(shape.c);
    dims_.segments = shape.segments;
    dims_.causal = shape.causal;
    dims_.scale = 1.0f / std::sqrt(static_cast<float>(shape.d));
    tiles_ = {shape.block_q, shape.block_kv};
    tokens_ = tokens;
    q_elems_ = static_cast<size_t>(shape.h) * shape.c * shape.d;
    kv_elems_ = static_cast<size_t>(shape.h_kv) * shape.c * shape.d;
    rows_ = static_cast<size_t>(shape.h) * shape.c;

    q_ = upload_input(seed, InputTensor::kQ, shape.h);
    k_ = upload_input(seed, InputTensor::kK, shape.h_kv);
    v_ = upload_input(seed, InputTensor::kV, shape.h_kv);
    dout_ = upload_input(seed, InputTensor::kDout, shape.h);
    out_ = DeviceMemory(q_elems_ * sizeof(float));
    lse_ = DeviceMemory(rows_ * sizeof(float));
    delta_ = DeviceMemory(rows_ * sizeof(float));
    dq_ = DeviceMemory(q_elems_ * sizeof(float));
    dk_ = DeviceMemory(kv_elems_ * sizeof(float));
    dv_ = DeviceMemory(kv_elems_ * sizeof(float));

    std::vector<int32_t> tok32(tokens.begin(), tokens.end());
    q_tok_ = DeviceMemory(tok32.size() * sizeof(int32_t));
    kv_tok_ = DeviceMemory(tok32.size() * sizeof(int32_t));
    RM_CUDA_CHECK(cudaMemcpy(q_tok_.get(), tok32.data(), q_tok_.bytes(), cudaMemcpyHostToDevice),
                  "cudaMemcpy (tokens)");
    RM_CUDA_CHECK(cudaMallocHost(&kv_tok_host_, kv_tok_.bytes()), "cudaMallocHost (tokens)");
  }

  void connect(const std::vector<int>& group) override { transport_->connect(group); }

  double verify_tolerance() const override { return kBf16VerifyTolerance; }

  AttentionTiles tiles_run(bool backward) const override {
    const gpu::Tiles t = backward ? gpu::backward_tiles() : gpu::forward_tiles(tiles_);
    return {t.block_q, t.block_kv};
  }

  // --- schedule buffers -----------------------------------------------------------------

  void alloc(int buffer, BufferRole role) override {
    std::vector<DeviceMemory>& pool = pool_[role];
    if (pool.empty()) {
      pool.emplace_back(role == BufferRole::kKv ? 2 * kv_elems_ * sizeof(bf16)
                                                : 2 * kv_elems_ * sizeof(float));
    }
    buffers_.add(buffer, role, std::move(pool.back()));
    pool.pop_back();
  }

  void free(int buffer) override {
    auto [role, mem] = buffers_.remove(buffer);
    pool_[role].push_back(std::move(mem));
  }

  std::size_t bytes_of(int buffer) const override { return buffers_.get(buffer).bytes(); }

  void load_own_kv(int buffer) override {
    bf16* kv = buffers_.get(buffer, BufferRole::kKv).as<bf16>();
    RM_CUDA_CHECK(cudaMemcpyAsync(kv, k_.get(), kv_elems_ * sizeof(bf16),
                                  cudaMemcpyDeviceToDevice, compute_),
                  "cudaMemcpyAsync (own K)");
    RM_CUDA_CHECK(cudaMemcpyAsync(kv + kv_elems_, v_.get(), kv_elems_ * sizeof(bf16),
                                  cudaMemcpyDeviceToDevice, compute_),
                  "cudaMemcpyAsync (own V)");
    finish("load_own_kv");
  }

  void zero(int buffer) override {
    DeviceMemory& b = buffers_.get(buffer, BufferRole::kDkv);
    RM_CUDA_CHECK(cudaMemsetAsync(b.get(), 0, b.bytes(), compute_), "cudaMemsetAsync");
    finish("zero");
  }

  // --- kernels ----------------------------------------------------------------------------

  void begin_forward() override {
    RM_CUDA_CHECK(cudaMemsetAsync(out_.get(), 0, out_.bytes(), compute_), "cudaMemsetAsync (out)");
    gpu::fill(lse_.as<float>(), -std::numeric_limits<float>::infinity(),
              static_cast<int64_t>(rows_), compute_);
    finish("begin_forward");
  }

  void attention_forward(int kv_buffer, const std::vector<int64_t>& kv_tokens) override {
    const bf16* kv = buffers_.get(kv_buffer, BufferRole::kKv).as<bf16>();
    upload_kv_tokens(kv_tokens);
    gpu::attention_forward(dims_, tiles_, q_.as<bf16>(), kv, kv + kv_elems_, q_tok_.as<int32_t>(),
                           kv_tok_.as<int32_t>(), out_.as<float>(), lse_.as<float>(), true,
                           compute_);
    finish("attention_forward");
  }

  void begin_backward() override {
    RM_CUDA_CHECK(cudaMemsetAsync(dq_.get(), 0, dq_.bytes(), compute_), "cudaMemsetAsync (dq)");
    RM_CUDA_CHECK(cudaMemsetAsync(dk_.get(), 0, dk_.bytes(), compute_), "cudaMemsetAsync (dk)");
    RM_CUDA_CHECK(cudaMemsetAsync(dv_.get(), 0, dv_.bytes(), compute_), "cudaMemsetAsync (dv)");
    gpu::attention_backward_prep(dims_, dout_.as<bf16>(), out_.as<float>(), delta_.as<float>(),
                                 compute_);
    finish("begin_backward");
    backward_ran_ = true;
  }

  void attention_backward(int kv_buffer, const std::vector<int64_t>& kv_tokens,
                          int dkv_buffer) override {
    const bf16* kv = buffers_.get(kv_buffer, BufferRole::kKv).as<bf16>();
    float* dkv = buffers_.get(dkv_buffer, BufferRole::kDkv).as<float>();
    upload_kv_tokens(kv_tokens);
    gpu::attention_backward(dims_, q_.as<bf16>(), kv, kv + kv_elems_, dout_.as<bf16>(),
                            lse_.as<float>(), delta_.as<float>(), q_tok_.as<int32_t>(),
                            kv_tok_.as<int32_t>(), dq_.as<float>(), dkv, dkv + kv_elems_,
                            compute_);
    finish("attention_backward");
  }

  void accumulate(int dst_buffer, int src_buffer) override {
    float* dst = buffers_.get(dst_buffer, BufferRole::kDkv).as<float>();
    const float* src = buffers_.get(src_buffer, BufferRole::kDkv).as<float>();
    gpu::add_inplace(dst, src, static_cast<int64_t>(2 * kv_elems_), compute_);
    finish("accumulate");
  }

  void take_own_dkv(int buffer, bool add) override {
    const float* b = buffers_.get(buffer, BufferRole::kDkv).as<float>();
    const int64_t n = static_cast<int64_t>(kv_elems_);
    if (add) {
      gpu::add_inplace(dk_.as<float>(), b, n, compute_);
      gpu::add_inplace(dv_.as<float>(), b + n, n, compute_);
    } else {
      RM_CUDA_CHECK(cudaMemcpyAsync(dk_.get(), b, dk_.bytes(), cudaMemcpyDeviceToDevice, compute_),
                    "cudaMemcpyAsync (own dK)");
      RM_CUDA_CHECK(cudaMemcpyAsync(dv_.get(), b + n, dv_.bytes(), cudaMemcpyDeviceToDevice,
                                    compute_),
                    "cudaMemcpyAsync (own dV)");
    }
    finish("take_own_dkv");
  }

  // --- transfers --------------------------------------------------------------------------

  void begin_phase() override { transport_->begin_phase(); }
  void end_phase() override { transport_->end_phase(); }

  // The region first: a transfer past its buffer is refused before the transport sees it.
  int isend(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) override {
    const gpu::DeviceRegion r = region(buffer, offset, bytes);
    return transport_->isend(r, peer, tag);
  }
  int irecv(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) override {
    const gpu::DeviceRegion r = region(buffer, offset, bytes);
    return transport_->irecv(r, peer, tag);
  }

  void wait(int request) override {
    const double deadline = now() + timeout_s_;
    while (!transport_->test(request)) {
      if (now() > deadline) {
        const std::string what = transport_->describe(request);
        transport_->abort();
        throw CudaError(what + " on " + gpu::error_context() + ": no progress for " +
                        std::to_string(static_cast<int>(timeout_s_)) +
                        " s (peer dead or stalled); transport aborted");
      }
      std::this_thread::yield();
    }
  }

  // --- clock and results ------------------------------------------------------------------

  double now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void synchronize() override {
    RM_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  // Training's tensors (backend.h), already on this GPU: Q, K, V and dO rounded to bf16
  // as the kernels read them, out and lse copied; the results copied back. On the compute
  // stream, finished before returning: the train kernels run on the legacy stream and
  // synchronise before they call the attention.
  void load(const float* q, const float* k, const float* v, const float* dout, const float* out,
            const float* lse) override {
    gpu::to_bf16(q, q_.as<bf16>(), static_cast<int64_t>(q_elems_), compute_);
    gpu::to_bf16(k, k_.as<bf16>(), static_cast<int64_t>(kv_elems_), compute_);
    gpu::to_bf16(v, v_.as<bf16>(), static_cast<int64_t>(kv_elems_), compute_);
    if (dout != nullptr) gpu::to_bf16(dout, dout_.as<bf16>(), static_cast<int64_t>(q_elems_), compute_);
    if (out != nullptr) copy_on_device(out_.get(), out, q_elems_ * sizeof(float));
    if (lse != nullptr) copy_on_device(lse_.get(), lse, rows_ * sizeof(float));
    finish("load");
  }
  void store_forward(float* out, float* lse) const override {
    copy_on_device(out, out_.get(), q_elems_ * sizeof(float));
    copy_on_device(lse, lse_.get(), rows_ * sizeof(float));
    RM_CUDA_CHECK(cudaStreamSynchronize(compute_), "cudaStreamSynchronize (store)");
  }
  void store_backward(float* dq, float* dk, float* dv) const override {
    copy_on_device(dq, dq_.get(), q_elems_ * sizeof(float));
    copy_on_device(dk, dk_.get(), kv_elems_ * sizeof(float));
    copy_on_device(dv, dv_.get(), kv_elems_ * sizeof(float));
    RM_CUDA_CHECK(cudaStreamSynchronize(compute_), "cudaStreamSynchronize (store)");
  }

  HostTensors download() const override {
    HostTensors t;
    t.tokens = tokens_;
    t.q = download_bf16(q_, q_elems_);
    t.k = download_bf16(k_, kv_elems_);
    t.v = download_bf16(v_, kv_elems_);
    t.dout = download_bf16(dout_, q_elems_);
    t.out = download_f32(out_, q_elems_);
    t.lse = download_f32(lse_, rows_);
    if (backward_ran_) {
      t.dq = download_f32(dq_, q_elems_);
      t.dk = download_f32(dk_, kv_elems_);
      t.dv = download_f32(dv_, kv_elems_);
    }
    return t;
  }

 private:
  void choose_device_and_transport() {
    int world = 1, local_rank = 0, local_size = 1;
    check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world), "MPI_Comm_size");
    MPI_Comm node;
    check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
              "MPI_Comm_split_type");
    MPI_Comm_rank(node, &local_rank);
    MPI_Comm_size(node, &local_size);
    MPI_Comm_free(&node);

    const int devices = gpu::device_count();
    if (devices == 0) {
      char host[MPI_MAX_PROCESSOR_NAME];
      int len = 0;
      MPI_Get_processor_name(host, &len);
      throw CudaError("cuda backend: no CUDA device visible on rank " + std::to_string(rank_) +
                      " (host " + std::string(host, static_cast<size_t>(len)) + ")");
    }
    device_ = local_rank % devices;
    RM_CUDA_CHECK(cudaSetDevice(device_), "cudaSetDevice");
    gpu::set_error_context("rank " + std::to_string(rank_) + " (GPU " + std::to_string(device_) + ")");
    RM_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking),
                  "cudaStreamCreate (compute)");
    RM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");

    std::string kind;
    if (const char* env = std::getenv("RINGMASTER_CUDA_TRANSPORT"); env != nullptr && *env != '\0') {
      kind = env;
      if (kind != "nccl" && kind != "local")
        throw InputError("RINGMASTER_CUDA_TRANSPORT: expected nccl or local (got '" + kind + "')");
    } else if (local_size > devices) {
      if (local_size != world)
        throw CudaError("cuda backend: " + std::to_string(local_size) + " ranks share " +
                        std::to_string(devices) +
                        " GPU(s) on one node of a multi-node job: NCCL needs one GPU per rank, "
                        "and the local transport only works within one node");
      kind = "local";
    } else {
      kind = world == 1 ? "local" : "nccl";
    }
    transport_ = kind == "nccl" ? gpu::make_nccl_transport(MPI_COMM_WORLD)
                                : gpu::make_local_transport(MPI_COMM_WORLD);
  }

  DeviceMemory upload_input(uint64_t seed, InputTensor which, int heads) const {
    const int64_t c = shape_c(), d = dims_.d;
    std::vector<float> values(static_cast<size_t>(heads) * c * d);
    for (int hh = 0; hh < heads; ++hh)
      for (int64_t i = 0; i < c; ++i)
        for (int64_t j = 0; j < d; ++j)
          values[static_cast<size_t>((hh * c + i) * d + j)] =
              input_value(seed, which, hh, tokens_[static_cast<size_t>(i)], static_cast<int>(j));
    // Rounded to bf16 on the host as the train kernels round (to nearest even).
    std::vector<exec::Bf16> host(values.size());
    exec::cpu_train_kernels<float>().to_bf16(host.data(), values.data(), static_cast<int64_t>(values.size()));
    DeviceMemory m(host.size() * sizeof(exec::Bf16));
    RM_CUDA_CHECK(cudaMemcpy(m.get(), host.data(), m.bytes(), cudaMemcpyHostToDevice),
                  "cudaMemcpy (inputs)");
    return m;
  }

  int64_t shape_c() const { return static_cast<int64_t>(tokens_.size()); }

  std::vector<float> download_bf16(const DeviceMemory& m, size_t n) const {
    std::vector<exec::Bf16> bits(n);
    RM_CUDA_CHECK(cudaMemcpy(bits.data(), m.get(), n * sizeof(exec::Bf16), cudaMemcpyDeviceToHost),
                  "cudaMemcpy (download)");
    std::vector<float> out(n);
    exec::cpu_train_kernels<float>().from_bf16(out.data(), bits.data(), static_cast<int64_t>(n));
    return out;
  }

  void copy_on_device(void* dst, const void* src, size_t bytes) const {
    RM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_),
                  "cudaMemcpyAsync (training tensors)");
  }

  std::vector<float> download_f32(const DeviceMemory& m, size_t n) const {
    std::vector<float> out(n);
    RM_CUDA_CHECK(cudaMemcpy(out.data(), m.get(), n * sizeof(float), cudaMemcpyDeviceToHost),
                  "cudaMemcpy (download)");
    return out;
  }

  void upload_kv_tokens(const std::vector<int64_t>& kv_tokens) {
    check_kv_tokens("cuda", kv_tokens.size(), tokens_.size());
    // The staging buffer is free: the previous kernel call finished before returning.
    for (size_t i = 0; i < kv_tokens.size(); ++i)
      kv_tok_host_[i] = static_cast<int32_t>(kv_tokens[i]);
    RM_CUDA_CHECK(cudaMemcpyAsync(kv_tok_.get(), kv_tok_host_, kv_tok_.bytes(),
                                  cudaMemcpyHostToDevice, compute_),
                  "cudaMemcpyAsync (K,V tokens)");
  }

  // Waits for the compute stream, progressing transfers meanwhile.
  void finish(const char* op) {
    RM_CUDA_CHECK(cudaEventRecord(done_, compute_), op);
    for (;;) {
      const cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) gpu::check_cuda(e, op, __FILE__, __LINE__);
      transport_->progress();
      std::this_thread::yield();
    }
  }

  gpu::DeviceRegion region(int buffer, std::size_t offset, std::size_t bytes) {
    const DeviceMemory& b = buffers_.get_span(buffer, offset, bytes, [](const DeviceMemory& m) { return m.bytes(); });
    return {b.get(), offset, bytes};
  }

  int rank_ = 0;
  int device_ = 0;
  double timeout_s_ = 300;
  AttentionShape shape_;
  gpu::AttentionDims dims_;
  gpu::Tiles tiles_;
  std::vector<int64_t> tokens_;
  size_t q_elems_ = 0, kv_elems_ = 0, rows_ = 0;
  bool backward_ran_ = false;

  cudaStream_t compute_ = nullptr;
  cudaEvent_t done_ = nullptr;
  std::unique_ptr<gpu::Transport> transport_;
  DeviceMemory q_, k_, v_, dout_, out_, lse_, delta_, dq_, dk_, dv_, q_tok_, kv_tok_;
  int32_t* kv_tok_host_ = nullptr;
  BufferTable<DeviceMemory> buffers_{"cuda"};
  std::map<BufferRole, std::vector<DeviceMemory>> pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace rm::exec
