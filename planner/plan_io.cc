// Plan spellings, plan.yaml and the plan JSON object.
//
// plan.yaml has the same shape and keys as the JSON object (plan_to_json), plus `format: 1`:
//   format: 1
//   model: llama2-7b            # shipped name or path
//   topology: dgx-a100-ib
//   gpus: 128
//   seq_len: 1048576            # sizes also accept 8k / 1M (planner/units.h)
//   batch_tokens: 2097152
//   causal: true
//   workload: step              # attention | layer | step
//   passes: forward-backward    # forward | forward-backward
//   attention_kernel: cudnn     # optional, flash_attn_2 (a GPU whose curve is another's needs it)
//   chunked_loss: false         # optional, true (Job::chunked_loss)
//   compiled_loss: true         # optional, false (Job::compiled_loss)
//   framework: megatron         # optional, any (Job::framework; megatron | pytorch)
//   grad_reduce_in_fp32: true   # optional, false (Job::grad_reduce_in_fp32)
//   fp8_recipe: tensorwise      # optional, none (Job::fp8_recipe; tensorwise | delayed | current)
//   main_params_dtype: fp32     # optional, fp32 (Job's optimizer states: fp32 | fp16)
//   store_param_remainders: true  # optional, false
//   exp_avg_dtype: bf16         # optional, fp32 (fp32 | fp16 | bf16 | fp8); exp_avg_sq_dtype likewise
//   plan: {strategy, cp_comm_type, tp, tp_comm_overlap (optional, false), pp, sharding, [data_parallel_shard_degree: hsdp only], virtual_stages,
//          account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split (optional, false; pp > 1), cp, dp, schedule, order_name, order: [GPU ids in ring order],
//          load_balance, block_q, block_kv, kv_subblocks, checkpointing, grad_accum,
//          micro_batch (optional, 1)}
//   predicted: {...}            # informational: written, read if present, never required
//   baselines: [...]            # informational, likewise
#include <array>
#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "planner/atomic_file.h"
#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"
#include "planner/memory_model.h"
#include "planner/plan.h"
#include "planner/schedule.h"
#include "planner/units.h"
#include "planner/yaml_reader.h"

