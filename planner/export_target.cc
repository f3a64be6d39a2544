#include "planner/export_target.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "planner/attention_work.h"
#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/export_megatron.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/pipeline_parallel.h"
#include "planner/units.h"

namespace rm {

namespace {

// Each target's spelling on the command line and its name in messages.
struct TargetName {
  ExportTarget target;
  const char* spelling;
  const char* display;
};
constexpr TargetName kTargetNames[] = {{ExportTarget::kMegatron, "megatron", "Megatron-LM"},
                                       {ExportTarget::kTorchtitan, "torchtitan", "torchtitan"},
                                       {ExportTarget::kSlurm, "slurm", "ringmaster run"}};

const TargetName& names_of(ExportTarget t) {
  for (const TargetName& n : kTargetNames)
    if (n.target == t) return n;
  return kTargetNames[0];  // unreachable: every enumerator is listed
}

}  // namespace

const char* display_name(ExportTarget t) { return names_of(t).display; }

namespace {

// What both frameworks lack or require, before Megatron's argument rules.
std::string framework_refusal(const Plan& plan, int gpus_per_node, ExportTarget t) {
  const PlanChoice& c = plan.choice;
  const std::string fw = display_name(t);
  if (plan.job.workload != Workload::kStep || plan.job.passes != Passes::kForwardBackward)
    return std::string("workload: the plan prices '") + to_string(plan.job.workload) + "' (" +
           to_string(plan.job.passes) + "), not a training step; " + fw +
           " runs whole training steps: re-plan with --workload step";
  if (c.strategy == Strategy::kUlysses && t == ExportTarget::kTorchtitan)
    return "plan.strategy: torchtitan has no all-to-all (Ulysses) context parallelism; its "
           "context_parallel_rotate_method is allgather or alltoall (a ring)";
  if (c.strategy == Strategy::kUsp && t == ExportTarget::kTorchtitan)
    return "plan.strategy: torchtitan has no a2a+p2p (all-to-all inside a node, ring across) context "
           "parallelism; its context parallelism is one ring: re-plan with --target torchtitan";
  if (c.cp > 1 && c.strategy == Strategy::kRing) {
    if (c.schedule == Schedule::kBidirectional)
      return "plan.schedule: " + fw + "'s ring passes K,V in one direction only; it cannot run "
             "'bidirectional': re-plan with --target " + to_string(t);
    if (c.schedule == Schedule::kTwoLevel)
      return t == ExportTarget::kMegatron
                 ? "plan.schedule: 'two-level' is ringmaster's double ring (a ring inside each "
                   "node, one across nodes on every rail); Megatron-LM's a2a+p2p is all-to-all "
                   "inside a node and a ring across, another plan: re-plan with --target megatron"
                 : "plan.schedule: torchtitan's context parallelism is one flat ring; it cannot run "
                   "'two-level': re-plan with --target torchtitan";
    if (c.kv_subblocks > 1)
      return "plan.kv_subblocks: " + fw + " sends each K,V block as one message (got " +
             std::to_string(c.kv_subblocks) + "): re-plan without --kv-subblocks";
  }
  // Megatron's get_batch_on_this_cp_rank and PyTorch's context_parallel load balancer both
  // give rank r chunks r and 2CP-1-r of 2 x CP chunks (our zigzag), whatever the mask.
  // All-to-all (a2a) is exempt: after it every rank attends over the whole sequence for its
  // heads (TransformerEngine puts the chunks back in order first), so the split changes
  // nothing the plan priced.
  if (c.cp > 1 && c.strategy != Strategy::kUlysses && c.load_balance != LoadBalance::kZigzag)
    return "plan.load_balance: " + fw + " splits the sequence into 2 x CP chunks, rank r holding "
           "chunks r and 2CP-1-r (zigzag); it cannot run '" + to_string(c.load_balance) +
           "': re-plan with --target " + to_string(t);
  if (t == ExportTarget::kTorchtitan && c.checkpointing == Checkpointing::kSelective)
    return "plan.checkpointing: torchtitan's selective mode recomputes per op or every n-th "
           "layer, not the FFN activations ringmaster's 'selective' drops: re-plan with "
           "--target torchtitan";
  const RankPlacement pl = rank_placement(plan, gpus_per_node);
  if (pl.off_node_rank >= 0) {
    const int r = pl.off_node_rank, g = c.order[static_cast<size_t>(r)];
    return "plan.order: rank " + std::to_string(r) + " (ring " + std::to_string(r / c.cp) + ", position " +
           std::to_string(r % c.cp) + ") must run on GPU " + std::to_string(g) + " of node " +
           std::to_string(g / gpus_per_node) + ", but torchrun starts it on node " + std::to_string(r / gpus_per_node) +
           "; only GPUs inside a node can be reordered (CUDA_VISIBLE_DEVICES): re-plan with --target " + to_string(t) +
           ", or export --to slurm";
  }
  if (t == ExportTarget::kTorchtitan) {
    if (c.sharding == Sharding::kZero1 && plan.job.gpus / c.tp > 1)
      return c.pp > 1
                 // data_parallel.h's as_run: what torchtitan's pipeline makes of its FSDP
                 ? "plan.sharding: torchtitan has no zero1 option, but its pipeline runs FSDP as zero1 (weights "
                   "gathered once a step, gradients unsharded until the last micro-batch): re-plan with --sharding "
                   "fsdp --target torchtitan, which prices it as torchtitan runs it"
                 : "plan.sharding: torchtitan shards with FSDP2 (params, grads and optimizer states together); "
                   "it has no zero1: re-plan with --sharding zero2, fsdp, hsdp or ddp, or export --to megatron";
    if (c.cp > 1 && plan.job.seq_len % (2 * c.cp) != 0)
      return "seq_len: PyTorch's context_parallel load balancer splits the sequence into 2 x CP = " +
             std::to_string(2 * c.cp) + " chunks; " + std::to_string(plan.job.seq_len) + " tokens do not divide";
    const int64_t seqs = sequences_per_step(plan.job);
    if (seqs % (int64_t{c.micro_batch} * c.dp) != 0)
      return "plan.micro_batch: torchtitan's global_batch_size (" + std::to_string(seqs) +
             " sequences) must be a multiple of local_batch_size x dp = " + std::to_string(c.micro_batch) + " x " +
             std::to_string(c.dp);
  }
  return "";
}

}  // namespace

const char* to_string(ExportTarget t) { return names_of(t).spelling; }

ExportTarget parse_export_target(const std::string& s, const std::string& where, const std::string& field) {
  for (const TargetName& n : kTargetNames)
    if (s == n.spelling) return n.target;
  fail_input(where, field, "expected one of megatron, torchtitan, slurm (got '" + s + "')");
}

RankPlacement rank_placement(const Plan& plan, int gpus_per_node) {
  RankPlacement p;
  const int G = plan.job.gpus;
  p.ranks_per_node = std::min(G, gpus_per_node);
  p.nodes = (G + gpus_per_node - 1) / gpus_per_node;
  p.visible_devices.assign(static_cast<size_t>(p.nodes), {});
  const int tp = plan.choice.tp, cp = plan.choice.cp;
  for (int r = 0; r < G; ++r) {
    // Megatron's and torchtitan's rank r = t + tp·(i + cp·d) (TP fastest) is the plan's TP
    // rank t of ring position i of replica d, listed at order[(d·tp + t)·cp + i].
    const int t = r % tp, i = (r / tp) % cp, d = r / (tp * cp);
    const int g = plan.choice.order[static_cast<size_t>((d * tp + t) * cp + i)];
    const int node = r / gpus_per_node;
    if (g / gpus_per_node != node && p.off_node_rank < 0) p.off_node_rank = r;
    auto& devices = p.visible_devices[static_cast<size_t>(node)];
    if (g % gpus_per_node != static_cast<int>(devices.size())) p.node_major = false;
    devices.push_back(g % gpus_per_node);
  }
  return p;
}

std::string join_ints(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += sep;
    s += std::to_string(v[i]);
  }
  return s;
}

