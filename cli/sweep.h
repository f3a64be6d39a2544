// The sweep behind `ringmaster sweep`: one planned row per (GPU count, sequence length),
// built before anything is printed, so other passes (e.g. a simulation of each row) can
// add to the rows first.
#pragma once

#include <cstdint>
#include <vector>

#include "cli/job_options.h"
#include "cli/sweep_shard.h"
#include "planner/plan.h"

namespace rm::cli {

struct SweepRow {
  size_t grid_row = 0;  // index in the whole grid (sweep_shard.h)
  Plan plan;
  double plan_seconds = 0;  // how long the search took
};

// Plans every (gpus, seq) pair that `shard` holds, GPU counts outer (in grid order; each
// count on a thread of its own), each the plan `target` runs where one is named
// (plan_job_for_target: megatron, torchtitan, slurm). Progress goes to stderr, one line per
// row as it is planned. Throws InputError on a bad option or a GPU count the topology cannot
// hold.
std::vector<SweepRow> plan_sweep(const JobOptions& options, const std::vector<int>& gpus,
                                 const std::vector<int64_t>& seqs, bool progress, const SweepShard& shard = {},
                                 const std::string& target = "");

}  // namespace rm::cli
