// A plan as a torchtitan job config (TOML): the sections a plan decides.
//
//   [training]              seq_len, local_batch_size (sequences per data-parallel replica
//                           per micro-step),
//                           global_batch_size (sequences per optimizer step; torchtitan
//                           accumulates gradients over global / (local x dp) micro-steps)
//   [parallelism]           data_parallel_shard_degree = dp (FSDP over dp x cp, as the
//                           memory model prices it), replicate, tensor and pipeline 1,
//                           context_parallel_degree = cp, context_parallel_rotate_method:
//                           "alltoall" (K,V shards passed around the ring) for a ring,
//                           "allgather" for all-gather CP
//   [activation_checkpoint] mode = "none" | "full"
// torchtitan's field names and meanings: torchtitan/config/job_config.py.
#pragma once

#include <string>

#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm {

// For a plan export_refusal(kTorchtitan) accepts.
std::string torchtitan_export(const Plan& plan, const ModelSpec& model, int gpus_per_node,
                              const std::string& plan_path);

}  // namespace rm
