// The cuda backend's attention kernels on this machine's GPU: forward and backward
// TFLOP/s and the fraction of the GPU's dense bf16 peak (peak_bf16_flops), for the tile
// sizes the planner chooses among, head dims 64 and 128, one c x c block (the diagonal
// block when causal). Times are CUDA events (kernel time only, median of 5 launches).
//
//   build-cuda/bin/cuda_attention_bench            (scripts/gpu-check runs it)
//
// Without a CUDA device (or a build without the cuda backend) it prints why and exits 77.
#include <benchmark/benchmark.h>

#include <cstdio>

#ifdef RINGMASTER_HAVE_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "executor/cuda/cuda_backend.h"
#include "planner/kernel_efficiency.h"

namespace {

double g_peak = 0;  // FLOP/s of this GPU, 0 when unknown

// Args: head dim, block_q, block_kv, causal.
void BM_CudaAttention(benchmark::State& state) {
  rm::gpu::AttentionDims dims;
  dims.d = static_cast<int>(state.range(0));
  dims.h = dims.h_kv = 2048 / dims.d;  // hidden 2048: 16 heads of 128 or 32 of 64
  dims.c_q = dims.c_kv = 4096;
  dims.causal = state.range(3) != 0;
  dims.scale = 1.0f / std::sqrt(static_cast<float>(dims.d));
  const rm::gpu::Tiles tiles{static_cast<int>(state.range(1)), static_cast<int>(state.range(2))};
  rm::gpu::KernelTiming t;
  for (auto _ : state) {
    t = rm::gpu::time_attention_kernels(dims, tiles, 5);
    state.SetIterationTime(t.forward_s + t.backward_s);
  }
  const double fwd = t.forward_flops / t.forward_s, bwd = t.backward_flops / t.backward_s;
  state.counters["fwd_TFLOPs"] = fwd * 1e-12;
  state.counters["bwd_TFLOPs"] = bwd * 1e-12;
  if (g_peak > 0) {
    state.counters["fwd_%peak"] = 100 * fwd / g_peak;
    state.counters["bwd_%peak"] = 100 * bwd / g_peak;
  }
}
BENCHMARK(BM_CudaAttention)
    ->ArgNames({"d", "bq", "bkv", "causal"})
    ->ArgsProduct({{64, 128}, {64, 128}, {64, 128}, {0, 1}})
    ->UseManualTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace
#endif

int main(int argc, char** argv) {
#ifndef RINGMASTER_HAVE_CUDA
  (void)argc;
  (void)argv;
  std::printf("skipped: this build has no cuda backend (no nvcc or NCCL at configure time)\n");
  return 77;
#else
  if (rm::gpu::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return 1;
  g_peak = rm::gpu::peak_bf16_flops(prop.name);
  std::printf("# %s (%d SMs): dense bf16 peak %s\n", prop.name, prop.multiProcessorCount,
              g_peak > 0 ? (std::to_string(static_cast<int>(g_peak * 1e-12)) + " TFLOP/s").c_str()
                         : "unknown (no %peak columns)");
  std::printf("# FLOPs: forward 4*c^2*d*h (half when causal), backward %.1f x forward\n",
              rm::kBackwardFlopsFactor);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
#endif
}
