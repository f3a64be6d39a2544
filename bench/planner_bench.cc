// Plan search speed (the targets: >= 100,000 candidate plans per second on one
// core; the default 24-row sweep in under a second). Each iteration builds a fresh
// Planner, as one `ringmaster plan` does, so the traffic patterns' link-sharing solves
// are included. Counters: candidates/s = combinations the search covered (pruning is
// exact, see search.h), evaluated/s = plans actually priced by the cost model.
//
//   build-plan/bin/planner_bench
#include <benchmark/benchmark.h>

#include "planner/ring_order.h"
#include "planner/search.h"
#include "planner/spec_library.h"

namespace {

using namespace rm;

// One full search (no pins: every CP kind) for 1M tokens on 128 A100s: the largest job of
// the study.
void BM_PlanSearch1M128(benchmark::State& state) {
  const Topology topo = load_topology(kStudyTopology);
  const ModelSpec model = load_model(kDefaultModel);
  const Fabric fabric(topo, 128);
  const CostParams cost = CostParams::from_topology(topo);
  SearchStats st;
  for (auto _ : state) {
    Planner planner(model, fabric, cost);
    benchmark::DoNotOptimize(planner.best_plan(study_job(128, 1 << 20), {}, &st));
  }
  state.counters["candidates/s"] = benchmark::Counter(static_cast<double>(st.candidates), benchmark::Counter::kIsRate);
  state.counters["evaluated/s"] = benchmark::Counter(static_cast<double>(st.evaluated), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PlanSearch1M128)->Unit(benchmark::kMillisecond);

// The default sweep's planning (what `ringmaster sweep` spends; printing excluded): 6
// lengths x 4 GPU counts, baselines included, one planner per GPU count.
void BM_DefaultSweep(benchmark::State& state) {
  const Topology topo = load_topology(kStudyTopology);
  const ModelSpec model = load_model(kDefaultModel);
  const CostParams cost = CostParams::from_topology(topo);
  SearchStats st;
  for (auto _ : state) {
    for (int g : kStudyGpus) {
      const Fabric fabric(topo, g);
      Planner planner(model, fabric, cost);
      for (int64_t n : kStudySeqs)
        benchmark::DoNotOptimize(planner.plan(study_job(g, n), {}, &st));
    }
  }
  state.counters["candidates/s"] = benchmark::Counter(static_cast<double>(st.candidates), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DefaultSweep)->Unit(benchmark::kMillisecond);

// The ring-order swap search on an irregular fabric (Llama 3's Ethernet cluster: no rails,
// 1:7 above a pod): rings of 16 over 512 GPUs, from the snake. The search's cost grows
// with the square of the GPU count; `ringmaster plan` runs it once per ring size.
void BM_RingOrderSearch512(benchmark::State& state) {
  const Topology topo = load_topology("llama3-h100-roce");
  const Fabric fabric(topo, 512);
  const CostParams cost = CostParams::from_topology(topo);
  for (auto _ : state) benchmark::DoNotOptimize(search_order(fabric, cost, 16, false, snake_order(fabric)));
}
BENCHMARK(BM_RingOrderSearch512)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
