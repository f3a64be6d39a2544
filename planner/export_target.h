// What a training framework can run of a ringmaster plan, and where each of its ranks goes.
// `ringmaster export --to megatron|torchtitan|slurm` writes a plan in a framework's terms
// (planner/export_megatron.h, export_torchtitan.h, export_slurm.h); this file holds what
// they share: the names of the targets, the rank placement, and the refusals (a plan the
// target cannot express is refused naming the plan field and the target's rule, never
// exported approximately). `plan --target` searches only what the target can run.
//
// Framework ranks (TP = PP = 1 today): ring k is ranks k*cp .. (k+1)*cp - 1, the order of
// Megatron-LM's default rank generator ("tp-cp-ep-dp-pp": CP groups are consecutive ranks
// when TP = 1) and of torchtitan's device mesh ([dp_replicate, dp_shard, cp, tp]). So rank
// r must run on GPU plan.order[r]. torchrun and srun's block distribution start rank r on
// node r / gpus_per_node; inside a node, CUDA_VISIBLE_DEVICES maps local rank i to a device.
#pragma once

#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/search.h"
#include "planner/topology.h"

namespace rm {

enum class ExportTarget { kMegatron, kTorchtitan, kSlurm };

// "megatron", "torchtitan", "slurm".
const char* to_string(ExportTarget t);
// What runs a target's plans, for messages: "Megatron-LM", "torchtitan", "ringmaster run".
const char* display_name(ExportTarget t);
// Throws InputError "<where>: <field>: expected one of megatron, torchtitan, slurm (got 'x')".
ExportTarget parse_export_target(const std::string& s, const std::string& where, const std::string& field);
// The framework a target's plans are priced for: kMegatron, kPytorch (torchtitan), kAny (slurm).
Framework target_framework(ExportTarget t);
// Why a target's framework cannot run float8 linear layers of `recipe` ("" when it can, or
// for bf16): torchtitan's float8 is torchao's tensorwise scaling, Megatron-LM's Transformer
// Engine's delayed or current scaling. plan --target refuses by it, export says it.
std::string fp8_recipe_refusal(ExportTarget t, Fp8Recipe recipe);
// Why a target's framework cannot keep Adam's states as `o` says ("" when it can): torchtitan's
// AdamW (torch.optim over FSDP2's fp32 shards) keeps fp32 master and moments; ringmaster's
// executor (Slurm's `run`, and run_refusal) fp32 master (or its remainders) and both moments
// in fp32 or both in bf16; Megatron-LM's precision-aware optimizer keeps any (with its distributed
// optimizer: megatron_rule_violations). plan --target refuses by it.
std::string optimizer_states_refusal(ExportTarget t, const OptimizerStates& o);

struct RankPlacement {
  int nodes = 0;
  int ranks_per_node = 0;  // min(gpus, gpus_per_node)
  // visible_devices[n][i]: the local device that local rank i of node n must use.
  std::vector<std::vector<int>> visible_devices;
  bool node_major = true;  // every node's list is 0, 1, ...: no CUDA_VISIBLE_DEVICES needed
  // The first rank whose GPU lies on another node than the launcher starts it on (-1: none;
  // only the "searched" order can move a ring position across nodes).
  int off_node_rank = -1;
};

// Where each framework rank runs for `plan` on nodes of `gpus_per_node` GPUs.
RankPlacement rank_placement(const Plan& plan, int gpus_per_node);

// Why `target` cannot run `plan` as planned: "<field>: <reason>" naming the plan field and
// the target's rule, "" when it can. Megatron's plans are also checked against Megatron's
// own argument rules (export_megatron.h). Slurm launches `ringmaster run`, whose checks
// are run_refusal's.
std::string export_refusal(const Plan& plan, const ModelSpec& model, int gpus_per_node, ExportTarget target);

// What `ringmaster run` (and `train`) execute with `backend` ("cpu" or "cuda"), the Slurm
// target's own framework: "<field>: <reason>" naming the plan field, "" when it runs.
// executor/run.h applies it before ranks start, `export --to slurm` (CLI and Python
// module) before writing a script, `plan --target slurm` to every candidate.
std::string run_refusal(const Plan& plan, const ModelSpec& model, const Topology& topology, const std::string& backend);
// The backend a Slurm script launches `ringmaster run` with on `topology`: "cpu" on a CPU
// topology (shared-memory devices), else "cuda".
std::string launch_backend(const Topology& topology);
// `pins` whose refusal is run_refusal with the topology's launch backend: a search with them
// offers only plans `ringmaster run` executes (plan --target slurm, tune). `model` and
// `topology` must outlive the search.
SearchPins runnable_pins(SearchPins pins, const ModelSpec& model, const Topology& topology);

// The fastest plan `target` can run: the search pinned to what the target has (a flat
// ring, the zigzag split) and offered only candidates export_refusal lets through
// (SearchPins::refusal: sharding level, checkpointing, order, Megatron's argument rules),
// beside the collective kinds it runs (all_gather for both, a2a for Megatron-LM), searched
// the same way, unless --cp-comm-type or a ring choice is pinned. The loss is priced over
// whole logits as the framework computes it (Job::chunked_loss false, Job::framework).
// kSlurm: what its script launches, `ringmaster run`, runs (run_refusal with the topology's
// launch_backend): every kind and ring choice searched, the refused ones never priced.
// Throws InputError "<where>: --target: ..." when a pin contradicts the target or when no
// plan the target can run exists (naming the refusals).
Plan plan_for_target(Planner& planner, const Job& job, const SearchPins& pins, ExportTarget target,
                     const ModelSpec& model, int gpus_per_node, const std::string& where);

// The comment lines on rank placement for a torchrun launch: which ranks form ring k
// (`mesh` names the framework's order) and, unless the order is node-major, the
// CUDA_VISIBLE_DEVICES of each node. Empty for cp 1 (no ring to place).
std::string placement_comment(const Plan& plan, int gpus_per_node, const std::string& mesh);

// "0,1,2" (`sep` between the numbers).
std::string join_ints(const std::vector<int>& v, const char* sep);

// The comment block every export starts with (each line begins with "# "): the job, the
// plan and its prediction, so the file says what it launches.
std::string export_header(const Plan& plan, ExportTarget target, const std::string& plan_path);

}  // namespace rm
