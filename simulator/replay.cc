// Replay (replay.h): the contract check, the free-communication walk, the SimGrid replay in
// a child process, then the figures the op lists alone give.
#include "simulator/replay.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "planner/message_contract.h"
#include "simulator/child_process.h"
#include "simulator/free_walk.h"
#include "simulator/layer_weights.h"
#include "simulator/simgrid_replay.h"

namespace rm::sim {

namespace {

// The SimGrid figures as they cross the pipe: the scalars, then the GPUs' times (plain
// structs, copied as bytes).
std::string to_bytes(const SimGridFigures& f) {
  std::string out(sizeof f.scalars + f.gpus.size() * sizeof(GpuTimes), '\0');
  std::memcpy(out.data(), &f.scalars, sizeof f.scalars);
  std::memcpy(out.data() + sizeof f.scalars, f.gpus.data(), f.gpus.size() * sizeof(GpuTimes));
  return out;
}

SimGridFigures from_bytes(const std::string& bytes) {
  SimGridFigures f;
  if (bytes.size() < sizeof f.scalars || (bytes.size() - sizeof f.scalars) % sizeof(GpuTimes) != 0) {
    throw std::runtime_error("the simulation process sent a truncated answer");
  }
  std::memcpy(&f.scalars, bytes.data(), sizeof f.scalars);
  f.gpus.resize((bytes.size() - sizeof f.scalars) / sizeof(GpuTimes));
  std::memcpy(f.gpus.data(), bytes.data() + sizeof f.scalars, f.gpus.size() * sizeof(GpuTimes));
  return f;
}

// Peak of the alloc/free ops in program order (timing does not change it).
double peak_memory(const RankSchedule& rank, const OpSchedule& s) {
  std::vector<double> live(s.buffers.size(), 0);
  double now = 0, peak = 0;
  for (const Op& op : rank.ops) {
    if (op.kind == OpKind::kAlloc) {
      now += op.bytes - live[op.buffer];
      live[op.buffer] = op.bytes;
      peak = std::max(peak, now);
    } else if (op.kind == OpKind::kFree) {
      now -= live[op.buffer];
      live[op.buffer] = 0;
    }
  }
  return peak;
}

}  // namespace

std::vector<double> gpu_slowdowns(double sigma, unsigned seed, int gpus) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z;
  std::vector<double> out(static_cast<size_t>(std::max(0, gpus)));
  for (double& f : out) f = std::max(0.1, 1 + sigma * z(rng));
  return out;
}

ReplayResult replay(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs,
                    const ReplayOptions& options) {
  if (static_cast<int>(schedule.ranks.size()) != fabric.gpus()) {
    throw std::runtime_error("replay: the schedule has " + std::to_string(schedule.ranks.size()) +
                             " op lists for " + std::to_string(fabric.gpus()) + " GPUs");
  }
  if (const std::string violation = message_contract_violation(schedule); !violation.empty()) {
    throw std::runtime_error("schedule breaks the message contract: " + violation);
  }
  // The direct walk first: cheap, and it names the op where a broken schedule would hang.
  const double free_comm_s = free_comm_time(schedule, fabric, costs);
  const SimGridFigures figures = from_bytes(run_in_child_process(
      [&] { return to_bytes(replay_on_simgrid(schedule, fabric, costs, options)); }));

  const SimGridScalars& sc = figures.scalars;
  ReplayResult r{.time_s = sc.time_s,
                 .time_free_comm_s = free_comm_s,
                 .replayed_time_s = sc.replayed_time_s,
                 .layers_emitted = schedule.layers_emitted,
                 .gpus = figures.gpus,
                 .gpu_ids = {},
                 .ops = sc.ops,
                 .activities = sc.activities,
                 .routes = sc.routes,
                 .wall_s = sc.wall_s};

  // Memory and useful FLOPs follow from the op lists alone.
  const LayerWeights weights(schedule);
  for (size_t g = 0; g < r.gpus.size(); ++g) {
    GpuTimes& t = r.gpus[g];
    const RankSchedule& rank = schedule.ranks[g];
    if (rank.ops.empty()) continue;  // not emitted: a copy of a replayed GPU
    t.peak_memory_bytes = peak_memory(rank, schedule);
    Weighted useful;
    for (const Op& op : rank.ops) {
      if (op.kind == OpKind::kCompute) useful.add(weights, op, op.useful_flops);
    }
    t.useful_flops = useful.sum;
    t.idle_s = std::max(0.0, r.time_s - t.busy_s - t.exposed_comm_s);
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, t.peak_memory_bytes);
    r.useful_flops += t.useful_flops;
  }
  if (!schedule.emitted_gpus.empty()) {
    r.useful_flops *= static_cast<double>(r.gpus.size()) / schedule.emitted_gpus.size();
    std::vector<GpuTimes> replayed;
    for (int g : schedule.emitted_gpus) replayed.push_back(r.gpus[g]);
    r.gpus = std::move(replayed);
    r.gpu_ids = schedule.emitted_gpus;
  } else {
    r.gpu_ids.resize(r.gpus.size());
    for (size_t g = 0; g < r.gpus.size(); ++g) r.gpu_ids[g] = static_cast<int>(g);
  }
  return r;
}

}  // namespace rm::sim
