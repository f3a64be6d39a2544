// The questions `plan` answers beyond "the fastest plan for these GPUs": the fewest GPUs on
// which the job fits (--min-gpus, optionally meeting a step time or throughput), what a
// whole training run takes (--train-tokens, --gpu-hour-cost), and whether the answer leaves
// the user short (the plan does not fit, or GPUs idle), which exits 1.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/plan.h"

namespace rm::cli {

// A whole training run at the plan's predicted step time.
struct TrainingRun {
  double tokens = 0;     // the run's tokens (--train-tokens)
  double steps = 0;      // optimizer steps: tokens / the plan's batch tokens
  double days = 0;       // wall clock
  double gpu_hours = 0;  // GPUs x hours
  double cost = -1;      // gpu_hours x --gpu-hour-cost; < 0 when no price was given
};

TrainingRun training_run(const Plan& plan, double tokens, double gpu_hour_cost);
// `tokens_as_typed` ("1T") is echoed in the tokens row.
std::string training_run_table(const TrainingRun& t, const std::string& tokens_as_typed);
nlohmann::json training_run_json(const TrainingRun& t);

// The GPU counts --min-gpus tries, ascending, up to `max_gpus`: the divisors of one node's
// GPUs, then whole nodes (past one node, clusters hand out whole nodes).
std::vector<int> min_gpus_candidates(int max_gpus, int gpus_per_node);

// Why the plan leaves the user short ("" when it does not): it does not fit in GPU memory,
// or data parallel is larger than the sequences per step (dp - sequences replicas idle).
std::string plan_shortfall(const Plan& plan);

// "10%" or "10" -> 0.10. Throws InputError naming `field` unless in [0, 90] percent.
double parse_percent(const std::string& text, const std::string& where, const std::string& field);
// A token count for a whole run, decimal as token budgets are quoted: 1T = 10^12, 300B,
// 1.5T, 2e12. Throws InputError naming `field`.
double parse_token_count(const std::string& text, const std::string& where, const std::string& field);

}  // namespace rm::cli