namespace rm {

// ---- enum spellings -------------------------------------------------------------------

namespace {

template <typename E, size_t N>
const char* spell(E v, const std::array<std::pair<E, const char*>, N>& table) {
  for (const auto& [e, s] : table) {
    if (e == v) return s;
  }
  return "?";
}

template <typename E, size_t N>
E parse_enum(const std::string& s, const std::array<std::pair<E, const char*>, N>& table,
             const std::string& where, const std::string& field) {
  std::string valid;
  for (const auto& [e, name] : table) {
    if (s == name) return e;
    valid += (valid.empty() ? "" : ", ") + std::string(name);
  }
  fail_input(where, field, "expected one of " + valid + " (got '" + s + "')");
}

constexpr std::array<std::pair<Norm, const char*>, 2> kNorms{{
    {Norm::kRmsNorm, "rmsnorm"},
    {Norm::kLayerNorm, "layernorm"},
}};
constexpr std::array<std::pair<PositionEmbedding, const char*>, 3> kPositionEmbeddings{{
    {PositionEmbedding::kRope, "rope"},
    {PositionEmbedding::kLearned, "learned"},
    {PositionEmbedding::kAlibi, "alibi"},
}};
constexpr std::array<std::pair<LinearBias, const char*>, 3> kLinearBiases{{
    {LinearBias::kNone, "none"},
    {LinearBias::kQkv, "qkv"},
    {LinearBias::kAll, "all"},
}};
constexpr std::array<std::pair<Strategy, const char*>, 5> kStrategies{{
    {Strategy::kRing, "ring"},
    {Strategy::kFlashFsdp, "flash-fsdp"},
    {Strategy::kAllGatherCp, "allgather-cp"},
    {Strategy::kUlysses, "ulysses"},
    {Strategy::kUsp, "usp"},
}};
constexpr std::array<std::pair<Schedule, const char*>, 3> kSchedules{{
    {Schedule::kFlat, "flat"},
    {Schedule::kBidirectional, "bidirectional"},
    {Schedule::kTwoLevel, "two-level"},
}};
constexpr std::array<std::pair<LoadBalance, const char*>, 3> kLoadBalances{{
    {LoadBalance::kContiguous, "contiguous"},
    {LoadBalance::kStriped, "striped"},
    {LoadBalance::kZigzag, "zigzag"},
}};
constexpr std::array<std::pair<Checkpointing, const char*>, 3> kCheckpointings{{
    {Checkpointing::kNone, "none"},
    {Checkpointing::kSelective, "selective"},
    {Checkpointing::kFull, "full"},
}};
constexpr std::array<std::pair<Workload, const char*>, 3> kWorkloads{{
    {Workload::kAttention, "attention"},
    {Workload::kLayer, "layer"},
    {Workload::kStep, "step"},
}};
constexpr std::array<std::pair<Passes, const char*>, 2> kPasses{{
    {Passes::kForward, "forward"},
    {Passes::kForwardBackward, "forward-backward"},
}};
// A plan's levels (kNone, the corpus's, is spelled by to_string only).
constexpr std::array<std::pair<Sharding, const char*>, 5> kShardingSpellings{{
    {Sharding::kDdp, "ddp"},
    {Sharding::kZero1, "zero1"},
    {Sharding::kZero2, "zero2"},
    {Sharding::kFsdp, "fsdp"},
    {Sharding::kHsdp, "hsdp"},
}};

constexpr std::array<std::pair<Framework, const char*>, 3> kFrameworks{{
    {Framework::kAny, "any"},
    {Framework::kMegatron, "megatron"},
    {Framework::kPytorch, "pytorch"},
}};

constexpr std::array<std::pair<Fp8Recipe, const char*>, 3> kFp8Recipes{{
    {Fp8Recipe::kTensorwise, "tensorwise"},
    {Fp8Recipe::kDelayed, "delayed"},
    {Fp8Recipe::kCurrent, "current"},
}};
constexpr std::array<std::pair<StateDtype, const char*>, 4> kStateDtypes{{
    {StateDtype::kFp32, "fp32"},
    {StateDtype::kFp16, "fp16"},
    {StateDtype::kBf16, "bf16"},
    {StateDtype::kFp8, "fp8"},
}};
constexpr std::array<std::pair<StateDtype, const char*>, 2> kMainParamsDtypes{{
    {StateDtype::kFp32, "fp32"},
    {StateDtype::kFp16, "fp16"},
}};

}  // namespace

const char* to_string(Strategy v) { return spell(v, kStrategies); }
const char* to_string(Schedule v) { return spell(v, kSchedules); }
const char* to_string(LoadBalance v) { return spell(v, kLoadBalances); }
const char* to_string(Checkpointing v) { return spell(v, kCheckpointings); }
const char* to_string(Workload v) { return spell(v, kWorkloads); }
const char* to_string(Passes v) { return spell(v, kPasses); }
const char* to_string(Sharding v) { return v == Sharding::kNone ? "none" : spell(v, kShardingSpellings); }
const char* to_string(Framework v) { return spell(v, kFrameworks); }
const char* to_string(Fp8Recipe v) { return v == Fp8Recipe::kNone ? "none" : spell(v, kFp8Recipes); }
const char* to_string(StateDtype v) { return spell(v, kStateDtypes); }

constexpr std::array<std::pair<Strategy, const char*>, 5> kCpCommTypes{{
    {Strategy::kRing, "p2p"},
    {Strategy::kAllGatherCp, "all_gather"},
    {Strategy::kUlysses, "a2a"},
    {Strategy::kUsp, "a2a+p2p"},
    {Strategy::kFlashFsdp, "none"},
}};

const char* cp_comm_type(Strategy v) { return spell(v, kCpCommTypes); }

Strategy parse_cp_comm_type(const std::string& s, const std::string& where, const std::string& field) {
  for (const auto& [e, name] : kCpCommTypes)
    if (s == name && e != Strategy::kFlashFsdp) return e;
  fail_input(where, field, "expected one of p2p, all_gather, a2a, a2a+p2p (got '" + s + "')");
}

bool has_ring_schedule(const PlanChoice& c) {
  return c.cp > 1 && (c.strategy == Strategy::kRing || c.strategy == Strategy::kUsp);
}

bool has_load_balance(const PlanChoice& c) { return c.cp > 1 && c.strategy != Strategy::kUlysses; }

const char* cp_group_noun(const PlanChoice& c) {
  return c.cp == 1 ? "data-parallel replica" : has_ring_schedule(c) ? "ring" : "CP group";
}

std::string cp_exchange_text(const PlanChoice& c) {
  if (c.cp == 1) return "no context parallelism";
  const std::string ring = std::string(to_string(c.schedule)) + " ring";
  switch (c.strategy) {
    case Strategy::kAllGatherCp: return "all_gather (K,V gathered around the ring, dK,dV reduce-scattered)";
    case Strategy::kUlysses: return "a2a (all-to-all over heads)";
    case Strategy::kUsp: return "a2a+p2p " + usp_split_text(c) + " (all-to-all inside a node, " + ring + " across)";
    case Strategy::kRing:
    case Strategy::kFlashFsdp: break;
  }
  return ring;
}

std::string usp_split_text(const PlanChoice& c) {
  return std::to_string(c.cp_a2a) + "x" + std::to_string(c.cp / c.cp_a2a);
}

Strategy parse_strategy(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kStrategies, where, field);
}
Schedule parse_schedule(const std::string& s, const std::string& where, const std::string& field) {
  if (s == kOldTwoLevelSpelling) return Schedule::kTwoLevel;
  return parse_enum(s, kSchedules, where, field);
}
LoadBalance parse_load_balance(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kLoadBalances, where, field);
}
const char* to_string(Norm v) { return spell(v, kNorms); }
const char* to_string(PositionEmbedding v) { return spell(v, kPositionEmbeddings); }
Norm parse_norm(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kNorms, where, field);
}
PositionEmbedding parse_position_embedding(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kPositionEmbeddings, where, field);
}
const char* to_string(LinearBias v) { return spell(v, kLinearBiases); }
LinearBias parse_linear_bias(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kLinearBiases, where, field);
}
Checkpointing parse_checkpointing(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kCheckpointings, where, field);
}
Workload parse_workload(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kWorkloads, where, field);
}
Passes parse_passes(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kPasses, where, field);
}
Sharding parse_sharding(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kShardingSpellings, where, field);
}
Framework parse_framework(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kFrameworks, where, field);
}
Fp8Recipe parse_fp8_recipe(const std::string& s, const std::string& where, const std::string& field) {
  return parse_enum(s, kFp8Recipes, where, field);
}
StateDtype parse_state_dtype(const std::string& s, const std::string& where, const std::string& field,
                             bool main_params) {
  return main_params ? parse_enum(s, kMainParamsDtypes, where, field) : parse_enum(s, kStateDtypes, where, field);
}

