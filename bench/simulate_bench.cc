// Simulator scale: one training step of llama2-7b at 1M tokens replayed on SimGrid, on the
// study's 128-GPU DGX A100 cluster and on 64..1,024 H100 GPUs (the shipped dgx-h100-ib
// scaled to 128 nodes: 4 leaf groups of 32 nodes per rail under a non-blocking spine).
// Counters: simulated step time, SimGrid activities (comms; sleeps for computes and step syncs) and ops, and
// activities per wall second. The 128-GPU step is replayed with 16 of the 32 identical
// layers and extrapolated (layer_weights.h; "layers" counter) or with all of them (AllLayers);
// the GPU-count series with one layer forward and backward standing for all 32 (the
// planner picks rings of G/2 there, and a ring's simulated work grows as P^2). The
// micro-step series replays Llama 2 13B on 16 TPU v4 chips at 16K, FSDP, 2 sequences a
// micro-step, with 8 to 32 micro-steps: its activities grow linearly, so activities/s
// should hold (it fell 4x per doubling while SimGrid kept finished comms listed on their
// actors; simgrid_replay.cc follow_streams).
//
//   ./build-sim/bin/simulate_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "planner/search.h"
#include "planner/spec_library.h"
#include "simulator/simulate.h"

using namespace rm;

namespace {

Topology h100_cluster() {
  Topology t = load_topology("dgx-h100-ib");
  t.max_nodes = 128;  // 1,024 GPUs: 4 leaf groups of 32 nodes per rail, non-blocking spine
  return t;
}

void simulate_step(benchmark::State& state, const Topology& topo, int gpus, int max_layers) {
  const ModelSpec model = load_model(kDefaultModel);
  const Fabric fabric(topo, gpus);
  const CostParams cost = CostParams::from_topology(topo);
  Job job;
  job.model = kDefaultModel;
  job.topology = topo.name;
  job.gpus = gpus;
  job.seq_len = int64_t{1} << 20;
  const Plan plan = Planner(model, fabric, cost).best_ring_plan(job, {});
  sim::SimulateOptions so;
  so.max_layers = max_layers;
  sim::Simulation s;
  for (auto _ : state) {
    s = sim::simulate_plan(plan, model, fabric, cost, so);
    state.SetIterationTime(s.replay.wall_s);
  }
  state.counters["cp"] = plan.choice.cp;
  state.counters["sim_step_s"] = s.step_time_s;
  state.counters["pred_step_s"] = plan.predicted.step_time_s;
  state.counters["layers"] = s.replay.layers_emitted;
  state.counters["ops"] = static_cast<double>(s.replay.ops);
  state.counters["activities"] = static_cast<double>(s.replay.activities);
  state.counters["activities_per_s"] = s.replay.activities / s.replay.wall_s;
}

void BM_TorusMicroSteps(benchmark::State& state) {
  const Topology topo = load_topology("tpu-v4-torus");
  const ModelSpec model = load_model("llama2-13b");
  const Fabric fabric(topo, 16);
  const CostParams cost = CostParams::from_topology(topo);
  Job job;
  job.model = "llama2-13b";
  job.topology = topo.name;
  job.gpus = 16;
  job.seq_len = 16384;
  job.batch_tokens = state.range(0) * 2 * job.seq_len;  // range(0) micro-steps of 2 sequences
  SearchPins pins;
  pins.micro_batch = 2;
  pins.checkpointing = Checkpointing::kNone;
  pins.schedule = Schedule::kFlat;
  const Plan plan = Planner(model, fabric, cost).best_plan(job, pins);
  sim::Simulation s;
  for (auto _ : state) {
    s = sim::simulate_plan(plan, model, fabric, cost, {});
    state.SetIterationTime(s.replay.wall_s);
  }
  state.counters["micro_steps"] = plan.choice.grad_accum;
  state.counters["sim_step_s"] = s.step_time_s;
  state.counters["ops"] = static_cast<double>(s.replay.ops);
  state.counters["activities"] = static_cast<double>(s.replay.activities);
  state.counters["activities_per_s"] = s.replay.activities / s.replay.wall_s;
}

void BM_StudyStep128(benchmark::State& state) {
  simulate_step(state, load_topology(kStudyTopology), 128, 16);
}
void BM_StudyStep128AllLayers(benchmark::State& state) {
  simulate_step(state, load_topology(kStudyTopology), 128, 0);
}
void BM_H100Step(benchmark::State& state) {
  simulate_step(state, h100_cluster(), static_cast<int>(state.range(0)), 1);
}

}  // namespace

BENCHMARK(BM_StudyStep128)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_StudyStep128AllLayers)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_H100Step)->RangeMultiplier(2)->Range(64, 1024)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK(BM_TorusMicroSteps)->RangeMultiplier(2)->Range(8, 32)->UseManualTime()->Iterations(1)->Unit(benchmark::kSecond);
BENCHMARK_MAIN();
