// The cpu backend's attention tile against this machine's Eigen GEMM, in one run.
//
// Target (issue "Executor, CPU backend"): for tiles >= 256 with head dim 128 the blockwise
// kernel reaches >= 60 % of the GEMM's GFLOP/s. Every attention row reports `of_gemm`:
// its GFLOP/s over a 512^3 Eigen GEMM's, the best of 20 timed once at start-up in the
// same process (same compiler flags, same core). Both are timed in thread CPU time, so
// other processes on a shared machine do not skew the ratio. One thread
// (Eigen::setNbThreads(1)), as one rank of `ringmaster run`.
//
//   build/bin/cpu_attention_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <cmath>
#include <vector>

#include "bench/eigen_reference.h"
#include "executor/cpu_attention.h"

namespace {

using rm::bench::cpu_now;
using rm::bench::reference_gemm;
using rm::bench::RowMat;

constexpr int kHeadDim = 128;      // the target shape (llama-class head dim)
constexpr int64_t kBlock = 1024;   // tokens of the q block and of the kv block: 4 tiles of 256

void BM_EigenGemm(benchmark::State& state) {
  Eigen::setNbThreads(1);
  const int n = static_cast<int>(state.range(0));
  RowMat a = RowMat::Random(n, n), b = RowMat::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_EigenGemm)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);

struct Block {
  std::vector<float> q, k, v, dout, o, lse, D, dq, dk, dv;
  std::vector<int64_t> q_tok, k_tok;
  // diagonal: the q block and the kv block are the same tokens, so the causal mask leaves
  // the tiles below the diagonal whole and masks part of each tile on it.
  Block(int64_t c, bool diagonal) {
    auto rnd = [&](size_t n) {
      Eigen::VectorXf x = Eigen::VectorXf::Random(static_cast<Eigen::Index>(n));
      return std::vector<float>(x.data(), x.data() + n);
    };
    const size_t n = static_cast<size_t>(c) * kHeadDim;
    q = rnd(n), k = rnd(n), v = rnd(n), dout = rnd(n);
    o.assign(n, 0), dq.assign(n, 0), dk.assign(n, 0), dv.assign(n, 0);
    lse.assign(static_cast<size_t>(c), 0), D.assign(static_cast<size_t>(c), 0);
    for (int64_t i = 0; i < c; ++i) q_tok.push_back(diagonal ? i : c + i), k_tok.push_back(i);
  }
};

float scale() { return 1.0f / std::sqrt(static_cast<float>(kHeadDim)); }

double forward(Block& b, const rm::exec::TileShape& tiles) {
  return rm::exec::attention_block_forward(b.q.data(), b.q_tok.data(), kBlock, b.k.data(),
                                           b.v.data(), b.k_tok.data(), kBlock, kHeadDim, scale(),
                                           tiles, b.o.data(), b.lse.data());
}

double backward(Block& b, const rm::exec::TileShape& tiles) {
  return rm::exec::attention_block_backward(b.q.data(), b.dout.data(), b.lse.data(), b.D.data(),
                                            b.q_tok.data(), kBlock, b.k.data(), b.v.data(),
                                            b.k_tok.data(), kBlock, kHeadDim, scale(), tiles,
                                            b.dq.data(), b.dk.data(), b.dv.data());
}

// Times `kernel` on one block with square tiles of state.range(0) and reports its GFLOP/s
// (of the tiles it computes) and the fraction of the reference GEMM's rate. A kv block
// before the q block: every tile computed, exactly 4 c^2 d FLOPs forward, 10 c^2 d
// backward. A causal diagonal block: the tiles above the diagonal skipped, those on it
// masked, whose masked scores must cost no more than the rest (flush_denormals.h).
void time_kernel(benchmark::State& state, double (*kernel)(Block&, const rm::exec::TileShape&),
                 bool diagonal) {
  Eigen::setNbThreads(1);
  const double gemm = reference_gemm();
  const int t = static_cast<int>(state.range(0));
  const rm::exec::TileShape tiles{t, t, diagonal, 0, {}};
  Block b(kBlock, diagonal);
  forward(b, tiles);  // the backward needs the forward's lse
  double flops = 0, seconds = 0;
  for (auto _ : state) {
    const double t0 = cpu_now();
    flops = kernel(b, tiles);
    benchmark::ClobberMemory();
    seconds += cpu_now() - t0;
  }
  const double rate = flops * static_cast<double>(state.iterations()) / seconds;
  state.counters["GFLOP/s"] = rate * 1e-9;
  state.counters["gemm_GFLOP/s"] = gemm * 1e-9;
  state.counters["of_gemm"] = rate / gemm;
}

void BM_AttentionForward(benchmark::State& state) { time_kernel(state, forward, false); }
void BM_AttentionBackward(benchmark::State& state) { time_kernel(state, backward, false); }
void BM_AttentionForwardDiagonal(benchmark::State& state) { time_kernel(state, forward, true); }
void BM_AttentionBackwardDiagonal(benchmark::State& state) { time_kernel(state, backward, true); }
BENCHMARK(BM_AttentionForward)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBackward)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionForwardDiagonal)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBackwardDiagonal)->Arg(64)->Arg(128)->Arg(256)->Arg(512)->Unit(benchmark::kMillisecond);

}  // namespace
BENCHMARK_MAIN();