std::string placement_comment(const Plan& plan, int gpus_per_node, const std::string& mesh) {
  const int cp = plan.choice.cp;
  if (cp == 1) return "";
  const RankPlacement pl = rank_placement(plan, gpus_per_node);
  const int tp = plan.choice.tp;
  const std::string group = cp_group_noun(plan.choice);  // cp > 1 here
  std::string out = tp > 1
                        ? "# Rank placement: rank r is TP rank r % " + std::to_string(tp) + " of " + group +
                              " position (r / " + std::to_string(tp) + ") % " + std::to_string(cp) + " (" + mesh +
                              "); torchrun starts rank r on node r / " + std::to_string(pl.ranks_per_node) + ".\n"
                        : "# Rank placement: " + group + " k is ranks k*" + std::to_string(cp) + " .. k*" +
                              std::to_string(cp) + "+" + std::to_string(cp - 1) + " (" + mesh +
                              "); torchrun starts rank r on node r / " + std::to_string(pl.ranks_per_node) + ".\n";
  const int a2a = plan.choice.cp_a2a;
  if (plan.choice.strategy == Strategy::kUsp)  // usp_plan.h's layout, Megatron's level order
    out += "# a2a+p2p: each " + std::to_string(a2a) +
           (tp > 1 ? " adjacent ring positions" : " adjacent ranks of a ring") + " all-to-all (inside a node); " +
           (tp > 1 ? "positions " : "ranks ") + std::to_string(a2a) + " apart form the p2p ring of " +
           std::to_string(cp / a2a) + ".\n";
  if (pl.node_major) return out + "# The plan's order is node-major: no CUDA_VISIBLE_DEVICES needed.\n";
  out += "# On each node, before torchrun (the plan's " + plan.choice.order_name + " order):\n";
  for (size_t n = 0; n < pl.visible_devices.size(); ++n)
    out += "#   node " + std::to_string(static_cast<int64_t>(n)) +
           ": export CUDA_VISIBLE_DEVICES=" + join_ints(pl.visible_devices[n], ",") + "\n";
  return out;
}

