// Simulating a plan: generate its schedule (the one generator), replay it on SimGrid
// (replay.h) and derive the figures the planner predicts, so the two can sit side by side
// (`ringmaster simulate`, `ringmaster sweep --simulate`, the agreement tests).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "simulator/replay.h"

namespace rm::sim {

struct SimulateOptions {
  // Layers the schedule emits (0 = all). A model's layers are identical, so 16 of
  // them (kMinEmittedLayers), extrapolated as layer_weights.h says, give the step time of all
  // of them at a fraction of the simulation time.
  int max_layers = 16;
  // Fast mode (`simulate` without --full): fold each ring pass's middle steps into one
  // (ScheduleOptions::fold_ring_steps) and replay only the data-parallel rings on ring 0's
  // nodes, the others being their copies (fold_replicas, replica_load.h). Memory stays
  // exact; tests/simulator/fold_agreement_test.cc bounds the step time against the full
  // replay.
  bool fold_ring_steps = false;
  bool fold_replicas = false;
  // And emit the first micro-steps and the last of a step, one standing for the middle
  // ones (ScheduleOptions::fold_micro_steps; fold_agreement_test.cc bounds it against the
  // replay of every micro-step).
  bool fold_micro_steps = false;
  // The fast mode (all three folds) or the full replay.
  void set_fast(bool fast) { fold_ring_steps = fold_replicas = fold_micro_steps = fast; }
  // Memory the op lists and the replay may take, 0 = what this host has available
  // (host_memory.h). A plan whose op lists would not fit (kReplayBytesPerOp each) is refused
  // with an InputError after its first op list, not run out of memory.
  double memory_budget_bytes = 0;
  ReplayOptions replay;
};

// Peak resident bytes per op of a replay (88 B of op list, shared by the forked replay,
// and both processes' tables of what is in flight): 91-92 B measured for 26 M and 95 M ops
// (llama3-405b, tp 8 x pp 16, 512 and 2,048 GPUs; BENCHMARKS.md), rounded up.
inline constexpr double kReplayBytesPerOp = 100;

// The simulated counterparts of Prediction's fields (plan.h), with the same definitions
// (cost_model.h): comm_overhead = (step - free-comm step) / step, MFU from the op lists'
// useful FLOPs.
struct Simulation {
  double step_time_s = 0;
  double free_comm_time_s = 0;
  double comm_overhead = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double memory_bytes_per_gpu = 0;  // peak of the alloc/free ops, max over GPUs
  std::string note;                 // "16 of 32 identical layers emitted; ..." when extrapolated
  bool fast = false;                // ring steps or replicas folded (SimulateOptions)
  ReplayResult replay;
};

// Throws InputError when the plan does not match the fabric or model (GPU count, order,
// divisibility: the schedule generator's checks; `where` names the plan), and
// std::runtime_error when the simulation fails.
Simulation simulate_plan(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                         const CostParams& costs, const SimulateOptions& options = {},
                         const std::string& where = "plan");

// The `simulated` object of `simulate --format json` and of each `sweep --simulate` row:
// step_time_s, free_comm_step_time_s, comm_overhead, tokens_per_s, mfu,
// memory_gib_per_gpu, note, mode ("fast" or "full"), and `simulation` (activities, ops,
// wall_s, events_per_s, routes). `per_gpu` adds `gpus`: [{gpu, busy_s, idle_s, exposed_comm_s, peak_memory_gib}].
nlohmann::json simulation_to_json(const Simulation& s, bool per_gpu);

}  // namespace rm::sim
