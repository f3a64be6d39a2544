// `ringmaster plan`: the fastest ring-attention plan that fits, with the baselines beside
// it and the overlap thresholds of the cluster's links; and the questions around it: the
// fewest GPUs that fit (--min-gpus), the longest sequence (--max-seq, --headroom), a whole
// training run (--train-tokens, --gpu-hour-cost), only what a framework runs (--target).
// Steps: parse options, load specs, search, print, write; a plan that does not fit or leaves
// GPUs idle says so and exits 1 after printing (bad input stays 2).
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job_options.h"
#include "cli/plan_questions.h"
#include "cli/plan_report.h"
#include "cli/search_progress.h"
#include "cli/self_launch.h"
#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/export_megatron.h"
#include "planner/export_target.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/published_accuracy.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "planner/units.h"

namespace rm::cli {

namespace {

// The share of GPU memory from which a plan's header says it is tight (tight_memory_note).
constexpr double kTightMemoryShare = 0.9;

struct PlanOptions {
  JobOptions job;
  bool max_seq = false;
  bool min_gpus = false;
  std::optional<double> target_step_time_s;
  std::string target_tokens_per_s;
  std::string headroom;
  std::string train_tokens;
  std::optional<double> gpu_hour_cost;
  std::string format = "table";
  std::string out;
  std::string target;  // "" or a framework (export_target.h)
};

// One search on `gpus` GPUs; `r` keeps the specs the plan was priced with.
struct Answer {
  std::unique_ptr<ResolvedJob> r;
  Plan plan;
};

Answer plan_on(const PlanOptions& o, int gpus) {
  Answer a;
  a.r = std::make_unique<ResolvedJob>(resolve_job(o.job, gpus, o.max_seq ? 1 : 0));
  ResolvedJob& r = *a.r;
  Planner planner(r.model, *r.fabric, r.cost);
  planner.set_progress(search_progress("plan", r.fabric->gpus()));
  if (o.target.empty()) {
    a.plan = o.max_seq ? planner.max_seq(r.job, r.pins) : planner.plan(r.job, r.pins);
    return a;
  }
  auto for_target = [&](const Job& job) {
    return plan_job_for_target(planner, r, o.job, job, o.target, kCommandLine);
  };
  a.plan = o.max_seq ? planner.max_seq(r.job, for_target) : for_target(r.job);
  return a;
}

// --min-gpus: the first GPU count (ascending, up to --gpus) whose plan fits, leaves no
// GPU idle and meets the targets.
Answer fewest_gpus(const PlanOptions& o, double min_tokens_per_s) {
  const Topology topo = load_topology(o.job.topology.empty() ? kStudyTopology : o.job.topology);
  const int upto = o.job.gpus > 0 ? o.job.gpus : topo.max_gpus();
  std::string last_why;
  for (int g : min_gpus_candidates(std::min(upto, topo.max_gpus()), topo.gpus_per_node)) {
    if (o.job.cp && g % *o.job.cp != 0) continue;
    Answer a;
    try {
      a = plan_on(o, g);
    } catch (const InputError& e) {
      last_why = e.what();  // no plan at all on g GPUs (e.g. the sequence does not split)
      continue;
    }
    const Prediction& p = a.plan.predicted;
    std::string why = plan_shortfall(a.plan);
    if (why.empty() && o.target_step_time_s && p.step_time_s > *o.target_step_time_s)
      why = "step " + sig(p.step_time_s, 6) + " s > " + sig(*o.target_step_time_s, 6) + " s (--target-step-time)";
    if (why.empty() && p.tokens_per_s < min_tokens_per_s)
      why = fixed(p.tokens_per_s, 0) + " tokens/s < " + o.target_tokens_per_s + " (--target-tokens-per-s)";
    std::fprintf(stderr, "min-gpus: %d GPU%s: %s\n", g, g == 1 ? "" : "s", why.empty() ? "yes" : why.c_str());
    if (why.empty()) return a;
    last_why = why;
  }
  throw std::runtime_error("no GPU count up to " + std::to_string(upto) +
                           " runs this job as asked (the largest tried: " + last_why + ")");
}

// The memory model prices live tensors; PyTorch's caching allocator needs room beyond them,
// and near the limit it retries and flushes (mosaicml/composer PR #1998: throughput "will
// collapse"). llm-foundry's MPT-30B 8K runs, at 90 % of memory here, measured 20-35 % below
// the prediction, where the same runs at 85-87 % (4K, 2K) price within 5 % (validation/README.md,
// "The MPT-30B 4K rows"). So a plan past kTightMemoryShare says so, with the best plan that
// keeps the rest free (often within a fraction of a percent): a note, not a price, since
// nothing publishes the slowdown as a function of memory.
std::optional<std::string> tight_memory_note(const PlanOptions& o, const Plan& plan, const Topology& topo) {
  const double share = plan.predicted.memory_bytes_per_gpu / topo.gpu.memory_bytes;
  if (o.job.headroom > 0 || o.max_seq || o.min_gpus || !plan.predicted.fits || share < kTightMemoryShare)
    return std::nullopt;
  const std::string margin_pct = fixed(100 * (1 - kTightMemoryShare), 0);
  const std::string note = "the plan fills " + fixed(100 * share, 0) +
                           " % of GPU memory, where PyTorch's caching allocator can cost throughput (retries and flushes)";
  if (o.target.empty()) {  // a --target search may find nothing that the framework runs in less memory
    PlanOptions margin = o;
    margin.job.headroom = 1 - kTightMemoryShare;
    const Plan m = plan_on(margin, plan.job.gpus).plan;
    if (m.predicted.fits && plan.predicted.tokens_per_s > 0) {
      const double change = m.predicted.tokens_per_s / plan.predicted.tokens_per_s - 1;
      return note + "; with " + margin_pct + " % kept free (--headroom " + margin_pct + "%): " +
             fixed(m.predicted.tokens_per_s, 0) + " tokens/s (" + (change >= 0 ? "+" : "") + pct(change) + " %) in " +
             fixed(m.predicted.memory_bytes_per_gpu / kGiB, 1) + " GiB";
    }
  }
  return note + " (--headroom " + margin_pct + "% plans with a margin)";
}

// The lines under the header: the defaults that shaped the answer and the questions asked.
ReportHeader header_for(const PlanOptions& o, const Plan& plan, const Topology& topo, double headroom) {
  ReportHeader h;
  h.seq_as_typed = o.job.seq;
  const int64_t seqs = sequences_per_step(plan.job);
  std::string defaults;
  if (o.job.model.empty()) defaults += std::string("model ") + kDefaultModel + " (--model), ";
  if (o.job.topology.empty()) defaults += std::string("topology ") + kStudyTopology + " (--topology), ";
  const std::string prefix = defaults.empty() ? std::string("global batch ") : "defaults: " + defaults + "global batch ";
  const std::string sequences = std::to_string(seqs) + " sequence" + (seqs == 1 ? "" : "s");
  if (o.job.global_batch_size)
    h.notes.push_back(prefix + sequences + " (--global-batch-size) = " + format_size(seqs * plan.job.seq_len) +
                      " tokens per optimizer step");
  else
    h.notes.push_back(prefix +
                      (o.job.batch_tokens.empty() ? format_size(kDefaultBatchTokens) + " tokens (--batch-tokens)"
                                                  : o.job.batch_tokens + " tokens") +
                      " = " + sequences + " per optimizer step");
  if (headroom > 0)
    h.notes.push_back("keeping " + fixed(100 * headroom, 0) + " % of GPU memory free (--headroom): plans fit in " +
                      fixed(topo.gpu.memory_bytes / kGiB, 1) + " GiB");
  if (o.max_seq) {  // Planner::max_seq steps in multiples of 2 x GPUs, which every ring and split divide
    const int cp = plan.choice.cp;
    const bool zigzag = plan.choice.load_balance == LoadBalance::kZigzag;
    const std::string needs =
        plan.choice.strategy == Strategy::kUlysses
            ? "an a2a plan attends over the whole sequence, whatever the split"
            : "this plan's " + std::string(to_string(plan.choice.load_balance)) + " split needs a multiple of " +
                  (zigzag ? "2 x cp = " + std::to_string(2 * cp) : "cp = " + std::to_string(cp));
    h.notes.push_back("the length is a multiple of 2 x " + std::to_string(plan.job.gpus) + " GPUs = " +
                      std::to_string(2 * plan.job.gpus) + ", which every ring and load balance split (" + needs + ")");
  }
  if (o.min_gpus)
    h.notes.push_back("the fewest GPUs (--min-gpus" + (o.job.gpus > 0 ? ", up to " + std::to_string(o.job.gpus) : std::string()) + ") that fit" +
                      (o.target_step_time_s ? ", step <= " + sig(*o.target_step_time_s, 6) + " s" : "") +
                      (o.target_tokens_per_s.empty() ? "" : ", >= " + o.target_tokens_per_s + " tokens/s"));
  if (!o.target.empty())
    h.notes.push_back(std::string("only plans for ") + display_name(parse_export_target(o.target, kCommandLine, "--target")) +
                      " (--target " + o.target + "; export --to " + o.target + ")");
  return h;
}

// Megatron-Core's precision-aware optimizer as `plan` suggests it: the master params kept as
// remainders and the moments in bf16 (6 bytes of state a parameter, not 12).
OptimizerStates precision_aware_states() {
  OptimizerStates states;
  states.store_param_remainders = true;
  states.exp_avg_dtype = states.exp_avg_sq_dtype = StateDtype::kBf16;
  return states;
}
// The `plan` options that keep them so.
constexpr const char* kPrecisionAwareOptions = "--store-param-remainders --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16";

// The target `plan` prices for (--target), if one is named.
std::optional<ExportTarget> plan_target(const PlanOptions& o) {
  if (o.target.empty()) return std::nullopt;
  return parse_export_target(o.target, kCommandLine, "--target");
}

// For a plan that does not fit with fp32 Adam states: the plan with those states, where that
// one fits (nullopt where it does not, or cannot run there: torchtitan's AdamW, a GPU without
// bf16 params, a ddp plan under Megatron-LM). The executor (--target slurm) runs them with
// any sharding (fsdp.h).
std::optional<Plan> precision_aware_fit(const PlanOptions& o, const Answer& a) {
  const Plan& plan = a.plan;
  if (plan.predicted.fits || precision_aware_optimizer(plan.job.optimizer)) return std::nullopt;
  const std::optional<ExportTarget> target = plan_target(o);
  if (target == ExportTarget::kTorchtitan) return std::nullopt;
  const bool executor = target == ExportTarget::kSlurm;
  const OptimizerStates states = precision_aware_states();
  if (!optimizer_states_why_invalid(states, a.r->topology.gpu.element_bytes).empty()) return std::nullopt;
  PlanOptions pa = o;
  pa.job.store_param_remainders = states.store_param_remainders;
  pa.job.exp_avg_dtype = to_string(states.exp_avg_dtype);
  pa.job.exp_avg_sq_dtype = to_string(states.exp_avg_sq_dtype);
  const Answer b = plan_on(pa, plan.job.gpus);
  // Megatron-LM runs it only with its distributed optimizer (OptimizerConfig), not ddp's.
  if (!b.plan.predicted.fits || (!executor && !megatron_args(b.plan, b.r->model).distributed_optimizer))
    return std::nullopt;
  return b.plan;
}

void run_plan(const PlanOptions& o) {
  if (!o.max_seq && o.job.seq.empty()) {
    fail_input(kCommandLine, "--seq", "required (or --max-seq for the longest sequence that fits)");
  }
  if (o.max_seq && !o.job.seq.empty()) {
    fail_input(kCommandLine, "--max-seq", "searches the sequence length: drop --seq");
  }
  if (o.max_seq && o.min_gpus) fail_input(kCommandLine, "--min-gpus", "needs a sequence length: give --seq, not --max-seq");
  if (!o.min_gpus && (o.target_step_time_s || !o.target_tokens_per_s.empty()))
    fail_input(kCommandLine, o.target_step_time_s ? "--target-step-time" : "--target-tokens-per-s",
               "is a goal for --min-gpus: add --min-gpus");
  if (o.gpu_hour_cost && o.train_tokens.empty())
    fail_input(kCommandLine, "--gpu-hour-cost", "prices --train-tokens: add --train-tokens");
  const double min_tokens_per_s =
      o.target_tokens_per_s.empty() ? 0 : parse_token_count(o.target_tokens_per_s, kCommandLine, "--target-tokens-per-s");
  const double train_tokens = o.train_tokens.empty() ? 0 : parse_token_count(o.train_tokens, kCommandLine, "--train-tokens");
  PlanOptions opt = o;
  opt.job.headroom = o.headroom.empty() ? 0 : parse_percent(o.headroom, kCommandLine, "--headroom");
  check_output_path(o.out, "--output");  // before printing a plan that cannot be saved

  const Answer a = o.min_gpus ? fewest_gpus(opt, min_tokens_per_s) : plan_on(opt, o.job.gpus);
  const Plan& plan = a.plan;
  // What the user can ask next when it does not fit (the error below; JSON for tools).
  const std::optional<Plan> reduced_states =
      !plan.predicted.fits && !o.min_gpus && !o.max_seq ? precision_aware_fit(opt, a) : std::nullopt;
  const ResolvedJob& r = *a.r;
  const std::optional<TrainingRun> run =
      train_tokens > 0 ? std::optional<TrainingRun>(training_run(plan, train_tokens, o.gpu_hour_cost.value_or(-1)))
                       : std::nullopt;

  if (o.format == "json") {
    nlohmann::json j = plan_to_json(plan);
    if (run) j["training_run"] = training_run_json(*run);
    add_accuracy_json(j, plan, !o.job.profile.empty());
    if (reduced_states)
      j["fits_with_precision_aware_optimizer"] = {
          {"options", kPrecisionAwareOptions},
          {"memory_gib_per_gpu", reduced_states->predicted.memory_bytes_per_gpu / kGiB},
          {"tokens_per_s", reduced_states->predicted.tokens_per_s}};
    std::printf("%s\n", j.dump(2).c_str());
  } else if (o.format == "yaml") {
    std::fputs(plan_to_yaml_string(plan).c_str(), stdout);
  } else if (o.format == "csv") {
    Table t(sweep_columns());
    t.add_row(sweep_cells(plan, o.job.seq));
    std::fputs(t.csv().c_str(), stdout);
  } else {
    ReportHeader header = header_for(o, plan, r.topology, opt.job.headroom);
    if (const auto tight = tight_memory_note(opt, plan, r.topology)) header.notes.push_back(*tight);
    const bool calibrated = !o.job.profile.empty();
    header.notes.push_back(track_record_line(plan.job, calibrated, plan_track_record(plan.job, calibrated)));
    if (const auto closest = closest_runs_line(closest_runs(plan, calibrated))) header.notes.push_back(*closest);
    std::fputs(plan_report(plan, r.topology, r.cost, r.model, o.max_seq, header).c_str(), stdout);
    if (run) std::printf("\n%s", training_run_table(*run, o.train_tokens).c_str());
  }
  if (!o.out.empty()) {
    write_plan_yaml(plan, o.out);
    std::fprintf(stderr, "ringmaster: wrote %s%s\n", o.out.c_str(),
                 plan.predicted.fits ? "" : " (the plan does not fit in GPU memory)");
  }
  const std::string short_of = plan_shortfall(plan);
  // What the user can ask next: the two questions whose answers fit.
  if (!short_of.empty() && !plan.predicted.fits && !o.min_gpus && !o.max_seq)
    throw std::runtime_error(short_of +
                             (reduced_states ? std::string(plan_target(o) == ExportTarget::kSlurm
                                                               ? "; with the precision-aware optimizer's states, which "
                                                                 "ringmaster train keeps ("
                                                               : "; with Megatron-Core's precision-aware optimizer (") +
                                                   kPrecisionAwareOptions + ": " +
                                                   sig(optimizer_state_bytes(precision_aware_states()), 3) +
                                                   " bytes of Adam state a parameter, not " +
                                                   sig(optimizer_state_bytes(OptimizerStates{}), 3) + ") it fits in " +
                                                   fixed(reduced_states->predicted.memory_bytes_per_gpu / kGiB, 1) +
                                                   " GiB at " + fixed(reduced_states->predicted.tokens_per_s, 0) +
                                                   " tokens/s"
                                             : std::string()) +
                             "; --max-seq finds the longest sequence that fits on " +
                             std::to_string(plan.job.gpus) +
                             " GPUs, --min-gpus with a larger --gpus the fewest GPUs on which it fits");
  if (!short_of.empty()) throw std::runtime_error(short_of);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "The fastest ring-attention plan for a model, cluster, GPU count and sequence length");
  add_job_options(cmd, opts->job, true);
  cmd->add_flag("--max-seq", opts->max_seq, "find the longest sequence that fits, and its plan");
  cmd->add_option("--headroom", opts->headroom,
                  "keep this share of GPU memory free, e.g. 10% (plans fit in the rest)");
  cmd->add_flag("--min-gpus", opts->min_gpus,
                "the fewest GPUs (up to --gpus) on which the job fits and meets the targets below");
  cmd->add_option("--target-step-time", opts->target_step_time_s, "with --min-gpus: seconds per optimizer step at most")
      ->check(finite_positive(1e9));
  cmd->add_option("--target-tokens-per-s", opts->target_tokens_per_s,
                  "with --min-gpus: throughput at least (decimal: 1.5M = 1,500,000 tokens/s)");
  cmd->add_option("--train-tokens", opts->train_tokens,
                  "price a whole run of this many tokens: days, GPU-hours (decimal: 1T = 10^12, 300B)");
  cmd->add_option("--gpu-hour-cost", opts->gpu_hour_cost, "with --train-tokens: price of one GPU-hour (e.g. 2.5)")
      ->check(finite_in(0, 1e9));
  cmd->add_option("--format", opts->format, "table, json, yaml or csv")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}));
  cmd->add_option("-o,--output", opts->out, "write the plan as YAML (for simulate / run / export)");
  cmd->add_option("--target", opts->target,
                  "search only plans this framework can run, priced as it runs them (megatron or torchtitan; see "
                  "export), or that `ringmaster run` executes, as export --to slurm launches it (slurm: tp 1, pp 1, "
                  "cp_comm_type p2p or all_gather on GPUs; where the topology launches the cpu backend also a2a, "
                  "tp > 1 without TP comm overlap and pp > 1)")
      ->check(CLI::IsMember({"megatron", "torchtitan", "slurm"}));
  cmd->callback([opts] { run_plan(*opts); });
}

}  // namespace rm::cli