std::string fp8_recipe_refusal(ExportTarget t, Fp8Recipe recipe) {
  const bool te = recipe == Fp8Recipe::kDelayed || recipe == Fp8Recipe::kCurrent;
  if (t == ExportTarget::kTorchtitan && te)
    return std::string("torchtitan's float8 is torchao's tensorwise scaling (got ") + to_string(recipe) +
           "): --fp8 tensorwise, or --target megatron";
  if (t == ExportTarget::kMegatron && recipe == Fp8Recipe::kTensorwise)
    return "Megatron-LM's fp8 is Transformer Engine's, delayed or current scaling (got tensorwise, torchao's): "
           "--fp8 delayed or current";
  return "";
}

std::string optimizer_states_refusal(ExportTarget t, const OptimizerStates& o) {
  if (t == ExportTarget::kMegatron || !precision_aware_optimizer(o)) return "";
  if (t == ExportTarget::kTorchtitan)
    return "torchtitan's AdamW keeps fp32 master params and moments (12 bytes a parameter; the plan keeps " +
           std::to_string(static_cast<int>(optimizer_state_bytes(o))) +
           "): drop --main-params-dtype, --store-param-remainders, --exp-avg-dtype and --exp-avg-sq-dtype, or "
           "--target megatron (its --use-precision-aware-optimizer)";
  // The executor: remainders are the fp32 master exactly; both moments in bf16 are kept and
  // updated as Transformer Engine's FusedAdam does (fsdp.h, TrainKernels::adamw_bf16_moments).
  // fp16 and fp8 states TE keeps scaled per tensor, which the executor does not run.
  auto moment = [](StateDtype d) { return d == StateDtype::kFp32 || d == StateDtype::kBf16; };
  if (o.main_params_dtype == StateDtype::kFp32 && moment(o.exp_avg_dtype) && o.exp_avg_sq_dtype == o.exp_avg_dtype)
    return "";
  return std::string("the executor's AdamW keeps fp32 master params (or their remainders) and both moments in fp32 or "
                     "both in bf16 (the plan keeps master ") +
         to_string(o.main_params_dtype) + ", exp_avg " + to_string(o.exp_avg_dtype) + ", exp_avg_sq " +
         to_string(o.exp_avg_sq_dtype) +
         "; Transformer Engine scales fp16 and fp8 states per tensor): such a plan is priced, simulated "
         "(`ringmaster simulate`) and exported, not run: re-plan with bf16 or fp32 states";
}

