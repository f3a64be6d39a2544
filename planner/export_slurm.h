// A plan as an sbatch script that launches ringmaster over the plan's nodes: one task per
// GPU, srun's block distribution (rank g on node g / gpus_per_node, local rank
// g % gpus_per_node, which is GPU g of the plan's fabric), and the plan's order decides
// the ring positions inside `run` and `train` (executor/run.cc, both build their rings
// from it), so the rings land where the planner put them. The rings are listed in the
// script's comments.
//
// What it launches (SlurmLaunch): `ringmaster run` times the plan (attention or step
// plans) and writes measurements and a trace; `ringmaster train` trains a step plan's
// model on a text file. train's inputs are the script's variables DATA, STEPS,
// CHECKPOINT_DIR and CHECKPOINT_EVERY, whose defaults come from the export options and can
// be overridden at submission (`DATA=... sbatch script`); one left unset stops the script
// before srun with exit 2 naming it. The script always passes --resume, so submitting it
// again continues from the latest checkpoint (--steps counts resumed steps).
#pragma once

#include <cstdint>
#include <string>

#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

struct SlurmLaunch {
  bool train = false;    // `ringmaster train` instead of `ringmaster run`
  std::string backend;   // run: "cuda" or "cpu" (train runs on the cpu backend)
  // train only: the defaults of DATA and STEPS ("" / 0: unset, to be given at submission),
  // CHECKPOINT_DIR and CHECKPOINT_EVERY.
  std::string data;
  int64_t steps = 0;
  // A fixed folder in the submission folder (not per job), so that a resubmission resumes.
  std::string checkpoint_dir = "checkpoints";
  int64_t checkpoint_every = 0;  // train's default: only after the last step
};

// `plan_path` is the plan file as the user named it (the script runs it from the
// submission folder).
std::string slurm_export(const Plan& plan, const Topology& topology, const std::string& plan_path,
                         const SlurmLaunch& launch);

}  // namespace rm
