// A plan file with everything it runs on, loaded the one way every consumer of a plan file
// uses (`run`, `simulate`, `validate`): the plan, its model and topology specs, the fabric
// for its GPUs and the cost parameters (the topology's defaults, then a calibrated profile).
// `plan`, `tune` and `sweep` build the same fabric and costs for a job from the command line
// (cli/job_options.h) through build_fabric_and_costs.
#pragma once

#include <memory>
#include <string>

#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// `fabric` is built for the plan's GPUs of `topology`; `cost` is for that fabric.
struct LoadedPlanFile {
  Plan plan;
  ModelSpec model;
  Topology topology;
  std::unique_ptr<Fabric> fabric;
  CostParams cost;
};

// Reads the plan at `path`, loads the model and topology it names (shipped names or
// paths), checks its GPU count against the topology and builds the fabric and costs, with
// `profile` applied when not empty. Throws InputError naming the plan file (or the spec or
// profile file): "<path>: gpus: must be in [1, N], the GPUs of topology T (got G)".
LoadedPlanFile load_plan_file(const std::string& path, const std::string& profile = "");

// The fabric for `gpus` GPUs of `topology` and its costs: the topology's defaults, then the
// profile's calibrated values when `profile` is not empty (InputError naming the profile).
// A GPU count the topology cannot hold is blamed on `gpus_source` (the plan file) when given.
void build_fabric_and_costs(const Topology& topology, int gpus, const std::string& profile,
                            std::unique_ptr<Fabric>& fabric, CostParams& cost,
                            const std::string& gpus_source = "");

}  // namespace rm
