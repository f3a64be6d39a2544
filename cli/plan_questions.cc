#include "cli/plan_questions.h"

#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "cli/plan_report.h"
#include "cli/table.h"
#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/search.h"

namespace rm::cli {

TrainingRun training_run(const Plan& plan, double tokens, double gpu_hour_cost) {
  TrainingRun t;
  t.tokens = tokens;
  const double batch = static_cast<double>(sequences_per_step(plan.job) * plan.job.seq_len);
  t.steps = std::ceil(tokens / batch);
  const double seconds = t.steps * plan.predicted.step_time_s;
  t.days = seconds / 86400.0;
  t.gpu_hours = plan.job.gpus * seconds / 3600.0;
  if (gpu_hour_cost >= 0) t.cost = t.gpu_hours * gpu_hour_cost;
  return t;
}

std::string training_run_table(const TrainingRun& t, const std::string& tokens_as_typed) {
  Table table({{"training run", "", Align::kLeft}, {"value", "", Align::kRight}, {"unit", "", Align::kLeft}});
  table.add_row({"tokens", tokens_as_typed, "tokens (" + sig(t.tokens, 4) + ")"});
  table.add_row({"optimizer steps", fixed(t.steps, 0), "steps"});
  table.add_row({"wall clock", fixed(t.days, 1), "days"});
  table.add_row({"GPU time", fixed(t.gpu_hours, 0), "GPU-hours"});
  if (t.cost >= 0) table.add_row({"cost", fixed(t.cost, 0), "(--gpu-hour-cost x GPU-hours)"});
  return table.render();
}

nlohmann::json training_run_json(const TrainingRun& t) {
  nlohmann::json j = {{"tokens", t.tokens}, {"steps", t.steps}, {"days", t.days}, {"gpu_hours", t.gpu_hours}};
  j["cost"] = t.cost >= 0 ? nlohmann::json(t.cost) : nlohmann::json(nullptr);
  return j;
}

std::vector<int> min_gpus_candidates(int max_gpus, int gpus_per_node) {
  std::vector<int> out;
  for (int d : divisors(gpus_per_node))
    if (d <= max_gpus) out.push_back(d);
  for (int g = 2 * gpus_per_node; g <= max_gpus; g += gpus_per_node) out.push_back(g);
  return out;
}

std::string plan_shortfall(const Plan& plan) {
  if (!plan.predicted.fits) return "the plan does not fit in GPU memory: " + plan.predicted.why_not;
  if (const std::string idle = idle_replicas_text(plan.job, plan.choice.dp); !idle.empty())
    return "data parallel " + std::to_string(plan.choice.dp) + " with " + idle +
           "; use fewer GPUs (--min-gpus), a larger --cp or a larger --batch-tokens";
  return "";
}

double parse_percent(const std::string& text, const std::string& where, const std::string& field) {
  std::string s = text;
  if (!s.empty() && s.back() == '%') s.pop_back();
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (std::isnan(v) || end != s.c_str() + s.size() || v < 0 || v > 90)
    fail_input(where, field, "expected a percentage from 0 to 90 like 10% (got '" + text + "')");
  return v / 100;
}

double parse_token_count(const std::string& text, const std::string& where, const std::string& field) {
  std::string s = text;
  double mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': case 'k': mult = 1e3; break;
      case 'M': mult = 1e6; break;
      case 'B': case 'G': mult = 1e9; break;
      case 'T': mult = 1e12; break;
      default: break;
    }
    if (mult > 1) s.pop_back();
  }
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (std::isnan(v) || std::isinf(v) || end != s.c_str() + s.size() || v <= 0)
    fail_input(where, field, "expected a positive token count like 1T, 300B or 2e12 (decimal: 1T = 10^12; got '" +
                                 text + "')");
  return v * mult;
}

}  // namespace rm::cli
