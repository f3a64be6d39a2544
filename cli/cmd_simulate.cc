// `ringmaster simulate`: replay a plan on a SimGrid cluster built from its topology and
// print the simulated step time, overlap and memory beside the planner's prediction.
// Steps: parse options, get the plan (read --plan, or plan the job like `plan`), predict
// it with the same costs, simulate, print, and write the trace.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job_options.h"
#include "cli/plan_report.h"
#include "cli/self_launch.h"
#include "cli/table.h"
#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/pipeline_parallel.h"
#include "planner/plan_loader.h"
#include "planner/search.h"
#include "planner/units.h"
#include "simulator/simulate.h"

namespace rm::cli {

namespace {

// Above this many GPUs the table lists the spread (min, mean, max) instead of every GPU.
constexpr int kMaxGpuRows = 16;
// A trace above this size gets a warning: JSON traces that large load slowly in Perfetto's
// UI (the threshold issue 11 set after trying it). Decimal MB, as file browsers show sizes.
constexpr double kMB = 1e6;
constexpr double kTraceWarnBytes = 200 * kMB;

struct SimulateCliOptions {
  std::string plan_path;
  JobOptions job;  // when no --plan: plan this job first
  int gpus = 0;
  std::string format = "table";
  std::string trace;
  std::string trace_ranks;  // "0-7,12": the GPUs the trace keeps ("" = all)
  int layers = 16;
  bool full = false;  // replay every ring step of every ring (no folding)
  double gpu_spread = 0;  // ReplayOptions::gpu_spread
  unsigned seed = 1;
};

// The plan to simulate with the specs, fabric and costs it runs on.
struct Subject : LoadedPlanFile {
  std::string where;  // names the plan in messages
};

Subject from_plan_file(const SimulateCliOptions& o) {
  if (o.gpus > 0 || !o.job.seq.empty()) {
    fail_input(kCommandLine, "--plan", "the plan fixes the GPUs and the sequence: drop --gpus and --seq");
  }
  return {load_plan_file(o.plan_path, o.job.profile), o.plan_path};
}

Subject from_job(const SimulateCliOptions& o) {
  if (o.gpus < 1) fail_input(kCommandLine, "--gpus", "required without --plan (the number of GPUs)");
  if (o.job.seq.empty()) fail_input(kCommandLine, "--seq", "required without --plan (tokens per sequence)");
  ResolvedJob r = resolve_job(o.job, o.gpus);
  Subject s;
  s.where = "the planned job";
  Planner planner(r.model, *r.fabric, r.cost);
  s.plan = planner.plan(r.job, r.pins);
  if (const std::string why = pp_replay_why_not(s.plan.choice.pp, s.plan.choice.virtual_stages); !why.empty()) {
    // The planner's pick is priced, not replayed: replay the best plan that is.
    const Plan pick = s.plan;
    SearchPins pins = r.pins;
    pins.refusal = [framework = r.pins.refusal](const Job& job, const PlanChoice& c) {
      const std::string not_replayed = pp_replay_why_not(c.pp, c.virtual_stages);
      return !not_replayed.empty() || !framework ? not_replayed : framework(job, c);
    };
    s.plan = planner.plan(r.job, pins);
    std::fprintf(stderr,
                 "note: the planner's pick (pp %d, %d virtual stages, %.4g s a step) is priced, not simulated (%s); "
                 "simulating the best plan that is (%.4g s a step)\n",
                 pick.choice.pp, pick.choice.virtual_stages, pick.predicted.step_time_s, why.c_str(),
                 s.plan.predicted.step_time_s);
  }
  s.model = std::move(r.model);
  s.topology = std::move(r.topology);
  s.fabric = std::move(r.fabric);
  s.cost = r.cost;
  return s;
}

std::string diff_pct(double sim, double pred) {
  return pred > 0 ? fixed(100 * (sim - pred) / pred, 2) : "-";
}

std::string report(const Subject& s, const Prediction& p, const sim::Simulation& sim) {
  const Plan& plan = s.plan;
  const PlanChoice& c = plan.choice;
  std::string out = "ringmaster simulate: " + s.model.name + " on " + s.topology.name + ", " +
                    std::to_string(plan.job.gpus) + " GPUs, " + format_size(plan.job.seq_len) +
                    " tokens, workload " + to_string(plan.job.workload) + "; " + cp_exchange_text(c) + "; tp " +
                    std::to_string(c.tp) + (c.tp_comm_overlap ? " (TP comm overlapped)" : "") +
                    " x cp " + std::to_string(c.cp) +
                    (c.pp > 1 ? " x pp " + std::to_string(c.pp) + " (" + pp_schedule_name(c.virtual_stages) + ", " +
                                    std::to_string(c.grad_accum) + " micro-batches)"
                              : std::string()) +
                    " x dp " + std::to_string(c.dp) + ", order " + c.order_name +
                    (has_load_balance(c) ? ", " + std::string(to_string(c.load_balance)) : std::string()) + "\n";
  if (!sim.note.empty()) {
    out += "(" + sim.note + ": times, FLOPs and throughput extrapolated to " +
           (sim.fast ? "all that is not replayed; memory exact; --full replays everything" : "all layers") + ")\n";
  }
  out += "\n";
  Table t({{"figure", "", Align::kLeft},
           {"predicted", "", Align::kRight},
           {"simulated", "", Align::kRight},
           {"sim - pred", "%", Align::kRight},
           {"unit", "", Align::kLeft}});
  t.add_row({"step time", sig(p.step_time_s, 5), sig(sim.step_time_s, 5),
             diff_pct(sim.step_time_s, p.step_time_s), "s"});
  t.add_row({"free-comm step time", sig(p.step_time_s * p.scaling_efficiency, 5),
             sig(sim.free_comm_time_s, 5),
             diff_pct(sim.free_comm_time_s, p.step_time_s * p.scaling_efficiency), "s"});
  t.add_row({"throughput", fixed(p.tokens_per_s, 0), fixed(sim.tokens_per_s, 0),
             diff_pct(sim.tokens_per_s, p.tokens_per_s), "tokens/s"});
  t.add_row({"MFU", pct(p.mfu), pct(sim.mfu), diff_pct(sim.mfu, p.mfu), "%"});
  t.add_row({"comm overhead (exposed)", pct(p.comm_overhead), pct(sim.comm_overhead), "-", "% of step"});
  t.add_row({"peak memory per GPU", fixed(p.memory_bytes_per_gpu / kGiB, 2),
             fixed(sim.memory_bytes_per_gpu / kGiB, 2),
             diff_pct(sim.memory_bytes_per_gpu, p.memory_bytes_per_gpu), "GiB"});
  out += t.render() + "\n";

  const auto& gpus = sim.replay.gpus;
  Table g({{"GPU", "", Align::kRight},
           {"busy", "s", Align::kRight},
           {"exposed comm", "s", Align::kRight},
           {"idle", "s", Align::kRight},
           {"peak memory", "GiB", Align::kRight}});
  auto row = [&](const std::string& name, auto field) {
    std::vector<std::string> cells{name};
    for (auto f : {&sim::GpuTimes::busy_s, &sim::GpuTimes::exposed_comm_s, &sim::GpuTimes::idle_s}) {
      cells.push_back(sig(field(f), 4));
    }
    cells.push_back(fixed(field(&sim::GpuTimes::peak_memory_bytes) / kGiB, 2));
    g.add_row(cells);
  };
  if (static_cast<int>(gpus.size()) <= kMaxGpuRows) {
    for (size_t i = 0; i < gpus.size(); ++i) {
      row(std::to_string(sim.replay.gpu_ids[i]), [&](auto f) { return gpus[i].*f; });
    }
  } else {
    auto reduce = [&](auto f, double init, auto op) {
      double v = init;
      for (const auto& x : gpus) v = op(v, x.*f);
      return v;
    };
    const double inf = std::numeric_limits<double>::infinity();
    row("min", [&](auto f) { return reduce(f, inf, [](double a, double b) { return std::min(a, b); }); });
    row("mean", [&](auto f) { return reduce(f, 0.0, std::plus<double>()) / gpus.size(); });
    row("max", [&](auto f) { return reduce(f, -inf, [](double a, double b) { return std::max(a, b); }); });
  }
  out += "Per GPU (busy: computing; exposed comm: waiting for transfers, collectives and step syncs;\n"
         "idle: done early, waiting for the step to end):\n" + g.render() + "\n";

  const sim::ReplayResult& r = sim.replay;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "SimGrid: %lld ops, %lld simulated activities in %.2f s (%.0f activities/s), %d routes\n",
                static_cast<long long>(r.ops), static_cast<long long>(r.activities), r.wall_s,
                r.wall_s > 0 ? r.activities / r.wall_s : 0.0, r.routes);
  out += buf;
  return out;
}

// "0-7,12" -> {0, ..., 7, 12}; every id in [0, gpus). InputError naming --trace-ranks.
std::vector<int> parse_ranks(const std::string& text, int gpus) {
  auto bad = [&](const std::string& why) {
    fail_input(kCommandLine, "--trace-ranks", "expected GPU ids and ranges like 0-7,12 in [0, " +
                                            std::to_string(gpus - 1) + "] (" + why + ", got '" + text + "')");
  };
  std::vector<int> out;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, comma - i);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    try {
      size_t used = 0;
      lo = std::stoi(item.substr(0, dash), &used);
      if (used != (dash == std::string::npos ? item.size() : dash)) bad("not a number");
      hi = lo;
      if (dash != std::string::npos) {
        hi = std::stoi(item.substr(dash + 1), &used);
        if (used != item.size() - dash - 1) bad("not a number");
      }
    } catch (const std::logic_error&) {
      bad("not a number");
    }
    if (lo < 0 || hi >= gpus || lo > hi) bad("out of range");
    for (int g = lo; g <= hi; ++g) out.push_back(g);
    i = comma + 1;
  }
  return out;
}

