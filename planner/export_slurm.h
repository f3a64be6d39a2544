// A plan as an sbatch script that launches `ringmaster run` over the plan's nodes:
// one task per GPU, srun's block distribution (rank g on node g / gpus_per_node, local rank
// g % gpus_per_node, which is GPU g of the plan's fabric), and the plan's order decides
// the ring positions inside `run` (executor/run.cc), so the rings land where the planner
// put them. The rings are listed in the script's comments.
#pragma once

#include <string>

#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// `plan_path` is the plan file as the user named it (the script runs it from the
// submission folder); `backend` is "cuda" or "cpu".
std::string slurm_export(const Plan& plan, const Topology& topology, const std::string& plan_path,
                         const std::string& backend);

}  // namespace rm
