// Device queries and CUDA-event kernel timing (see cuda_backend.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "executor/cuda/cuda_backend.h"
#include "planner/kernel_efficiency.h"
#include "planner/stats.h"

namespace rm::gpu {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

double peak_bf16_flops(const std::string& device_name) {
  // Dense bf16 tensor-core peaks from NVIDIA's datasheets (SXM parts; DESIGN.md).
  if (device_name.find("H100") != std::string::npos ||
      device_name.find("H200") != std::string::npos)
    return 989e12;
  if (device_name.find("A100") != std::string::npos) return 312e12;
  return 0;
}

namespace {

// Device memory freed on scope exit.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) { RM_CUDA_CHECK(cudaMalloc(&p, bytes), "cudaMalloc (timing)"); }
  ~Scratch() { cudaFree(p); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median seconds of `repeats` runs of `body` on `stream`, after one warm-up run.
template <typename Body>
double time_median(cudaStream_t stream, int repeats, Body body) {
  cudaEvent_t start, stop;
  RM_CUDA_CHECK(cudaEventCreate(&start), "cudaEventCreate");
  RM_CUDA_CHECK(cudaEventCreate(&stop), "cudaEventCreate");
  body();
  std::vector<double> times;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    RM_CUDA_CHECK(cudaEventRecord(start, stream), "cudaEventRecord");
    body();
    RM_CUDA_CHECK(cudaEventRecord(stop, stream), "cudaEventRecord");
    RM_CUDA_CHECK(cudaEventSynchronize(stop), "cudaEventSynchronize (kernel timing)");
    float ms = 0;
    RM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms * 1e-3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median(times);
}

}  // namespace

KernelTiming time_attention_kernels(const AttentionDims& dims, Tiles tiles, int repeats) {
  const size_t q_elems = static_cast<size_t>(dims.h) * dims.c_q * dims.d;
  const size_t kv_elems = static_cast<size_t>(dims.h_kv) * dims.c_kv * dims.d;
  const size_t rows = static_cast<size_t>(dims.h) * dims.c_q;
  Scratch q(q_elems * 2), dout(q_elems * 2), k(kv_elems * 2), v(kv_elems * 2);
  Scratch out(q_elems * 4), dq(q_elems * 4), lse(rows * 4), delta(rows * 4);
  Scratch dk(kv_elems * 4), dv(kv_elems * 4);
  Scratch qtok(dims.c_q * 4), kvtok(dims.c_kv * 4);
  // Small values keep the softmax well conditioned; the timing does not depend on them.
  RM_CUDA_CHECK(cudaMemset(q.p, 0x3c, q_elems * 2), "cudaMemset");
  RM_CUDA_CHECK(cudaMemset(k.p, 0x3c, kv_elems * 2), "cudaMemset");
  RM_CUDA_CHECK(cudaMemset(v.p, 0x3c, kv_elems * 2), "cudaMemset");
  RM_CUDA_CHECK(cudaMemset(dout.p, 0x3c, q_elems * 2), "cudaMemset");
  // The diagonal block: query and key tokens coincide.
  std::vector<int32_t> tok(static_cast<size_t>(std::max(dims.c_q, dims.c_kv)));
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>(i);
  RM_CUDA_CHECK(cudaMemcpy(qtok.p, tok.data(), dims.c_q * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  RM_CUDA_CHECK(cudaMemcpy(kvtok.p, tok.data(), dims.c_kv * 4, cudaMemcpyHostToDevice), "cudaMemcpy");

  cudaStream_t stream;
  RM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  KernelTiming t;
  t.forward_s = time_median(stream, repeats, [&] {
    attention_forward(dims, tiles, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), qtok.as<int32_t>(),
                      kvtok.as<int32_t>(), out.as<float>(), lse.as<float>(), false, stream);
  });
  attention_backward_prep(dims, dout.as<bf16>(), out.as<float>(), delta.as<float>(), stream);
  t.backward_s = time_median(stream, repeats, [&] {
    attention_backward(dims, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), dout.as<bf16>(),
                       lse.as<float>(), delta.as<float>(), qtok.as<int32_t>(), kvtok.as<int32_t>(),
                       dq.as<float>(), dk.as<float>(), dv.as<float>(), stream);
  });
  RM_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize (kernel timing)");
  cudaStreamDestroy(stream);
  t.forward_flops = 4.0 * dims.c_q * dims.c_kv * dims.d * dims.h * (dims.causal ? 0.5 : 1.0);
  t.backward_flops = kBackwardFlopsFactor * t.forward_flops;
  return t;
}

}  // namespace rm::gpu
