#include "planner/plan_loader.h"

#include "planner/input_error.h"
#include "planner/linear_precision.h"
#include "planner/memory_model.h"
#include "planner/profile.h"
#include "planner/spec_library.h"

namespace rm {

void build_fabric_and_costs(const Topology& topology, int gpus, const std::string& profile,
                            std::unique_ptr<Fabric>& fabric, CostParams& cost, const std::string& gpus_source) {
  try {
    fabric = std::make_unique<Fabric>(topology, gpus);
  } catch (const InputError& e) {
    if (gpus_source.empty()) throw;
    fail_input(gpus_source, "gpus", e.what());
  }
  cost = CostParams::from_topology(topology);
  if (!profile.empty()) load_and_apply_profile(profile, *fabric, cost);
}

LoadedPlanFile load_plan_file(const std::string& path, const std::string& profile) {
  LoadedPlanFile l;
  l.plan = read_plan_yaml(path);
  // A shipped name the plan gives that does not exist is the plan's error: name the plan.
  auto from_plan = [&](const char* field, auto load) {
    try {
      return load();
    } catch (const InputError& e) {
      fail_input(path, field, e.what());
    }
  };
  l.model = from_plan("model", [&] { return load_model(l.plan.job.model); });
  l.topology = from_plan("topology", [&] { return load_topology(l.plan.job.topology); });
  apply_attention_kernel(l.topology, l.plan.job.attention_kernel, path, "attention_kernel");
  apply_plan_precision(l.topology, l.plan.job.fp8_recipe, profile, path, "fp8_recipe");
  if (const std::string why = optimizer_states_why_invalid(l.plan.job.optimizer, l.topology.gpu.element_bytes);
      !why.empty())
    fail_input(path, "store_param_remainders", why);
  // The plan is what is wrong when its GPU count does not fit its topology: name it.
  const int max = l.topology.max_gpus();
  if (l.plan.job.gpus < 1 || l.plan.job.gpus > max) {
    fail_input(path, "gpus", "must be in [1, " + std::to_string(max) + "], the GPUs of topology " +
                                 l.topology.name + " (got " + std::to_string(l.plan.job.gpus) + ")");
  }
  build_fabric_and_costs(l.topology, l.plan.job.gpus, profile, l.fabric, l.cost, path);
  return l;
}

}  // namespace rm