void run_simulate(const SimulateCliOptions& o) {
  Subject s = o.plan_path.empty() ? from_job(o) : from_plan_file(o);
  if (o.layers < 0) fail_input(kCommandLine, "--layers", "must be >= 0 (0 = all layers)");
  check_output_path(o.trace, "--trace");  // before a long simulation, not after it
  sim::SimulateOptions so;
  so.max_layers = o.layers;
  so.set_fast(!o.full);
  so.replay.trace_path = o.trace;
  if (!o.trace_ranks.empty()) {
    if (o.trace.empty()) fail_input(kCommandLine, "--trace-ranks", "selects what --trace writes: add --trace");
    so.replay.trace_gpus = parse_ranks(o.trace_ranks, s.plan.job.gpus);
  }
  so.replay.progress = true;
  if (o.gpu_spread > 0 && !o.full)
    fail_input(kCommandLine, "--gpu-spread", "draws every GPU's speed, which a replayed ring cannot stand for: add --full");
  so.replay.gpu_spread = o.gpu_spread;
  so.replay.spread_seed = o.seed;
  const sim::Simulation result = sim::simulate_plan(s.plan, s.model, *s.fabric, s.cost, so, s.where);
  // The prediction with the same costs (a plan file's own figures may come from others).
  const Prediction p = CostModel(s.model, *s.fabric, s.cost).predict(s.plan.job, s.plan.choice);

  if (o.format == "json") {
    Plan shown = s.plan;
    shown.predicted = p;
    nlohmann::json j = plan_to_json(shown);
    j["simulated"] = sim::simulation_to_json(result, true);
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    if (o.gpu_spread > 0) {
      const std::vector<double> f = sim::gpu_slowdowns(o.gpu_spread, o.seed, s.plan.job.gpus);
      std::printf("(GPU speeds spread %g, seed %u: each GPU's ring attention kernels take %.4f-%.4f x their mean, the "
                  "rings' waits replayed; the prediction charges the expected slowest, lockstep_jitter %g)\n",
                  o.gpu_spread, o.seed, *std::min_element(f.begin(), f.end()), *std::max_element(f.begin(), f.end()),
                  s.cost.lockstep_jitter);
    }
    std::fputs(report(s, p, result).c_str(), stdout);
  }
  if (!o.trace.empty()) {
    std::fprintf(stderr, "ringmaster: wrote %s\n", o.trace.c_str());
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(o.trace, ec);
    // A pipeline-parallel plan replays all its layers (schedule.h): --layers would not help.
    if (!ec && static_cast<double>(bytes) > kTraceWarnBytes)
      std::fprintf(stderr,
                   "ringmaster: warning: %s is %.0f MB, slow to open in Perfetto above %.0f MB: keep fewer GPUs "
                   "(--trace-ranks 0-%d)%s\n",
                   o.trace.c_str(), static_cast<double>(bytes) / kMB, kTraceWarnBytes / kMB,
                   std::min(7, s.plan.job.gpus - 1), s.plan.choice.pp > 1 ? "" : " or layers (--layers 2)");
  }
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateCliOptions>();
  auto* cmd = app.add_subcommand(
      "simulate",
      "Replay a plan op by op on a SimGrid cluster built from its topology: step time, overlap, "
      "memory per GPU, beside the planner's prediction");
  cmd->add_option("--plan,plan", o->plan_path, "plan.yaml from `ringmaster plan -o` (or plan the job given "
                                          "by the options below)");
  add_job_options(cmd, o->job, false);
  cmd->add_option("--gpus", o->gpus, "number of GPUs (without --plan)")->check(CLI::Range(1, kMaxGpus));
  cmd->add_option(kSeqOptionNames, o->job.seq, "sequence length in tokens (without --plan): 8k, 1M or 1048576");
  cmd->add_option("--layers", o->layers,
                  "layers to simulate, extrapolated to all (they are identical; replay.h); 0 = all (default 16); "
                  "a pipeline-parallel plan replays all of its stages' layers");
  cmd->add_flag("--full", o->full,
                "replay every ring step of every data-parallel ring, every micro-step and every sequence; by default "
                "the middle steps of each ring pass (alike on every GPU) are replayed once and stand for the rest, so "
                "do the middle micro-steps of a step and sequences of a micro-step (more than 5), and only the rings "
                "on ring 0's nodes are replayed, standing for their copies with their link load kept (memory exact)");
  auto* spread = cmd->add_option("--gpu-spread", o->gpu_spread,
                  "with --full: draw each GPU's speed, its ring attention kernels taking (1 + SIGMA z) x their mean, z "
                  "standard normal, and replay what the rings wait for, in place of the lockstep term "
                  "(planner/straggler.h)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->seed, "with --gpu-spread: the draws' seed (default 1)")->needs(spread);
  cmd->add_option("--trace", o->trace, "write a Chrome trace-event JSON timeline (opens in Perfetto)");
  cmd->add_option("--trace-ranks", o->trace_ranks,
                  "with --trace: keep these GPUs' events only, e.g. 0-7,12 (large rings make huge traces)");
  cmd->add_option("--format", o->format, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd->callback([o] { run_simulate(*o); });
}

}  // namespace rm::cli