Framework target_framework(ExportTarget t) {
  switch (t) {
    case ExportTarget::kMegatron: return Framework::kMegatron;
    case ExportTarget::kTorchtitan: return Framework::kPytorch;
    case ExportTarget::kSlurm: break;
  }
  return Framework::kAny;
}

std::string export_refusal(const Plan& plan, const ModelSpec& model, int gpus_per_node, ExportTarget target) {
  if (target == ExportTarget::kSlurm) return "";
  // The model first: no plan of it runs there. torchtitan's models are Llama blocks.
  if (target == ExportTarget::kTorchtitan) {
    std::string fields, has;
    auto differs = [&](bool d, const char* field, const std::string& what) {
      if (!d) return;
      fields += std::string(fields.empty() ? "" : ", ") + "model." + field;
      has += (has.empty() ? "" : ", ") + what;
    };
    differs(model.norm != Norm::kRmsNorm, "norm", to_string(model.norm));
    differs(model.position_embedding != PositionEmbedding::kRope, "position_embedding",
            std::string(to_string(model.position_embedding)) + " positions");
    differs(!model.gated_ffn, "gated_ffn", "a plain FFN");
    differs(model.bias != LinearBias::kNone, "bias", std::string("biases (") + to_string(model.bias) + ")");
    const int64_t window = effective_window(model, plan.job);
    differs(window > 0, "sliding_window", "a sliding window of " + std::to_string(window));
    differs(model.hidden_dropout > 0, "hidden_dropout", "hidden dropout");
    differs(model.attention_dropout > 0, "attention_dropout", "attention dropout");
    if (!fields.empty())
      return fields + ": torchtitan's models build RMSNorm blocks with rotary embeddings, SwiGLU FFNs, no biases, no "
                      "sliding window and no dropout; " +
             model.name + " has " + has + ": export to Megatron-LM (--to megatron)";
  }
  // Then the job's optimizer: no plan of it runs there either.
  if (const std::string why = optimizer_states_refusal(target, plan.job.optimizer); !why.empty())
    return "optimizer states: " + why;
  std::string why = framework_refusal(plan, gpus_per_node, target);
  if (!why.empty() || target != ExportTarget::kMegatron) return why;
  const std::vector<std::string> broken = megatron_rule_violations(megatron_args(plan, model));
  return broken.empty() ? "" : broken.front();
}

namespace {

// SearchPins::refusal for `target`: export_refusal of each candidate.
std::function<std::string(const Job&, const PlanChoice&)> target_refusal(const ModelSpec& model, int gpus_per_node,
                                                                        ExportTarget target) {
  return [&model, gpus_per_node, target](const Job& job, const PlanChoice& choice) {
    Plan candidate;
    candidate.job = job;
    candidate.choice = choice;
    return export_refusal(candidate, model, gpus_per_node, target);
  };
}

}  // namespace

