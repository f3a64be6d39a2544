#include "cli/plan_report.h"

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/memory_model.h"
#include "planner/pipeline_parallel.h"
#include "planner/units.h"

namespace rm::cli {

namespace {

// "zero1 (optimizer states) over all 64 GPUs"; hsdp names both degrees.
std::string sharding_text(const PlanChoice& c, int gpus) {
  const int data = gpus / c.tp / std::max(1, c.pp);
  const std::string over = c.pp > 1   ? "each stage's TP rank's " + std::to_string(data) + " GPUs"
                           : c.tp > 1 ? "each TP rank's " + std::to_string(data) + " GPUs"
                                      : "all " + std::to_string(data) + " GPUs";
  switch (c.sharding) {
    case Sharding::kDdp: return "ddp (replicated; grads all-reduced once per step) over " + over;
    case Sharding::kZero1: return "zero1 (optimizer states sharded) over " + over;
    case Sharding::kZero2: return "zero2 (optimizer states and grads sharded) over " + over;
    case Sharding::kHsdp:
      return "hsdp: fsdp over " + std::to_string(c.cp * c.dp_shard) + " GPUs (dp_shard " +
             std::to_string(c.dp_shard) + "), replicated " + std::to_string(c.dp / c.dp_shard) + "x";
    default: return "fsdp (params, grads and optimizer states sharded) over " + over;
  }
}


std::string gib(double bytes) { return fixed(bytes / kGiB, 1); }

std::string order_text(const PlanChoice& c) {
  if (c.cp == 1) return c.order_name;  // no ring: the name says how ranks map to GPUs
  std::string s = c.order_name + " (" + cp_group_noun(c) + " 0:";
  const int shown = std::min(c.cp, 16);
  for (int i = 0; i < shown; ++i) s += " " + std::to_string(c.order[i]);
  if (c.cp > shown) s += " ...";
  return s + ")";
}

// The ring's size: cp, or a2a+p2p's ring across nodes (its block is N / that).
int ring_size(const PlanChoice& c) { return c.strategy == Strategy::kUsp ? c.cp / c.cp_a2a : c.cp; }

std::string baseline_name(Strategy s) {
  switch (s) {
    case Strategy::kFlashFsdp: return "flash-fsdp (FlashAttention + FSDP, no sequence parallelism)";
    case Strategy::kAllGatherCp: return "allgather-cp (Llama 3 style)";
    case Strategy::kUlysses: return "ulysses (all-to-all over heads)";
    case Strategy::kRing: return "ring attention";
    case Strategy::kUsp: return "usp: all-to-all over heads inside a node, ring across";
  }
  return "?";
}

// Why the pick has tensor parallelism: it against the best plan without (tp = 1).
std::string why_tp(const Plan& plan) {
  const Baseline& b = *plan.without_tp;
  const Prediction& p = plan.predicted;
  const PlanChoice& c = plan.choice;
  Table t({{"why tp " + std::to_string(c.tp), "", Align::kLeft},
           {"tp x cp x dp", "", Align::kRight},
           {"ckpt", "", Align::kLeft},
           {"mb", "seqs", Align::kRight},
           {"fits", "", Align::kLeft},
           {"memory", "GiB", Align::kRight},
           {"throughput", "tokens/s", Align::kRight},
           {"vs plan", "x", Align::kRight}});
  t.add_row({"this plan", std::to_string(c.tp) + " x " + std::to_string(c.cp) + " x " + std::to_string(c.dp),
             to_string(c.checkpointing), std::to_string(c.micro_batch), p.fits ? "yes" : "NO",
             gib(p.memory_bytes_per_gpu), fixed(p.tokens_per_s, 0), "1.00"});
  if (!b.feasible) {
    t.add_row({"best with tp 1", "-", "-", "-", "no", "-", "-", "-"});
    return t.render() + "  (" + b.why_not + ")\n";
  }
  t.add_row({std::string("best with tp 1 (") + cp_comm_type(b.strategy) + ")",
             "1 x " + std::to_string(b.cp) + " x " + std::to_string(b.dp), to_string(b.checkpointing),
             std::to_string(b.micro_batch), b.fits ? "yes" : "NO", gib(b.memory_bytes_per_gpu),
             fixed(b.tokens_per_s, 0), p.tokens_per_s > 0 ? fixed(b.tokens_per_s / p.tokens_per_s, 2) : "-"});
  std::string why;
  if (!b.fits) why = "without tensor parallelism no plan fits (" + b.why_not + ")";
  else
    why = "tp " + std::to_string(c.tp) + " divides weights, optimizer states and (with sequence parallelism) "
          "activations by " + std::to_string(c.tp) + ", so it needs " +
          (b.checkpointing != c.checkpointing ? std::string("less recompute (") + to_string(c.checkpointing) +
                                                     " instead of " + to_string(b.checkpointing) + ") and "
                                               : std::string()) +
          "a shorter ring: " + fixed((p.tokens_per_s / std::max(1.0, b.tokens_per_s) - 1) * 100, 1) +
          " % more tokens/s";
  return t.render() + "  " + why + "\n";
}

// What a whole loss holds at its peak (memory_model.h whole_loss_bytes_per_logit).
const char* whole_loss_text(WholeLoss loss) {
  switch (loss) {
    case WholeLoss::kCompiled:
      return "whole, compiled: the micro-step's bf16 logits and their gradient (the fp32 upcast, log-softmax "
             "and NLL fused), ";
    case WholeLoss::kLossParallel:
      return "whole, loss-parallel: DTensor's log-softmax and fused NLL backward over the micro-step's fp32 "
             "logits (four fp32 tensors at once), ";
    case WholeLoss::kEagerPytorch:
      return "whole: F.cross_entropy over the micro-step's fp32 logits (log-softmax, its gradient and the "
             "logits' at once), ";
    case WholeLoss::kMegatron:
      return "whole: vocab_parallel_cross_entropy (the micro-step's logits and one fp32 copy, softmax and "
             "gradient in place), ";
    case WholeLoss::kFp32Pair: break;
  }
  return "whole: the micro-step's fp32 logits and their gradient at once, ";
}

// Adam's states as the plan keeps them, and their bytes a parameter (memory_model.h).
std::string optimizer_states_cell(const OptimizerStates& o) {
  const std::string master = o.store_param_remainders ? "master as the 16 bits its bf16 param lacks"
                                                      : std::string(to_string(o.main_params_dtype)) + " master";
  const std::string moments =
      o.exp_avg_dtype == o.exp_avg_sq_dtype
          ? std::string(to_string(o.exp_avg_dtype)) + " exp_avg and exp_avg_sq"
          : std::string(to_string(o.exp_avg_dtype)) + " exp_avg, " + to_string(o.exp_avg_sq_dtype) + " exp_avg_sq";
  return master + ", " + moments + ": " + sig(optimizer_state_bytes(o), 3) + " bytes a parameter" +
         (precision_aware_optimizer(o) ? " (precision-aware optimizer)" : "");
}

}  // namespace

std::string idle_replicas_text(const Job& job, int dp) {
  const int64_t busy = busy_replicas(job, dp);
  if (busy >= dp) return "";
  return "only " + std::to_string(busy) + (busy == 1 ? " sequence" : " sequences") + " a step: " +
         std::to_string(dp - busy) + " of " + std::to_string(dp) + " data-parallel replicas idle";
}

std::string cp_kind_cell(const PlanChoice& c) {
  if (c.cp == 1) return "-";  // no context parallelism (plan_report's "none")
  if (c.strategy == Strategy::kUsp) return std::string(cp_comm_type(c.strategy)) + " " + usp_split_text(c);
  return cp_comm_type(c.strategy);
}

std::string schedule_cell(const PlanChoice& c) { return has_ring_schedule(c) ? to_string(c.schedule) : "-"; }

std::string balance_cell(const PlanChoice& c) { return has_load_balance(c) ? to_string(c.load_balance) : "-"; }

std::string layout_cell(const PlanChoice& c) {
  std::string s = std::to_string(c.cp) + " x " + std::to_string(c.dp);
  if (c.tp > 1) s += ", tp " + std::to_string(c.tp);
  if (c.pp > 1) s += ", pp " + std::to_string(c.pp) + (c.virtual_stages > 1 ? "/" + std::to_string(c.virtual_stages) : "");
  return s;
}

std::string overlap_threshold_table(const Topology& topo, const CostParams& cost, const ModelSpec& model) {
  Table t({{"link class", "", Align::kLeft},
           {"bandwidth", "GB/s", Align::kRight},
           {"overlap threshold", "tokens per GPU", Align::kRight}});
  for (const LinkThreshold& th : overlap_thresholds(topo, cost, model)) {
    t.add_row({to_string(th.cls), sig(th.bytes_per_s / kGB), format_size(static_cast<int64_t>(th.tokens))});
  }
  return t.render();
}

std::string plan_report(const Plan& plan, const Topology& topo, const CostParams& cost,
                        const ModelSpec& model, bool max_seq, const ReportHeader& header) {
  const Job& j = plan.job;
  const PlanChoice& c = plan.choice;
  const Prediction& p = plan.predicted;
  std::string out;
  out += "ringmaster plan: " + model.name + " on " + topo.name + ", " + std::to_string(j.gpus) +
         " GPUs, " + (header.seq_as_typed.empty() ? format_size(j.seq_len) : header.seq_as_typed) +
         " tokens per sequence" + (max_seq ? " (the longest that fits)" : "") + ", " +
         (j.causal ? "causal" : "full attention") + ", workload " + to_string(j.workload) +
         ", attention " + j.attention_kernel + fp8_header_text(j) + "\n";
  for (const std::string& note : header.notes) out += "  " + note + "\n";
  out += "\n";

  Table choice({{"choice", "", Align::kLeft}, {"value", "", Align::kLeft}});
  // cp 1: no context parallelism, so no kind, ring schedule, load balance or K,V sub-blocks
  // (Megatron's --cp-comm-type has no effect at --context-parallel-size 1); the plan file and
  // JSON keep the fields as the search left them.
  const bool no_cp = c.cp == 1;
  choice.add_row({"context parallelism (cp_comm_type)",
                  no_cp ? std::string("none (cp 1: each GPU attends over its whole sequences)")
                        : std::string(cp_comm_type(c.strategy)) + " (" + baseline_name(c.strategy) + ")"});
  choice.add_row({"tp x cp x pp x dp", std::to_string(c.tp) + " x " + std::to_string(c.cp) + " x " +
                                          std::to_string(c.pp) + " x " + std::to_string(c.dp)});
  if (c.pp > 1) {
    const std::vector<int> layers = pp_stage_layers(pp_layout(model.layers, c));
    const auto [few, many] = std::minmax_element(layers.begin(), layers.end());
    const bool e = c.account_for_embedding_in_pipeline_split, l = c.account_for_loss_in_pipeline_split;
    choice.add_row({"pipeline parallelism",
                    "pp " + std::to_string(c.pp) + ", " + pp_schedule_name(c.virtual_stages) +
                        (c.virtual_stages > 1 ? " (" + std::to_string(c.virtual_stages) + " virtual stages)" : "") +
                        ", " + (*few == *many ? std::to_string(*many) : std::to_string(*few) + "-" + std::to_string(*many)) +
                        " layers per stage" +
                        (e || l ? std::string(" (the split counts the ") + (e && l ? "embedding and the loss" : e ? "embedding" : "loss") +
                                      " as a layer)"
                                : "") +
                        ", " + std::to_string(c.grad_accum) + " micro-batches per step"});
  }
  if (c.tp > 1) {
    choice.add_row({"tensor parallelism", "tp " + std::to_string(c.tp) +
                                              " inside a node, with sequence parallelism (rank order " +
                                              (c.pp > 1 ? "tp-cp-dp-pp" : "tp-cp-dp") + ")"});
    choice.add_row({"tp comm overlap", c.tp_comm_overlap
                                           ? "on (each all-gather and reduce-scatter pipelined with its GEMM in " +
                                                 std::to_string(c.tp) + " chunks)"
                                           : "off (each all-gather and reduce-scatter waited at once)"});
  }
  if (c.strategy == Strategy::kUsp)
    choice.add_row({"hierarchical cp sizes", usp_split_text(c) + " (a2a inside a node x p2p ring across)"});
  choice.add_row({"sharding", sharding_text(c, j.gpus)});
  choice.add_row({"schedule", schedule_cell(c)});
  choice.add_row({"order", order_text(c)});
  choice.add_row({"load balance", balance_cell(c)});
  choice.add_row({"tiles (q x kv)", std::to_string(c.block_q) + " x " + std::to_string(c.block_kv)});
  choice.add_row({"kv sub-blocks", has_ring_schedule(c) ? std::to_string(c.kv_subblocks) : "-"});
  choice.add_row({"checkpointing", to_string(c.checkpointing)});
  const double logits = plan_ring_buffers(model, j, c, topo.gpu).logits_chunk;
  choice.add_row({"loss", (j.chunked_loss ? "chunked: " + std::to_string(kLogitsChunkTokens) +
                                                "-token chunks of fp32 logits and their gradient, "
                                          : std::string(whole_loss_text(whole_loss(j.framework, j.compiled_loss, c.tp)))) +
                              gib(logits) + " GiB"});
  choice.add_row({"micro-batch", std::to_string(c.micro_batch) + (c.micro_batch == 1 ? " sequence" : " sequences") +
                                     " per " + cp_group_noun(c)});
  choice.add_row({"grad accumulation", std::to_string(c.grad_accum) + (c.grad_accum == 1 ? " micro-step" : " micro-steps")});
  const char* grad_type = grad_reduce_element_bytes(j, topo.gpu.element_bytes) == 4 ? "fp32" : "bf16";
  if (j.workload == Workload::kStep)
    choice.add_row({"gradients", std::string("accumulated and reduced in ") + grad_type +
                                     (j.grad_reduce_in_fp32 ? " (grad_reduce_in_fp32)" : " (the GPU's element type)")});
  if (j.workload == Workload::kStep && j.passes == Passes::kForwardBackward)
    choice.add_row({"optimizer states", optimizer_states_cell(j.optimizer)});
  if (j.framework != Framework::kAny) {  // named by --target: the GEMMs' rate, how it shards
    choice.add_row({"priced for", j.framework == Framework::kMegatron
                                      ? "megatron (Megatron-Core: GEMMs at the size curve's limit)"
                                      : "pytorch (PyTorch-native: GEMMs on the size curve, whatever the sharding)"});
    const Sharding run = sharding_as_run(j, c);
    if (run != c.sharding)  // data_parallel.h
      choice.add_row({"  runs as", std::string(to_string(run)) +
                                       " (PyTorch's pipeline keeps FSDP's weights gathered and its gradients "
                                       "unsharded in " + grad_type + " until the step's last micro-batch)"});
  }
  out += choice.render() + "\n";

  Table pred({{"predicted", "", Align::kLeft}, {"value", "", Align::kRight}, {"unit", "", Align::kLeft}});
  pred.add_row({"step time", sig(p.step_time_s, 4), "s"});
  pred.add_row({"throughput", fixed(p.tokens_per_s, 0), "tokens/s"});
  pred.add_row({"MFU", pct(p.mfu), "%"});
  pred.add_row({"comm overhead (exposed)", pct(p.comm_overhead), "% of step"});
  pred.add_row({"scaling efficiency", pct(p.scaling_efficiency), "% of free-comm throughput"});
  pred.add_row({"attention compute", sig(p.attention_compute_s, 4), "s"});
  pred.add_row({"linear compute", sig(p.linear_compute_s, 4), "s"});
  pred.add_row({"exposed comm", sig(p.exposed_comm_s, 4), "s"});
  pred.add_row({std::string("  of which ") + to_string(sharding_as_run(j, c)) + " collectives", sig(p.fsdp_exposed_s, 4), "s"});
  if (c.tp > 1) pred.add_row({"  of which TP collectives", sig(p.tp_comm_s, 4), "s"});
  if (p.lockstep_wait_s > 0)
    pred.add_row({"  of which lockstep waits", sig(p.lockstep_wait_s, 4), "s (ring steps waiting for the slowest GPU)"});
  if (c.pp > 1) {
    pred.add_row({"  of which pipeline transfers", sig(p.pp_p2p_s, 4), "s"});
    pred.add_row({"pipeline bubble", sig(p.pp_bubble_s, 4),
                  "s (" + pct(p.step_time_s > 0 ? p.pp_bubble_s / p.step_time_s : 0) + " % of step; (p-1)/(v*m+p-1) = " +
                      pct(pp_bubble_fraction(c.pp, c.virtual_stages, c.grad_accum)) + " % with equal stages)"});
  }
  pred.add_row({"overlap threshold (this plan)", format_size(static_cast<int64_t>(p.overlap_threshold_tokens)),
                "tokens per GPU (c = " + format_size(j.seq_len / std::max(1, ring_size(c))) + ")"});
  pred.add_row({"memory per GPU", gib(p.memory_bytes_per_gpu), "GiB of " + gib(topo.gpu.memory_bytes)});
  pred.add_row({"  model states", gib(p.memory.model_states), "GiB"});
  pred.add_row({"  layer buffers", gib(p.memory.layer_buffers), "GiB"});
  pred.add_row({"  activations", gib(p.memory.activations), "GiB"});
  if (p.memory.pipeline_buffers > 0) {
    pred.add_row({"    of which receive buffers", gib(p.memory.pipeline_buffers),
                  "GiB: torch's PipelineStage holds one per micro-batch for each chunk's input and output "
                  "gradient, all step"});
  }
  pred.add_row({"  working set", gib(p.memory.working_set), "GiB"});
  pred.add_row({"  runtime reserve", gib(p.memory.runtime_reserve), "GiB"});
  pred.add_row({"allocator cache", gib(p.memory.allocator_cache),
                "GiB more that PyTorch's allocator keeps while there is room (max_memory_reserved " +
                    gib(p.memory.allocator_reserved()) + " GiB)"});
  pred.add_row({"fits", p.fits ? "yes" : "NO", p.why_not});
  out += pred.render() + "\n";

  Table base({{"baseline", "", Align::kLeft},
              {"cp x dp", "", Align::kRight},
              {"fits", "", Align::kLeft},
              {"memory", "GiB", Align::kRight},
              {"throughput", "tokens/s", Align::kRight},
              {"vs plan", "x", Align::kRight},
              {"why not", "", Align::kLeft}});
  for (const Baseline& b : plan.baselines) {
    if (!b.feasible) {
      base.add_row({baseline_name(b.strategy), "-", "no", "-", "-", "-", b.why_not});
      continue;
    }
    // A fitting baseline slower than the plan for want of sequences says so (flash-fsdp
    // holds a whole sequence per GPU, a2a's cp stops at the heads).
    base.add_row({baseline_name(b.strategy), std::to_string(b.cp) + " x " + std::to_string(b.dp),
                  b.fits ? "yes" : "NO", gib(b.memory_bytes_per_gpu), fixed(b.tokens_per_s, 0),
                  p.tokens_per_s > 0 ? fixed(b.tokens_per_s / p.tokens_per_s, 2) : "-",
                  b.fits ? idle_replicas_text(plan.job, b.dp) : b.why_not});
  }
  if (!plan.baselines.empty()) out += base.render() + "\n";  // a pinned plan's (validate --entry) has none
  if (plan.without_tp) out += why_tp(plan) + "\n";
  out += "Overlap thresholds of " + topo.name + " (peak FLOP/s over link bytes/s, Ring Attention Table 2):\n";
  out += overlap_threshold_table(topo, cost, model);
  return out;
}

std::vector<Column> sweep_columns() {
  return {{"GPUs", "", Align::kRight},        {"seq", "tokens", Align::kRight},
          {"cp kind", "", Align::kLeft},
          {"cp x dp", "", Align::kRight},     {"schedule", "", Align::kLeft},
          {"order", "", Align::kLeft},        {"balance", "", Align::kLeft},
          {"tiles", "", Align::kRight},       {"ckpt", "", Align::kLeft},
          {"mb", "seqs", Align::kRight},      {"sharding", "", Align::kLeft},
          {"step", "s", Align::kRight},       {"throughput", "tokens/s", Align::kRight},
          {"MFU", "%", Align::kRight},        {"comm", "% exposed", Align::kRight},
          {"scaling", "%", Align::kRight},    {"memory", "GiB", Align::kRight},
          {"fits", "", Align::kLeft},         {"flash-fsdp", "GiB / fits", Align::kRight}};
}

std::vector<std::string> sweep_cells(const Plan& plan, const std::string& seq_as_typed) {
  const PlanChoice& c = plan.choice;
  const Prediction& p = plan.predicted;
  std::string fsdp = "-";
  for (const Baseline& b : plan.baselines) {
    if (b.strategy == Strategy::kFlashFsdp && b.feasible)
      fsdp = gib(b.memory_bytes_per_gpu) + (b.fits ? " / yes" : " / NO");
  }
  return {std::to_string(plan.job.gpus),
          seq_as_typed.empty() ? format_size(plan.job.seq_len) : seq_as_typed,
          cp_kind_cell(c),
          layout_cell(c),
          schedule_cell(c),
          c.order_name,
          balance_cell(c),
          std::to_string(c.block_q) + "x" + std::to_string(c.block_kv),
          to_string(c.checkpointing),
          std::to_string(c.micro_batch),
          to_string(c.sharding),
          sig(p.step_time_s, 4),
          fixed(p.tokens_per_s, 0),
          pct(p.mfu),
          pct(p.comm_overhead),
          pct(p.scaling_efficiency),
          gib(p.memory_bytes_per_gpu),
          p.fits ? "yes" : "NO",
          fsdp};
}

std::string track_record_line(const Job& job, bool calibrated, const std::optional<TrackRecord>& t) {
  if (calibrated) return "track record: calibrated (--profile); published runs check the shipped constants only";
  if (!t)
    return "track record: none; no published " + std::string(to_string(job.workload)) +
           " run of this GPU, as its topology describes it, is in the corpus (ringmaster validate --published)";
  const ErrorSummary& a = t->all;
  const ErrorSummary& h = t->heldout;
  // A framework named whose runs the corpus lacks on this GPU: every framework's, said so.
  const std::string whose = t->framework != Framework::kAny ? std::string(to_string(t->framework)) + " " : "";
  const std::string none_of = t->framework == Framework::kAny && job.framework != Framework::kAny
                                  ? " (none of them " + std::string(to_string(job.framework)) + "'s)"
                                  : "";
  // The project's own timings are said apart from published runs.
  const std::string own = t->own == 0 ? ""
                          : t->own == a.count
                              ? " (timed by ringmaster, not published)"
                              : " (" + std::to_string(t->own) + " of them timed by ringmaster, not published)";
  return "track record: " + std::to_string(a.count) + (t->own == 0 ? " published " : " ") + t->gpu + " " + whose +
         to_string(t->workload) + (a.count == 1 ? " run" : " runs") + own + none_of + " priced within a median " +
         fixed(100 * a.median, 1) + " %" +
         (h.count > 0 ? " (held out " + std::to_string(h.count) + ": " + fixed(100 * h.median, 1) + " %)" : std::string()) +
         ", worst " + fixed(100 * a.worst, 1) + " % (" + a.worst_id + "); ringmaster validate --published";
}

std::string fp8_header_text(const Job& job) {
  if (job.fp8_recipe == Fp8Recipe::kNone) return "";
  return std::string(", fp8 linear layers (") + to_string(job.fp8_recipe) + ")";
}

std::optional<std::string> closest_runs_line(const std::vector<ClosestRun>& runs) {
  if (runs.empty()) return std::nullopt;
  std::string line = "closest published runs:";
  for (size_t i = 0; i < runs.size(); ++i)
    line += (i == 0 ? " " : ", ") + runs[i].entry->id + " (" + runs[i].entry->gpu + ") " +
            (runs[i].error >= 0 ? "+" : "") + fixed(100 * runs[i].error, 1) + " %";
  return line + "; (published - predicted) / predicted, ringmaster validate --published --entry ID";
}

}  // namespace rm::cli