OptimizerStates read_optimizer_states(const YamlMap& m) {
  OptimizerStates o;
  auto dtype = [&](const char* key, bool main_params) {
    return m.has(key) ? parse_state_dtype(m.str(key), m.location(key), m.field(key), main_params) : StateDtype::kFp32;
  };
  o.main_params_dtype = dtype("main_params_dtype", true);
  o.store_param_remainders = m.boolean_or("store_param_remainders", false);
  o.exp_avg_dtype = dtype("exp_avg_dtype", false);
  o.exp_avg_sq_dtype = dtype("exp_avg_sq_dtype", false);
  // The GPU's element type is checked where the topology is known (plan_loader.h).
  if (const std::string why = optimizer_states_why_invalid(o, 0); !why.empty()) m.fail("store_param_remainders", why);
  return o;
}

// ---- JSON -------------------------------------------------------------------------------

namespace {

nlohmann::json memory_json(const MemoryBreakdown& m) {
  return {{"model_states", m.model_states / kGiB},   {"layer_buffers", m.layer_buffers / kGiB},
          {"activations", m.activations / kGiB},     {"working_set", m.working_set / kGiB},
          {"runtime_reserve", m.runtime_reserve / kGiB}, {"total", m.total() / kGiB},
          {"allocator_cache", m.allocator_cache / kGiB}, {"pipeline_buffers", m.pipeline_buffers / kGiB}};
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan) {
  const Job& j = plan.job;
  const PlanChoice& c = plan.choice;
  const Prediction& p = plan.predicted;
  nlohmann::json out;
  out["schema_version"] = kPlanSchemaVersion;
  out["model"] = j.model;
  out["topology"] = j.topology;
  out["gpus"] = j.gpus;
  out["seq_len"] = j.seq_len;
  out["batch_tokens"] = j.batch_tokens;
  out["causal"] = j.causal;
  out["workload"] = to_string(j.workload);
  out["passes"] = to_string(j.passes);
  out["attention_kernel"] = j.attention_kernel;
  out["chunked_loss"] = j.chunked_loss;
  out["compiled_loss"] = j.compiled_loss;
  out["framework"] = to_string(j.framework);
  out["grad_reduce_in_fp32"] = j.grad_reduce_in_fp32;
  out["fp8_recipe"] = to_string(j.fp8_recipe);
  out["main_params_dtype"] = to_string(j.optimizer.main_params_dtype);
  out["store_param_remainders"] = j.optimizer.store_param_remainders;
  out["exp_avg_dtype"] = to_string(j.optimizer.exp_avg_dtype);
  out["exp_avg_sq_dtype"] = to_string(j.optimizer.exp_avg_sq_dtype);
  out["plan"] = {{"strategy", to_string(c.strategy)},
                 {"cp_comm_type", cp_comm_type(c.strategy)},
                 {"tp", c.tp},
                 {"tp_comm_overlap", c.tp_comm_overlap},
                 {"pp", c.pp},
                 {"sharding", to_string(c.sharding)},
                 {"virtual_stages", c.virtual_stages},
                 {"account_for_embedding_in_pipeline_split", c.account_for_embedding_in_pipeline_split},
                 {"account_for_loss_in_pipeline_split", c.account_for_loss_in_pipeline_split},
                 {"cp", c.cp},
                 {"dp", c.dp},
                 {"schedule", to_string(c.schedule)},
                 {"order_name", c.order_name},
                 {"order", c.order},
                 {"load_balance", to_string(c.load_balance)},
                 {"block_q", c.block_q},
                 {"block_kv", c.block_kv},
                 {"kv_subblocks", c.kv_subblocks},
                 {"checkpointing", to_string(c.checkpointing)},
                 {"grad_accum", c.grad_accum},
                 {"micro_batch", c.micro_batch}};
  if (c.strategy == Strategy::kUsp)  // Megatron's [a2a degree, ring size]
    out["plan"]["hierarchical_context_parallel_sizes"] = {c.cp_a2a, c.cp / c.cp_a2a};
  // The level the framework runs it as where that differs (a PyTorch pipeline's fsdp: zero1).
  if (const Sharding run = sharding_as_run(j, c); run != c.sharding) out["plan"]["sharding_as_run"] = to_string(run);
  if (c.sharding == Sharding::kHsdp) {  // torchtitan's two degrees
    out["plan"]["data_parallel_shard_degree"] = c.dp_shard;
    out["plan"]["data_parallel_replicate_degree"] = c.dp / c.dp_shard;
  }
  out["predicted"] = {{"step_time_s", p.step_time_s},
                      {"tokens_per_s", p.tokens_per_s},
                      {"mfu", p.mfu},
                      {"comm_overhead", p.comm_overhead},
                      {"memory_gib_per_gpu", p.memory_bytes_per_gpu / kGiB},
                      {"fits", p.fits},
                      {"scaling_efficiency", p.scaling_efficiency},
                      {"attention_compute_s", p.attention_compute_s},
                      {"linear_compute_s", p.linear_compute_s},
                      {"exposed_comm_s", p.exposed_comm_s},
                      {"fsdp_exposed_s", p.fsdp_exposed_s},
                      {"tp_comm_s", p.tp_comm_s},
                      {"pp_bubble_s", p.pp_bubble_s},
                      {"pp_p2p_s", p.pp_p2p_s},
                      {"lockstep_wait_s", p.lockstep_wait_s},
                      {"overlap_threshold_tokens", p.overlap_threshold_tokens},
                      {"memory_gib", memory_json(p.memory)},
                      {"why_not", p.why_not}};
  nlohmann::json baselines = nlohmann::json::array();
  for (const Baseline& b : plan.baselines) {
    baselines.push_back({{"strategy", to_string(b.strategy)},
                         {"feasible", b.feasible},
                         {"fits", b.fits},
                         {"memory_gib_per_gpu", b.memory_bytes_per_gpu / kGiB},
                         {"tokens_per_s", b.tokens_per_s},
                         {"step_time_s", b.step_time_s},
                         {"cp", b.cp},
                         {"dp", b.dp},
                         {"busy_replicas", busy_replicas(plan.job, b.dp)},
                         {"why_not", b.why_not}});
  }
  out["baselines"] = std::move(baselines);
  if (plan.without_tp) {
    const Baseline& b = *plan.without_tp;
    out["without_tp"] = {{"cp_comm_type", cp_comm_type(b.strategy)},
                         {"feasible", b.feasible},
                         {"fits", b.fits},
                         {"memory_gib_per_gpu", b.memory_bytes_per_gpu / kGiB},
                         {"tokens_per_s", b.tokens_per_s},
                         {"step_time_s", b.step_time_s},
                         {"tp", 1},
                         {"cp", b.cp},
                         {"dp", b.dp},
                         {"checkpointing", to_string(b.checkpointing)},
                         {"micro_batch", b.micro_batch},
                         {"why_not", b.why_not}};
  }
  return out;
}

// ---- YAML writing -----------------------------------------------------------------------

namespace {

// Predictions are informational: 6 significant digits keep the file readable.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

std::string plan_to_yaml_string(const Plan& plan) {
  const Job& j = plan.job;
  const PlanChoice& c = plan.choice;
  const Prediction& p = plan.predicted;
  YAML::Emitter e;
  e << YAML::Comment("ringmaster plan: read by `ringmaster simulate`, `run` and `validate`") << YAML::Newline;
  e << YAML::BeginMap;
  e << YAML::Key << "format" << YAML::Value << 1;
  e << YAML::Key << "model" << YAML::Value << j.model;
  e << YAML::Key << "topology" << YAML::Value << j.topology;
  e << YAML::Key << "gpus" << YAML::Value << j.gpus;
  e << YAML::Key << "seq_len" << YAML::Value << j.seq_len;
  if (j.batch_tokens > 0) e << YAML::Key << "batch_tokens" << YAML::Value << j.batch_tokens;
  e << YAML::Key << "causal" << YAML::Value << j.causal;
  e << YAML::Key << "workload" << YAML::Value << to_string(j.workload);
  e << YAML::Key << "passes" << YAML::Value << to_string(j.passes);
  if (j.attention_kernel != kDefaultAttentionKernel)
    e << YAML::Key << "attention_kernel" << YAML::Value << j.attention_kernel;
  if (!j.chunked_loss) e << YAML::Key << "chunked_loss" << YAML::Value << false;
  if (j.compiled_loss) e << YAML::Key << "compiled_loss" << YAML::Value << true;
  if (j.framework != Framework::kAny) e << YAML::Key << "framework" << YAML::Value << to_string(j.framework);
  if (j.grad_reduce_in_fp32) e << YAML::Key << "grad_reduce_in_fp32" << YAML::Value << true;
  if (j.fp8_recipe != Fp8Recipe::kNone) e << YAML::Key << "fp8_recipe" << YAML::Value << to_string(j.fp8_recipe);
  const OptimizerStates& o = j.optimizer;
  if (o.main_params_dtype != StateDtype::kFp32)
    e << YAML::Key << "main_params_dtype" << YAML::Value << to_string(o.main_params_dtype);
  if (o.store_param_remainders) e << YAML::Key << "store_param_remainders" << YAML::Value << true;
  if (o.exp_avg_dtype != StateDtype::kFp32) e << YAML::Key << "exp_avg_dtype" << YAML::Value << to_string(o.exp_avg_dtype);
  if (o.exp_avg_sq_dtype != StateDtype::kFp32)
    e << YAML::Key << "exp_avg_sq_dtype" << YAML::Value << to_string(o.exp_avg_sq_dtype);

  e << YAML::Key << "plan" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "strategy" << YAML::Value << to_string(c.strategy);
  e << YAML::Key << "cp_comm_type" << YAML::Value << cp_comm_type(c.strategy);
  e << YAML::Key << "tp" << YAML::Value << c.tp;
  e << YAML::Key << "tp_comm_overlap" << YAML::Value << c.tp_comm_overlap;
  e << YAML::Key << "pp" << YAML::Value << c.pp;
  e << YAML::Key << "sharding" << YAML::Value << to_string(c.sharding);
  e << YAML::Key << "virtual_stages" << YAML::Value << c.virtual_stages;
  e << YAML::Key << "account_for_embedding_in_pipeline_split" << YAML::Value << c.account_for_embedding_in_pipeline_split;
  e << YAML::Key << "account_for_loss_in_pipeline_split" << YAML::Value << c.account_for_loss_in_pipeline_split;
  e << YAML::Key << "cp" << YAML::Value << c.cp;
  e << YAML::Key << "dp" << YAML::Value << c.dp;
  e << YAML::Key << "schedule" << YAML::Value << to_string(c.schedule);
  e << YAML::Key << "order_name" << YAML::Value << c.order_name;
  e << YAML::Key << "order" << YAML::Value << YAML::Flow << c.order;
  e << YAML::Key << "load_balance" << YAML::Value << to_string(c.load_balance);
  e << YAML::Key << "block_q" << YAML::Value << c.block_q;
  e << YAML::Key << "block_kv" << YAML::Value << c.block_kv;
  e << YAML::Key << "kv_subblocks" << YAML::Value << c.kv_subblocks;
  e << YAML::Key << "checkpointing" << YAML::Value << to_string(c.checkpointing);
  e << YAML::Key << "grad_accum" << YAML::Value << c.grad_accum;
  e << YAML::Key << "micro_batch" << YAML::Value << c.micro_batch;
  if (c.strategy == Strategy::kUsp) {
    e << YAML::Key << "hierarchical_context_parallel_sizes" << YAML::Value << YAML::Flow
      << std::vector<int>{c.cp_a2a, c.cp / c.cp_a2a};
  }
  if (c.sharding == Sharding::kHsdp)
    e << YAML::Key << "data_parallel_shard_degree" << YAML::Value << c.dp_shard;
  e << YAML::EndMap;

  e << YAML::Key << "predicted" << YAML::Value;
  e << YAML::Comment("informational: what the planner predicted; not needed to run the plan");
  e << YAML::BeginMap;
  e << YAML::Key << "step_time_s" << YAML::Value << num(p.step_time_s);
  e << YAML::Key << "tokens_per_s" << YAML::Value << num(p.tokens_per_s);
  e << YAML::Key << "mfu" << YAML::Value << num(p.mfu);
  e << YAML::Key << "comm_overhead" << YAML::Value << num(p.comm_overhead);
  e << YAML::Key << "memory_gib_per_gpu" << YAML::Value << num(p.memory_bytes_per_gpu / kGiB);
  e << YAML::Key << "fits" << YAML::Value << p.fits;
  e << YAML::Key << "scaling_efficiency" << YAML::Value << num(p.scaling_efficiency);
  e << YAML::Key << "attention_compute_s" << YAML::Value << num(p.attention_compute_s);
  e << YAML::Key << "linear_compute_s" << YAML::Value << num(p.linear_compute_s);
  e << YAML::Key << "exposed_comm_s" << YAML::Value << num(p.exposed_comm_s);
  e << YAML::Key << "fsdp_exposed_s" << YAML::Value << num(p.fsdp_exposed_s);
  e << YAML::Key << "tp_comm_s" << YAML::Value << num(p.tp_comm_s);
  if (c.pp > 1) {
    e << YAML::Key << "pp_bubble_s" << YAML::Value << num(p.pp_bubble_s);
    e << YAML::Key << "pp_p2p_s" << YAML::Value << num(p.pp_p2p_s);
  }
  if (p.lockstep_wait_s > 0) e << YAML::Key << "lockstep_wait_s" << YAML::Value << num(p.lockstep_wait_s);
  e << YAML::Key << "overlap_threshold_tokens" << YAML::Value << num(p.overlap_threshold_tokens);
  e << YAML::Key << "memory_gib" << YAML::Value << YAML::BeginMap;
  const MemoryBreakdown& m = p.memory;
  e << YAML::Key << "model_states" << YAML::Value << num(m.model_states / kGiB);
  e << YAML::Key << "layer_buffers" << YAML::Value << num(m.layer_buffers / kGiB);
  e << YAML::Key << "activations" << YAML::Value << num(m.activations / kGiB);
  e << YAML::Key << "working_set" << YAML::Value << num(m.working_set / kGiB);
  e << YAML::Key << "runtime_reserve" << YAML::Value << num(m.runtime_reserve / kGiB);
  e << YAML::Key << "allocator_cache" << YAML::Value << num(m.allocator_cache / kGiB);
  if (m.pipeline_buffers > 0) e << YAML::Key << "pipeline_buffers" << YAML::Value << num(m.pipeline_buffers / kGiB);
  e << YAML::EndMap;
  e << YAML::Key << "why_not" << YAML::Value << p.why_not;
  e << YAML::EndMap;

  e << YAML::Key << "baselines" << YAML::Value << YAML::BeginSeq;
  for (const Baseline& b : plan.baselines) {
    e << YAML::Flow << YAML::BeginMap;
    e << YAML::Key << "strategy" << YAML::Value << to_string(b.strategy);
    e << YAML::Key << "feasible" << YAML::Value << b.feasible;
    e << YAML::Key << "fits" << YAML::Value << b.fits;
    e << YAML::Key << "memory_gib_per_gpu" << YAML::Value << num(b.memory_bytes_per_gpu / kGiB);
    e << YAML::Key << "tokens_per_s" << YAML::Value << num(b.tokens_per_s);
    e << YAML::Key << "step_time_s" << YAML::Value << num(b.step_time_s);
    e << YAML::Key << "cp" << YAML::Value << b.cp;
    e << YAML::Key << "dp" << YAML::Value << b.dp;
    e << YAML::Key << "why_not" << YAML::Value << b.why_not;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

void write_plan_yaml(const Plan& plan, const std::string& path) {
  write_file_atomically(path, plan_to_yaml_string(plan));
}

// ---- YAML reading -----------------------------------------------------------------------

namespace {

int64_t size_field(const YamlMap& m, const std::string& key, int64_t max) {
  return parse_size(m.str(key), m.location(key), m.field(key), max);
}

// a2a+p2p's [a2a degree, ring size], product cp; no other kind has the key.
void read_hierarchical_cp_sizes(const YamlMap& m, PlanChoice& c) {
  const char* key = "hierarchical_context_parallel_sizes";
  if (c.strategy != Strategy::kUsp) {
    if (m.has(key)) m.fail(key, "expected only with cp_comm_type a2a+p2p");
    return;
  }
  const auto sizes = m.int_list(key, Range::between(1, kMaxGpus));
  if (sizes.size() != 2 || sizes[0] * sizes[1] != c.cp) {
    m.fail(key, "expected [a2a degree, ring size] with product cp " + std::to_string(c.cp));
  }
  c.cp_a2a = static_cast<int>(sizes[0]);
}

// hsdp's shard degree (torchtitan's data_parallel_shard_degree); no other level has it.
void read_dp_shard(const YamlMap& m, PlanChoice& c) {
  const char* key = "data_parallel_shard_degree";
  if (c.sharding != Sharding::kHsdp) {
    if (m.has(key)) m.fail(key, "expected only with sharding hsdp");
    return;
  }
  c.dp_shard = m.count(key, 1, kMaxGpus);
  if (c.dp % c.dp_shard != 0 || c.dp / c.dp_shard < 2) {
    m.fail(key, "expected a divisor of dp " + std::to_string(c.dp) +
                    " that leaves at least 2 replicas (got " + std::to_string(c.dp_shard) + ")");
  }
}

PlanChoice read_choice(const YamlMap& m, int gpus) {
  PlanChoice c;
  c.strategy = parse_strategy(m.str("strategy"), m.location("strategy"), m.field("strategy"));
  if (m.has("cp_comm_type") && m.str("cp_comm_type") != cp_comm_type(c.strategy)) {
    m.fail("cp_comm_type", std::string("expected '") + cp_comm_type(c.strategy) + "' for strategy " +
                               to_string(c.strategy) + " (got '" + m.str("cp_comm_type") + "')");
  }
  c.tp = m.count_or("tp", 1, 1, kMaxGpus);
  c.tp_comm_overlap = m.boolean_or("tp_comm_overlap", false);  // plans before it waited at once
  if (c.tp_comm_overlap && c.tp == 1)
    m.fail("tp_comm_overlap", "expected false with tp 1 (no TP collectives to overlap)");
  if (m.has("sharding")) c.sharding = parse_sharding(m.str("sharding"), m.location("sharding"), m.field("sharding"));
  c.pp = m.count_or("pp", 1, 1, kMaxGpus);
  c.virtual_stages = m.count_or("virtual_stages", 1, 1, kMaxGpus);
  if (c.virtual_stages > 1 && c.pp == 1) m.fail("virtual_stages", "expected 1 with pp 1 (virtual stages are a pipeline's)");
  c.account_for_embedding_in_pipeline_split = m.boolean_or("account_for_embedding_in_pipeline_split", false);
  c.account_for_loss_in_pipeline_split = m.boolean_or("account_for_loss_in_pipeline_split", false);
  for (const auto& [set, key] : {std::pair{c.account_for_embedding_in_pipeline_split, "account_for_embedding_in_pipeline_split"},
                                 std::pair{c.account_for_loss_in_pipeline_split, "account_for_loss_in_pipeline_split"}})
    if (set && c.pp == 1) m.fail(key, "expected false with pp 1 (it decides a pipeline split)");
  c.cp = m.count("cp", 1, kMaxGpus);
  c.dp = m.count("dp", 1, kMaxGpus);
  if (static_cast<int64_t>(c.tp) * c.cp * c.dp * c.pp != gpus) {
    m.fail("dp", "expected tp * cp * dp * pp == gpus " + std::to_string(gpus) + " (got " + std::to_string(c.tp) +
                     " * " + std::to_string(c.cp) + " * " + std::to_string(c.dp) + " * " + std::to_string(c.pp) + ")");
  }
  c.schedule = parse_schedule(m.str("schedule"), m.location("schedule"), m.field("schedule"));
  c.order_name = m.str_or("order_name", "custom");
  const auto order = m.int_list("order", Range::non_negative());
  if (static_cast<int>(order.size()) != gpus) {
    m.fail("order", "expected a permutation of the " + std::to_string(gpus) + " GPU ids 0.." +
                        std::to_string(gpus - 1) + " (got " + std::to_string(order.size()) + " ids)");
  }
  std::vector<char> seen(gpus, 0);
  for (int64_t id : order) {
    if (id >= gpus || seen[id]) {
      m.fail("order", "expected a permutation of GPU ids 0.." + std::to_string(gpus - 1) + " (id " +
                          std::to_string(id) + (id >= gpus ? " is out of range)" : " appears twice)"));
    }
    seen[id] = 1;
    c.order.push_back(static_cast<int>(id));
  }
  c.load_balance = parse_load_balance(m.str("load_balance"), m.location("load_balance"), m.field("load_balance"));
  c.block_q = m.count("block_q", 1, kMaxBlockTokens);
  c.block_kv = m.count("block_kv", 1, kMaxBlockTokens);
  c.kv_subblocks = m.count("kv_subblocks", 1, kMaxKvSubblocks);
  c.checkpointing =
      parse_checkpointing(m.str("checkpointing"), m.location("checkpointing"), m.field("checkpointing"));
  c.grad_accum = m.count_or("grad_accum", 1, 1, kMaxGradAccum);
  c.micro_batch = m.count_or("micro_batch", 1, 1, kMaxMicroBatch);
  read_hierarchical_cp_sizes(m, c);
  read_dp_shard(m, c);
  m.finish();
  return c;
}

Prediction read_predicted(const YamlMap& m) {
  const Range any = Range::between(0, 1e18);  // informational figures; finite after scaling
  Prediction p;
  p.step_time_s = m.number_or("step_time_s", 0, any);
  p.tokens_per_s = m.number_or("tokens_per_s", 0, any);
  p.mfu = m.number_or("mfu", 0, any);
  p.comm_overhead = m.number_or("comm_overhead", 0, any);
  p.memory_bytes_per_gpu = m.number_or("memory_gib_per_gpu", 0, any) * kGiB;
  p.fits = m.boolean_or("fits", false);
  p.scaling_efficiency = m.number_or("scaling_efficiency", 0, any);
  p.attention_compute_s = m.number_or("attention_compute_s", 0, any);
  p.linear_compute_s = m.number_or("linear_compute_s", 0, any);
  p.exposed_comm_s = m.number_or("exposed_comm_s", 0, any);
  p.fsdp_exposed_s = m.number_or("fsdp_exposed_s", 0, any);
  p.tp_comm_s = m.number_or("tp_comm_s", 0, any);
  p.pp_bubble_s = m.number_or("pp_bubble_s", 0, any);
  p.pp_p2p_s = m.number_or("pp_p2p_s", 0, any);
  p.lockstep_wait_s = m.number_or("lockstep_wait_s", 0, any);
  p.overlap_threshold_tokens = m.number_or("overlap_threshold_tokens", 0, any);
  if (m.has("memory_gib")) {
    const YamlMap mem = m.map("memory_gib");
    p.memory.model_states = mem.number_or("model_states", 0, any) * kGiB;
    p.memory.layer_buffers = mem.number_or("layer_buffers", 0, any) * kGiB;
    p.memory.activations = mem.number_or("activations", 0, any) * kGiB;
    p.memory.working_set = mem.number_or("working_set", 0, any) * kGiB;
    p.memory.runtime_reserve = mem.number_or("runtime_reserve", 0, any) * kGiB;
    p.memory.allocator_cache = mem.number_or("allocator_cache", 0, any) * kGiB;
    p.memory.pipeline_buffers = mem.number_or("pipeline_buffers", 0, any) * kGiB;
    mem.number_or("total", 0, any);  // derived; accepted and recomputed
    mem.finish();
  }
  p.why_not = m.str_or("why_not", "");
  m.finish();
  return p;
}

Baseline read_baseline(const YamlMap& m) {
  const Range any = Range::between(0, 1e18);  // informational figures; finite after scaling
  Baseline b;
  b.strategy = parse_strategy(m.str("strategy"), m.location("strategy"), m.field("strategy"));
  b.feasible = m.boolean_or("feasible", true);
  b.fits = m.boolean_or("fits", false);
  b.memory_bytes_per_gpu = m.number_or("memory_gib_per_gpu", 0, any) * kGiB;
  b.tokens_per_s = m.number_or("tokens_per_s", 0, any);
  b.step_time_s = m.number_or("step_time_s", 0, any);
  b.cp = m.count_or("cp", 1, 1, kMaxGpus);
  b.dp = m.count_or("dp", 1, 1, kMaxGpus);
  b.why_not = m.str_or("why_not", "");
  m.finish();
  return b;
}

}  // namespace

Plan read_plan_yaml(const std::string& path) { return parse_plan_yaml(read_input_file(path, InputKind::kPlan), path); }

Plan parse_plan_yaml(const std::string& yaml_text, const std::string& path) {
  const YamlMap root(load_yaml(yaml_text, path), path);
  if (root.has("format") && root.integer("format", Range::at_least(0)) != 1) {
    root.fail("format", "expected 1 (this ringmaster reads plan format 1)");
  }
  Plan plan;
  Job& j = plan.job;
  j.model = root.str("model");
  j.topology = root.str("topology");
  j.gpus = root.count("gpus", 1, kMaxGpus);
  j.seq_len = size_field(root, "seq_len", kMaxSeqTokens);
  j.batch_tokens = root.has("batch_tokens") ? size_field(root, "batch_tokens", kMaxBatchTokens) : 0;
  if (j.batch_tokens != 0 && j.batch_tokens < j.seq_len) {
    root.fail("batch_tokens", "expected at least one sequence, seq_len " + std::to_string(j.seq_len) + " (got " +
                                  std::to_string(j.batch_tokens) + ")");
  }
  j.causal = root.boolean_or("causal", true);
  j.workload = root.has("workload") ? parse_workload(root.str("workload"), root.location("workload"), root.field("workload"))
                                    : Workload::kStep;
  j.passes = root.has("passes") ? parse_passes(root.str("passes"), root.location("passes"), root.field("passes"))
                                : Passes::kForwardBackward;
  j.attention_kernel = root.str_or("attention_kernel", kDefaultAttentionKernel);
  j.chunked_loss = root.boolean_or("chunked_loss", true);  // plans before it chunked the loss
  j.compiled_loss = root.boolean_or("compiled_loss", false);
  if (root.has("framework"))
    j.framework = parse_framework(root.str("framework"), root.location("framework"), root.field("framework"));
  j.grad_reduce_in_fp32 = root.boolean_or("grad_reduce_in_fp32", false);  // plans before it priced bf16 gradients
  if (root.has("fp8_recipe"))
    j.fp8_recipe = parse_fp8_recipe(root.str("fp8_recipe"), root.location("fp8_recipe"), root.field("fp8_recipe"));
  j.optimizer = read_optimizer_states(root);
  plan.choice = read_choice(root.map("plan"), j.gpus);
  TokenLayout::check_divisible(plan.choice.load_balance, j.seq_len, plan.choice.cp, root.location("seq_len"));
  if (root.has("predicted")) plan.predicted = read_predicted(root.map("predicted"));
  if (root.has("baselines")) {
    const YAML::Node list = root.node("baselines");
    if (!list.IsSequence()) root.fail("baselines", "expected a list (got " + describe_node(list) + ")");
    for (size_t i = 0; i < list.size(); ++i) {
      plan.baselines.push_back(read_baseline(YamlMap(list[i], path, "baselines[" + std::to_string(i) + "]")));
    }
  }
  root.finish();
  return plan;
}

}  // namespace rm