Plan plan_for_target(Planner& planner, const Job& asked, const SearchPins& pins, ExportTarget target,
                     const ModelSpec& model, int gpus_per_node, const std::string& where) {
  if (asked.workload == Workload::kStep)
    if (const std::string why = optimizer_states_refusal(target, asked.optimizer); !why.empty())
      fail_input(where, "--target", why);
  if (target == ExportTarget::kSlurm) {
    try {
      return planner.plan(asked, runnable_pins(pins, model, planner.fabric().topology()));
    } catch (const InputError& e) {
      fail_input(where, "--target", std::string("no plan `ringmaster run` can run: ") + e.what());
    }
  }
  const std::string t = to_string(target), fw = display_name(target);
  // Both frameworks take the loss over the whole micro-step's fp32 logits: their memory.
  // And each prices its GEMMs as that framework runs them (data_parallel.h
  // pays_gemm_size_curve): torchtitan is PyTorch-native.
  Job job = asked;
  job.chunked_loss = false;
  job.framework = target_framework(target);
  if (job.workload != Workload::kStep)
    fail_input(where, "--workload", fw + " runs training steps: --target " + t + " plans workload step");
  SearchPins p = pins;
  if (p.schedule && *p.schedule != Schedule::kFlat)
    fail_input(where, "--schedule", fw + " runs a flat ring only (got '" + to_string(*p.schedule) + "')");
  if (p.load_balance && *p.load_balance != LoadBalance::kZigzag)
    fail_input(where, "--load-balance",
               fw + " splits the sequence zigzag (2 x CP chunks) only (got '" + to_string(*p.load_balance) + "')");
  if (p.kv_subblocks && *p.kv_subblocks != 1)
    fail_input(where, "--kv-subblocks",
               fw + " sends each K,V block as one message (got " + std::to_string(*p.kv_subblocks) + ")");
  if (p.checkpointing && *p.checkpointing == Checkpointing::kSelective && target == ExportTarget::kTorchtitan)
    fail_input(where, "--checkpointing", "torchtitan has no FFN-only selective checkpointing: none or full");
  if (p.order && *p.order == "searched")
    fail_input(where, "--order", "a searched order may move ranks across nodes, which torchrun cannot place");
  if (const std::string why = fp8_recipe_refusal(target, job.fp8_recipe); !why.empty()) fail_input(where, "--fp8", why);
  const bool ring_pinned = pins.schedule || pins.order || pins.load_balance || pins.kv_subblocks;
  if (!p.cp_comm_type || *p.cp_comm_type == Strategy::kRing) {  // the ring the target has
    p.schedule = Schedule::kFlat;
    p.load_balance = LoadBalance::kZigzag;
    p.kv_subblocks = 1;
  }

  // The best plan the target runs, as the search picks (better_pick): the search offers
  // only candidates export_refusal lets through (SearchPins::refusal), so no rule the target
  // has (sharding level, checkpointing, order, CP kind) is left to a second search.
  p.refusal = target_refusal(model, gpus_per_node, target);
  std::optional<Plan> best;
  std::string why;
  auto offer = [&](Plan cand) {
    // The pick as returned (its batch rounded to whole sequences), checked once more.
    const std::string refused = export_refusal(cand, model, gpus_per_node, target);
    if (!refused.empty()) {
      if (why.empty()) why = refused;
      return;
    }
    if (!best || better_pick(cand.predicted, best->predicted)) best = std::move(cand);
  };
  // A p2p ring pinned as above, or the kind --cp-comm-type pinned.
  try {
    offer(planner.plan(job, p));
  } catch (const InputError& e) {
    why = e.what();  // no ring (or no plan of the pinned kind) runs it; a collective kind may
  }
  // The collective kinds (all_gather; a2a and a2a+p2p, which torchtitan lacks), each searched
  // on its own: the ring pins above leave them out of the search. Only the pinned kind when
  // --cp-comm-type is given; none when a ring choice is.
  std::vector<Strategy> kinds;
  if (!pins.cp_comm_type && !ring_pinned && !(pins.cp && *pins.cp == 1))
    kinds = {Strategy::kAllGatherCp, Strategy::kUlysses, Strategy::kUsp};
  SearchPins q = pins;
  q.refusal = p.refusal;
  for (Strategy kind : kinds) {
    try {
      offer(planner.best_collective_cp_plan(kind, job, q));
    } catch (const InputError& e) {
      if (why.empty()) why = e.what();  // this kind cannot split the job (e.g. a2a beyond the heads)
    }
  }
  if (!best) fail_input(where, "--target", "no plan " + fw + " can run: " + why);
  if (best->baselines.empty()) best->baselines = planner.baselines(job);
  return *best;
}

