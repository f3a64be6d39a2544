// One training step of the shipped `small` model (24M parameters) against this machine's
// Eigen GEMM, in one run.
//
// Target (issue 13): a training step of the small model reaches >= 60 % of Eigen's SGEMM
// rate in its linear layers. One sequence of 512 tokens, forward and backward, on one
// thread (one rank of `ringmaster train`). The attention runs through the transformer's
// callback and is timed apart (here the fp64 reference, no MPI needed); everything else
// of the step (the linear layers, norms, RoPE, SwiGLU, the head's softmax, transposes) is
// the "rest". Counters:
//   linear_GFLOP/s  the linear layers' FLOPs (6 x matrix parameters x tokens, embedding
//                   lookups excluded) over the rest's time: a lower bound on the GEMMs' rate
//   of_gemm         that over a 512^3 Eigen SGEMM's GFLOP/s (best of 20, same process)
// Both timed in thread CPU time, so other processes on a shared machine do not skew them.
//
// And the AdamW update over the small model's parameters on one thread, the moments in
// fp32 (arg 0) or kept in bf16 (arg 1, TrainKernels::adamw_bf16_moments, Megatron-Core's
// precision-aware optimizer): update_GB/s is optimizer_update_bytes of the states kept (12 or
// 8 bytes a parameter) over the update's time, the rate `calibrate` fits from `train`'s
// optimizer records.
//
//   build/bin/train_step_bench --benchmark_min_time=2
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <vector>

#include "bench/eigen_reference.h"
#include "executor/adamw.h"
#include "executor/reference_attention.h"
#include "executor/transformer.h"
#include "planner/cost_params.h"
#include "planner/spec_library.h"

namespace {

using rm::bench::cpu_now;
using rm::bench::reference_gemm;

constexpr int64_t kTokens = 512;  // one sequence on one rank

void BM_SmallModelStep(benchmark::State& state) {
  Eigen::setNbThreads(1);
  const double gemm_rate = reference_gemm();
  const rm::ModelSpec spec = rm::load_model("small");
  const rm::exec::Transformer model(spec, "builtin:small");
  const std::vector<float> params = model.init(1);
  std::vector<float> grads(params.size(), 0.0f);
  std::vector<int32_t> tokens(kTokens + 1);
  for (int64_t i = 0; i <= kTokens; ++i) tokens[i] = static_cast<int32_t>((i * 37) % 256);
  std::vector<int64_t> positions(kTokens);
  for (int64_t i = 0; i < kTokens; ++i) positions[i] = i;
  const rm::exec::ReferenceShape shape{kTokens, spec.head_dim, spec.heads, spec.kv_heads, true};
  double attention_s = 0;
  rm::exec::TrainKernels<float>& kernels = rm::exec::cpu_train_kernels<float>();
  const rm::exec::AttentionFn fwd = [&](int, rm::exec::LayerAttention<float>& t) {
    const double t0 = cpu_now();
    rm::exec::reference_layer_attention(shape, kernels, t, false);
    attention_s += cpu_now() - t0;
  };
  const rm::exec::AttentionFn bwd = [&](int, rm::exec::LayerAttention<float>& t) {
    const double t0 = cpu_now();
    rm::exec::reference_layer_attention(shape, kernels, t, true);
    attention_s += cpu_now() - t0;
  };
  double matrix_params = 0;
  for (const rm::exec::ParamTensor& t : model.tensors())
    if (t.decay && t.name != "tok_embeddings") matrix_params += static_cast<double>(t.rows * t.cols);
  double total_s = 0;
  for (auto _ : state) {
    const double t0 = cpu_now();
    model.forward_backward(params, grads, tokens.data(), tokens.data() + 1, positions.data(), kTokens,
                           1.0 / kTokens, fwd, bwd);
    total_s += cpu_now() - t0;
  }
  const double steps = static_cast<double>(state.iterations());
  const double rest_s = (total_s - attention_s) / steps;
  const double linear_rate = 6.0 * matrix_params * kTokens / rest_s;
  state.counters["rest_ms"] = rest_s * 1e3;
  state.counters["attention_ms"] = attention_s / steps * 1e3;
  state.counters["linear_GFLOP/s"] = linear_rate * 1e-9;
  state.counters["gemm_GFLOP/s"] = gemm_rate * 1e-9;
  state.counters["of_gemm"] = linear_rate / gemm_rate;
}
BENCHMARK(BM_SmallModelStep)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_AdamWUpdate(benchmark::State& state) {
  const bool bf16 = state.range(0) != 0;
  const rm::exec::Transformer model(rm::load_model("small"), "builtin:small");
  const int64_t n = static_cast<int64_t>(model.num_params());
  std::vector<float> params = model.init(1), grads(params.size(), 1e-3f), m(params.size(), 0.0f), v(m);
  std::vector<rm::exec::Bf16> m16(params.size()), v16(params.size());
  const std::vector<rm::exec::AdamWSegment> segments = rm::exec::whole_model_segments(model.tensors());
  rm::exec::TrainKernels<float>& kernels = rm::exec::cpu_train_kernels<float>();
  const rm::exec::AdamWConfig cfg;
  int64_t step = 0;
  double total_s = 0;
  for (auto _ : state) {
    const double t0 = cpu_now();
    if (bf16)
      rm::exec::adamw_update(cfg, segments, 0.5, step++, kernels, {params.data(), 1, n}, {grads.data(), 1, n},
                             {m16.data(), 1, n}, {v16.data(), 1, n});
    else
      rm::exec::adamw_update(cfg, segments, 0.5, step++, kernels, {params.data(), 1, n}, {grads.data(), 1, n},
                             {m.data(), 1, n}, {v.data(), 1, n});
    total_s += cpu_now() - t0;
  }
  const double per_update_s = total_s / static_cast<double>(state.iterations());
  state.counters["update_ms"] = per_update_s * 1e3;
  state.counters["update_GB/s"] = rm::optimizer_update_bytes(bf16 ? 8 : 12) * static_cast<double>(n) / per_update_s * 1e-9;
}
BENCHMARK(BM_AdamWUpdate)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
