#include "simulator/simulate.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "planner/cost_model.h"
#include "planner/host_memory.h"
#include "planner/input_error.h"
#include "planner/schedule.h"
#include "planner/units.h"

namespace rm::sim {

Simulation simulate_plan(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                         const CostParams& costs, const SimulateOptions& options,
                         const std::string& where) {
  ScheduleOptions so;
  so.max_layers = options.max_layers;
  so.fold_ring_steps = options.fold_ring_steps;
  so.fold_replicas = options.fold_replicas;
  so.fold_micro_steps = options.fold_micro_steps;
  so.costs = &costs;
  so.where = where;
  const double budget = options.memory_budget_bytes > 0 ? options.memory_budget_bytes : host_memory().available_bytes;
  if (budget > 0) so.max_ops = static_cast<int64_t>(budget / kReplayBytesPerOp);
  const auto generate = [&] {
    try {
      return generate_schedule(plan, model, fabric, so);
    } catch (const ScheduleTooLarge& e) {
      char text[320];
      std::snprintf(text, sizeof text,
                    "simulating it takes about %.3g M ops, %.1f GiB at %.0f bytes an op, more than the %.1f "
                    "GiB %s; the fast replay folds ring steps and data-parallel replicas, not tensor- or "
                    "pipeline-parallel ranks: simulate fewer GPUs of the same shape, or on a larger machine",
                    e.projected_ops / 1e6, e.projected_ops * kReplayBytesPerOp / kGiB, kReplayBytesPerOp,
                    budget / kGiB,
                    options.memory_budget_bytes > 0 ? "budget" : "this host has available");
      fail_input(where, "choice", text);
    }
  };
  const OpSchedule schedule = generate();

  Simulation s;
  s.replay = replay(schedule, fabric, costs, options.replay);
  s.note = schedule.note;
  s.fast = !schedule.step_weights.empty() || !schedule.emitted_gpus.empty() || schedule.micro_stand_in_weight > 1 ||
           schedule.sequence_stand_in_weight > 1;
  s.step_time_s = s.replay.time_s;
  s.free_comm_time_s = s.replay.time_free_comm_s;
  s.memory_bytes_per_gpu = s.replay.peak_memory_bytes;
  if (s.step_time_s > 0) {
    s.comm_overhead = std::max(0.0, s.step_time_s - s.free_comm_time_s) / s.step_time_s;
    // Tokens as the cost model counts them: a step trains all its sequences, the
    // attention and layer workloads one sequence per ring.
    const Job& job = plan.job;
    const int64_t seqs = sequences_per_step(job);
    const int64_t sequences = job.workload == Workload::kStep ? seqs : std::min<int64_t>(seqs, plan.choice.dp);
    s.tokens_per_s = static_cast<double>(sequences * job.seq_len) / s.step_time_s;
    // The op lists run every replica's micro-steps whole, a replica with no sequence of
    // its own or a short last micro-step included: MFU counts what the step trains, as the
    // tokens do (counting what ran read 32.5 % against 16.2 % predicted for one sequence
    // over two replicas).
    const PlanChoice& ch = plan.choice;
    const double ran = job.workload == Workload::kStep
                           ? static_cast<double>(ch.dp) * std::max(1, ch.grad_accum) * std::max(1, ch.micro_batch)
                           : ch.dp;
    s.mfu = s.replay.useful_flops * std::min(1.0, static_cast<double>(sequences) / ran) /
            (s.step_time_s * fabric.gpus() * costs.peak_flops);
  }
  return s;
}

nlohmann::json simulation_to_json(const Simulation& s, bool per_gpu) {
  const ReplayResult& r = s.replay;
  nlohmann::json j = {{"step_time_s", s.step_time_s},
                      {"free_comm_step_time_s", s.free_comm_time_s},
                      {"comm_overhead", s.comm_overhead},
                      {"tokens_per_s", s.tokens_per_s},
                      {"mfu", s.mfu},
                      {"memory_gib_per_gpu", s.memory_bytes_per_gpu / kGiB},
                      {"note", s.note},
                      {"mode", s.fast ? "fast" : "full"}};
  j["simulation"] = {{"activities", r.activities},
                     {"ops", r.ops},
                     {"wall_s", r.wall_s},
                     {"events_per_s", r.wall_s > 0 ? r.activities / r.wall_s : 0.0},
                     {"routes", r.routes}};
  if (per_gpu) {
    nlohmann::json gpus = nlohmann::json::array();
    for (size_t g = 0; g < r.gpus.size(); ++g) {
      const GpuTimes& t = r.gpus[g];
      gpus.push_back({{"gpu", r.gpu_ids[g]},
                      {"busy_s", t.busy_s},
                      {"idle_s", t.idle_s},
                      {"exposed_comm_s", t.exposed_comm_s},
                      {"peak_memory_gib", t.peak_memory_bytes / kGiB}});
    }
    j["gpus"] = std::move(gpus);
  }
  return j;
}

}  // namespace rm::sim
