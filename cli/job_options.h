// Job options shared by `plan`, `sweep`, `simulate` and `tune`: which model on which
// cluster, the sequence and batch, what is predicted, an optional calibrated profile, and
// the pins that restrict the plan search. Values are kept as text until resolve(), so a
// bad one is reported naming its option (exit 2).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "planner/topology.h"

namespace rm::cli {

struct JobOptions {
  std::string model;     // default: the study's model (spec_library.h)
  std::string topology;  // default: the study's cluster
  int gpus = 0;
  std::string seq;           // "8k", "1M", "1048576"
  std::string batch_tokens;  // global batch per optimizer step; default 2M tokens
  std::optional<int64_t> global_batch_size;  // or in sequences, at any length (Megatron's)
  bool causal = true;
  bool chunked_loss = true;
  bool compiled_loss = false;  // with --no-chunked-loss (Job::compiled_loss)
  // Either says Job::grad_reduce_in_fp32; neither: false, or `plan --target`'s framework default.
  bool grad_reduce_in_fp32 = false, grad_reduce_in_bf16 = false;
  std::string workload = "step";
  std::string profile;       // calibrated profile YAML (ringmaster calibrate)
  std::string attention_kernel;  // --attention-kernel; empty: the topology's curve's own
  std::string fp8;  // --fp8 RECIPE; empty: bf16 linear layers
  // Adam's states (Job::optimizer, Megatron-LM's names); empty: fp32.
  std::string main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
  bool store_param_remainders = false;
  double headroom = 0;       // share of GPU memory kept free (`plan --headroom`): fits means
                             // memory <= (1 - headroom) x the GPU's
  // Pins (unset = searched; a given 0 is refused, not taken as unset).
  std::optional<int> tp, cp, dp;
  bool tp_comm_overlap = false, no_tp_comm_overlap = false;  // either pins it (tensor_parallel.h)
  std::string cp_comm_type, schedule, order, load_balance, checkpointing, sharding;
  std::vector<int> hierarchical_cp_sizes;  // a2a+p2p's [a2a degree, ring size] (Megatron's)
  std::optional<int> block_q, block_kv, kv_subblocks, micro_batch;
  std::optional<int> pp, virtual_stages;  // pipeline stages, model chunks per stage
  // The pipeline split's accounting (PlanChoice): the flag or its --no- form pins each.
  bool embedding_in_split = false, no_embedding_in_split = false;
  bool loss_in_split = false, no_loss_in_split = false;
};

// What the options say, loaded and checked. `fabric` refers to `topology`.
struct ResolvedJob {
  ModelSpec model;
  Topology topology;
  std::unique_ptr<Fabric> fabric;
  CostParams cost;
  Job job;
  SearchPins pins;
};

// The sequence-length option under the names the field uses (Megatron's --seq-length,
// torchtitan's seq_len).
inline constexpr const char* kSeqOptionNames = "--seq,--seq-length,--seq-len";

// Adds --model --topology --batch-tokens --causal/--no-causal --chunked-loss/--no-chunked-loss
// --grad-reduce-in-fp32/--grad-reduce-in-bf16 --main-params-dtype --store-param-remainders
// --exp-avg-dtype --exp-avg-sq-dtype --workload --profile and the
// pins (--cp-comm-type --tp --tp-comm-overlap/--no-tp-comm-overlap --pp --virtual-stages
// --account-for-{embedding,loss}-in-pipeline-split (and --no-) --cp --dp --schedule --order --load-balance --block-q --block-kv
// --kv-subblocks --checkpointing --micro-batch --sharding; Megatron's names where they differ).
// `with_job_size` adds --gpus and --seq too (sweep has lists instead).
void add_job_options(CLI::App* cmd, JobOptions& o, bool with_job_size);

// Loads the specs, parses sizes and pins, builds the fabric for `gpus` and the cost
// parameters (the topology's defaults, then the profile; build_fabric_and_costs of
// planner/plan_loader.h, as for a plan file). `seq_len` 0 = from o.seq.
// Throws InputError naming the option or file.
ResolvedJob resolve_job(const JobOptions& o, int gpus, int64_t seq_len = 0);

// The plan `target` runs for `job` (plan_for_target, `r`'s pins, model and topology), its
// gradients reduced as that framework reduces them unless o says (--grad-reduce-in-fp32 or
// --grad-reduce-in-bf16): plan --target, sweep --target and the Python module's
// plan(target=...) all ask this one. `target` is parsed from its spelling, naming `where`.
Plan plan_job_for_target(Planner& planner, const ResolvedJob& r, const JobOptions& o, Job job,
                         const std::string& target, const std::string& where);

}  // namespace rm::cli
