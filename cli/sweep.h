// The sweep behind `ringmaster sweep`: one planned row per (GPU count, sequence length),
// built before anything is printed, so other passes (e.g. a simulation of each row) can
// add to the rows first.
#pragma once

#include <cstdint>
#include <vector>

#include "cli/job_options.h"
#include "planner/plan.h"

namespace rm::cli {

// The study's suite: 6 lengths x 4 GPU counts on kStudyTopology with kDefaultModel.
inline const std::vector<int64_t> kStudySeqs = {8192, 32768, 131072, 262144, 524288, 1048576};
inline const std::vector<int> kStudyGpus = {16, 32, 64, 128};

struct SweepRow {
  Plan plan;
  double plan_seconds = 0;  // how long the search took
};

// Plans every (gpus, seq) pair, GPU counts outer. Progress goes to stderr, one line per
// row. Throws InputError on a bad option or a GPU count the topology cannot hold.
std::vector<SweepRow> plan_sweep(const JobOptions& options, const std::vector<int>& gpus,
                                 const std::vector<int64_t>& seqs, bool progress);

}  // namespace rm::cli