std::string launch_backend(const Topology& topology) {
  return topology.intra.kind == IntraKind::kSharedMemory ? "cpu" : "cuda";
}

SearchPins runnable_pins(SearchPins pins, const ModelSpec& model, const Topology& topology) {
  pins.refusal = [&model, &topology, backend = launch_backend(topology)](const Job& job, const PlanChoice& choice) {
    Plan candidate;
    candidate.job = job;
    candidate.choice = choice;
    return run_refusal(candidate, model, topology, backend);
  };
  return pins;
}

std::string run_refusal(const Plan& plan, const ModelSpec& model, const Topology& topology, const std::string& backend) {
  if (plan.job.workload == Workload::kLayer)
    return "workload: the executor runs workloads 'attention' (ring attention alone) and 'step' "
           "(whole training steps, as `ringmaster train`); 'layer' is for prediction "
           "only: re-plan with --workload attention or step";
  const Strategy kind = plan.choice.strategy;
  if ((kind == Strategy::kUlysses || kind == Strategy::kUsp) && backend != "cpu")
    return "plan.strategy: the " + backend + " backend runs context parallelism of cp_comm_type p2p (the ring) "
           "or all_gather; " + std::string(cp_comm_type(kind)) +
           " (all-to-all over heads) runs on the cpu backend only: re-plan with --cp-comm-type p2p or all_gather";
  if (kind != Strategy::kRing && kind != Strategy::kAllGatherCp && kind != Strategy::kUlysses &&
      kind != Strategy::kUsp)
    return std::string("plan.strategy: run executes context parallelism of cp_comm_type p2p (the ring), "
                       "all_gather, a2a or a2a+p2p (got '") +
           to_string(kind) + "', cp_comm_type " + cp_comm_type(kind) + ")";
  if (plan.choice.pp > 1 && backend != "cpu")
    return "plan.pp: the " + backend + " backend runs plans without pipeline parallelism (got pp " +
           std::to_string(plan.choice.pp) +
           "; the cpu backend runs them): such a plan is priced, simulated (`ringmaster simulate`) and exported: "
           "re-plan with --pp 1";
  if (const std::string why = pp_order_why_invalid(plan.choice); !why.empty()) return "order: " + why;
  if (const std::string why = pp_replay_why_not(plan.choice.pp, plan.choice.virtual_stages); !why.empty())
    return "plan.virtual_stages: " + why + "; such a plan is priced, not run: re-plan with --virtual-stages 1";
  if (plan.job.fp8_recipe != Fp8Recipe::kNone)
    return std::string("fp8_recipe: the executor's linear layers run in fp32 or bf16, not float8 (got ") +
           to_string(plan.job.fp8_recipe) +
           "): such a plan is priced, simulated (`ringmaster simulate`) and exported, not run: re-plan without --fp8";
  if (plan.job.workload == Workload::kStep)
    if (const std::string why = optimizer_states_refusal(ExportTarget::kSlurm, plan.job.optimizer); !why.empty())
      return "main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype: " + why;
  if (plan.choice.tp > 1 && backend != "cpu")
    return "plan.tp: the " + backend + " backend runs plans without tensor parallelism (got tp " +
           std::to_string(plan.choice.tp) +
           "; the cpu backend runs them): such a plan is priced, simulated (`ringmaster simulate`) and exported: "
           "re-plan with --tp 1";
  if (plan.choice.tp > 1 && plan.choice.tp_comm_overlap)
    return "plan.tp_comm_overlap: the executor waits for each TP collective before the GEMM that needs it "
           "(Megatron-LM's default), so it cannot measure what this plan priced: re-plan with --no-tp-comm-overlap";
  if (plan.choice.tp > 1 && (plan.job.seq_len / plan.choice.cp) % plan.choice.tp != 0)
    return "plan.tp: sequence parallelism splits each rank's " + std::to_string(plan.job.seq_len / plan.choice.cp) +
           " tokens of a sequence over the tp " + std::to_string(plan.choice.tp) + " members: tp must divide them";
  if (effective_window(model, plan.job) > 0 && backend != "cpu")
    return "model.sliding_window: the " + backend + " backend's kernels apply the causal mask only, not a sliding "
           "window of " + std::to_string(model.sliding_window) +
           " tokens (the cpu backend's do): such a plan is priced and simulated (`ringmaster simulate`), not run "
           "on GPUs";
  if (backend == "cpu" && topology.intra.kind != IntraKind::kSharedMemory)
    return "topology: the cpu backend runs plans made for a CPU topology (shared-memory devices, "
           "e.g. cpu-local); this plan is for '" + topology.name +
           "': re-plan with --topology cpu-local, or run it with --backend cuda";
  return "";
}

