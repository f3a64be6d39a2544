// A plan as a torchtitan job config (TOML): the sections a plan decides.
//
//   [training]              seq_len, local_batch_size (sequences per data-parallel replica
//                           per step: the micro-batch times the micro-steps under a
//                           pipeline, the micro-batch otherwise), global_batch_size
//                           (sequences per optimizer step; torchtitan accumulates gradients
//                           over global / (local x dp) micro-steps), mixed_precision_reduce
//   [parallelism]           data_parallel_shard_degree = dp (FSDP over dp x cp, as the
//                           memory model prices it), replicate degree (hsdp),
//                           fsdp_reshard_after_forward ("never" for zero2), tensor_parallel_
//                           degree and enable_async_tensor_parallel, pipeline_parallel_
//                           degree with its schedule, micro-batch size and stage split,
//                           context_parallel_degree = cp, context_parallel_rotate_method:
//                           "alltoall" (K,V shards passed around the ring) for a ring,
//                           "allgather" for all-gather CP
//   [model]                 converters = ["float8"] for torchao's tensorwise float8
//   [activation_checkpoint] mode = "none" | "full"
//   [compile]               enable, components
// torchtitan's field names and meanings: torchtitan/config/job_config.py, the releases with
// a [compile] section (Compile: enable, components) and mixed_precision_reduce "bfloat16" |
// "float32". Older ones (job_config.py @ 6404b932 and before: Training.compile, reduce
// "float32" only) take `[training] compile = true` instead, and reduce in float32.
#pragma once

#include <string>

#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm {

// For a plan export_refusal(kTorchtitan) accepts.
std::string torchtitan_export(const Plan& plan, const ModelSpec& model, int gpus_per_node,
                              const std::string& plan_path);

}  // namespace rm