std::string export_header(const Plan& plan, ExportTarget target, const std::string& plan_path) {
  const PlanChoice& c = plan.choice;
  const Job& j = plan.job;
  char buf[512];
  std::string h = "# ringmaster export --plan " + plan_path + " --to " + to_string(target) + "\n";
  std::snprintf(buf, sizeof buf,
                "# job: %s on %s, %d GPUs, seq_len %lld tokens, batch %lld sequences, %s, workload %s\n",
                j.model.c_str(), j.topology.c_str(), j.gpus, static_cast<long long>(j.seq_len),
                static_cast<long long>(sequences_per_step(j)), j.causal ? "causal" : "full attention",
                to_string(j.workload));
  h += buf;
  // a2a has no ring: after its all-to-all each rank attends over the whole sequence for its
  // heads, whatever the split (the framework's zigzag chunks price the same).
  const std::string layout = c.strategy == Strategy::kUlysses
                                 ? "all-to-all over heads (" + c.order_name + " order; any split prices the same)"
                                 : std::string(to_string(c.schedule)) + " schedule, " + c.order_name + " order, " +
                                       to_string(c.load_balance) + " split";
  const std::string tp = (c.tp > 1 ? "tp " + std::to_string(c.tp) + " x " : "") +
                         (c.pp > 1 ? "pp " + std::to_string(c.pp) +
                                         (c.virtual_stages > 1 ? " (" + std::to_string(c.virtual_stages) + " virtual)" : "") + " x "
                                   : "");
  std::snprintf(buf, sizeof buf, "# plan: %s, %scp %d x dp %d, %s, checkpointing %s, micro-batch %d x %d micro-steps\n",
                to_string(c.strategy), tp.c_str(), c.cp, c.dp, layout.c_str(), to_string(c.checkpointing), c.micro_batch,
                c.grad_accum);
  h += buf;
  const Prediction& p = plan.predicted;
  if (p.step_time_s > 0) {
    std::snprintf(buf, sizeof buf,
                  "# predicted: %.3f s per step, %.0f tokens/s, MFU %.1f %%, %.1f GiB per GPU (%s)\n",
                  p.step_time_s, p.tokens_per_s, 100 * p.mfu, p.memory_bytes_per_gpu / kGiB,
                  p.fits ? "fits" : "does NOT fit");
    h += buf;
  }
  // Both frameworks take the loss over the whole micro-step's logits upcast to fp32
  // (torchtitan's cross_entropy on pred.float(); Megatron's vocab-parallel cross-entropy).
  if (j.chunked_loss && (target == ExportTarget::kTorchtitan || target == ExportTarget::kMegatron))
    h += std::string("# loss: the plan prices it in chunks of ") + std::to_string(kLogitsChunkTokens) +
         " tokens; " + (target == ExportTarget::kTorchtitan ? "torchtitan" : "Megatron-LM") +
         " holds the whole micro-step's fp32 logits:\n#   re-plan with --no-chunked-loss for the memory it "
         "will use.\n";
  return h;
}

}  // namespace rm
