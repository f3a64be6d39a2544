// `ringmaster tune --model M --topology T --gpus G --seq N -o plan.yaml [--profile P]`:
// auto-tune before a launch. Steps: calibrate when there is no profile and the hardware is
// this machine (a cpu-local topology), plan with the profile, print the pick and its
// runners-up, write plan.yaml for `ringmaster run`.
//
// Runners-up are the best plan of each other (CP kind, cp) and of each other (ring size,
// schedule, load balance), found by the same search with those choices pinned, so they
// differ from the pick in a way a person would weigh, not only in a tile size; ranked by
// throughput, as the search ranks plans.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job_options.h"
#include "cli/plan_report.h"
#include "cli/search_progress.h"
#include "cli/self_launch.h"
#include "cli/table.h"
#include "planner/export_target.h"
#include "planner/input_error.h"
#include "planner/search.h"
#include "planner/spec_library.h"

namespace rm::cli {
namespace {

struct TuneOptions {
  JobOptions job;
  std::string out;
  std::string format = "table";
  int runners_up = 4;
  std::string grid;  // passed to calibrate
};

// The profile path tune writes when it calibrates: beside the plan.
std::string profile_beside(const std::string& plan_path) {
  std::string base = plan_path;
  for (const char* ext : {".yaml", ".yml"})
    if (base.size() > std::string(ext).size() && base.ends_with(ext)) base.resize(base.size() - std::string(ext).size());
  return base + ".profile.yaml";
}

// Whether a runner-up is the pick again (the pick may be another CP kind than the p2p rings
// the runners-up are searched over, at the same cp; a plan without a ring has no schedule,
// load balance or K,V sub-blocks to tell it apart, whatever its fields hold).
bool same_shape(const PlanChoice& a, const PlanChoice& b) {
  if (a.strategy != b.strategy || a.tp != b.tp || a.pp != b.pp || a.cp != b.cp || a.order != b.order ||
      a.block_q != b.block_q || a.block_kv != b.block_kv || a.checkpointing != b.checkpointing)
    return false;
  if (has_ring_schedule(a) && (a.schedule != b.schedule || a.kv_subblocks != b.kv_subblocks)) return false;
  return !has_load_balance(a) || a.load_balance == b.load_balance;
}

std::vector<Plan> runners_up(Planner& planner, const ResolvedJob& r, const Plan& best, int k) {
  std::vector<Plan> alts;
  std::vector<int> cps = r.pins.cp ? std::vector<int>{*r.pins.cp} : divisors(r.job.gpus);
  auto offer = [&](const SearchPins& pins, bool ring) {
    try {
      Plan p = ring ? planner.best_ring_plan(r.job, pins) : planner.best_plan(r.job, pins);
      if (!same_shape(p.choice, best.choice)) alts.push_back(std::move(p));
    } catch (const InputError&) {
      // This combination cannot run the job (divisibility, schedule shape, heads): not a runner-up.
    }
  };
  // The collective kinds at each cp (cp 1 has none: the ring loop's cp 1 plan stands for it).
  for (int cp : cps)
    for (Strategy kind : {Strategy::kAllGatherCp, Strategy::kUlysses, Strategy::kUsp}) {
      if (cp == 1 || (r.pins.cp_comm_type && *r.pins.cp_comm_type != kind)) continue;
      SearchPins pins = r.pins;
      pins.cp = cp;
      pins.cp_comm_type = kind;
      offer(pins, false);
    }
  if (r.pins.cp_comm_type && *r.pins.cp_comm_type != Strategy::kRing) cps.clear();
  for (int cp : cps)
    for (Schedule s : {Schedule::kFlat, Schedule::kBidirectional, Schedule::kTwoLevel})
      for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
        if ((r.pins.schedule && *r.pins.schedule != s) || (r.pins.load_balance && *r.pins.load_balance != lb))
          continue;
        if (!r.job.causal && lb != LoadBalance::kContiguous) continue;  // balance only matters for causal masks
        if (cp == 1 && (s != Schedule::kFlat || lb != LoadBalance::kContiguous)) continue;
        SearchPins pins = r.pins;
        pins.cp = cp;
        pins.schedule = s;
        pins.load_balance = lb;
        offer(pins, true);
      }
  // By throughput, as the search ranks plans: a step's batch differs with dp where the
  // workload is attention (dp sequences at once), so step times do not compare.
  std::stable_sort(alts.begin(), alts.end(), [](const Plan& a, const Plan& b) {
    if (a.predicted.fits != b.predicted.fits) return a.predicted.fits;
    return a.predicted.tokens_per_s > b.predicted.tokens_per_s;
  });
  if (static_cast<int>(alts.size()) > k) alts.resize(k);
  return alts;
}

std::string runners_up_table(const Plan& best, const std::vector<Plan>& alts) {
  std::vector<Column> cols = sweep_columns();
  cols.push_back({"vs pick", "% tokens/s", Align::kRight});
  Table t(cols);
  auto row = [&](const Plan& p) {
    auto cells = sweep_cells(p);
    cells.push_back(fixed((p.predicted.tokens_per_s / best.predicted.tokens_per_s - 1) * 100, 1));
    t.add_row(cells);
  };
  row(best);
  for (const Plan& p : alts) row(p);
  return t.render();
}

void run_tune(TuneOptions o, bool workload_given) {
  if (o.job.seq.empty()) fail_input(kCommandLine, "--seq", "required");
  check_output_path(o.out, "--output");
  const Topology topo = load_topology(o.job.topology.empty() ? kStudyTopology : o.job.topology);
  const bool local = topo.intra.kind == IntraKind::kSharedMemory;
  // On this machine the plan is for `ringmaster run`, which executes ring attention.
  if (local && !workload_given) o.job.workload = "attention";
  if (o.job.profile.empty()) {
    if (local) {
      o.job.profile = profile_beside(o.out);
      std::fprintf(stderr, "tune: no --profile: calibrating this machine first (%d ranks) -> %s\n",
                   o.job.gpus, o.job.profile.c_str());
      std::vector<std::string> args{"calibrate", "--backend", "cpu", "--np", std::to_string(o.job.gpus),
                                    "-o", o.job.profile, "--topology", topo.source.rfind("builtin:", 0) == 0 ? topo.name : topo.source};
      if (!o.job.model.empty()) args.insert(args.end(), {"--model", o.job.model});
      if (!o.grid.empty()) args.insert(args.end(), {"--grid", o.grid});
      const int code = run_child(args, "/dev/null");
      if (code != 0) throw std::runtime_error("calibration failed (exit status " + std::to_string(code) + ")");
    } else {
      std::fprintf(stderr,
                   "tune: warning: no --profile: planning with %s's default costs; measure the "
                   "target with `ringmaster calibrate --backend cuda --topology %s` for a calibrated plan\n",
                   topo.name.c_str(), topo.name.c_str());
    }
  }
  ResolvedJob r = resolve_job(o.job, o.job.gpus);
  // The plan is for `ringmaster run`: only what it executes (plan --target slurm's search).
  r.pins = runnable_pins(r.pins, r.model, r.topology);
  Planner planner(r.model, *r.fabric, r.cost);
  planner.set_progress(search_progress("tune", r.fabric->gpus()));
  const Plan best = planner.plan(r.job, r.pins);
  const std::vector<Plan> alts = runners_up(planner, r, best, o.runners_up);

  if (o.format == "json") {
    nlohmann::json j = plan_to_json(best);
    nlohmann::json runners = nlohmann::json::array();
    for (const Plan& p : alts) runners.push_back(plan_to_json(p));
    j["runners_up"] = runners;
    j["profile"] = o.job.profile;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(plan_report(best, r.topology, r.cost, r.model, false).c_str(), stdout);
    std::printf("\nthe pick and the runners-up (the best plan of each other CP kind and size, and of each ring "
                "size, schedule and load balance)\n");
    std::fputs(runners_up_table(best, alts).c_str(), stdout);
  }
  write_plan_yaml(best, o.out);
  std::fprintf(stderr, "tune: wrote %s%s%s\n", o.out.c_str(),
               o.job.profile.empty() ? "" : (" (costs from " + o.job.profile + ")").c_str(),
               best.predicted.fits ? "" : " (the plan does not fit in memory)");
}

}  // namespace

void add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneOptions>();
  auto* cmd = app.add_subcommand(
      "tune", "Calibrate if needed, plan with the profile, show the runners-up, write plan.yaml for run");
  add_job_options(cmd, o->job, true);
  cmd->add_option("-o,--output", o->out, "plan YAML to write (for `ringmaster run`)")->required();
  cmd->add_option("--format", o->format, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--runners-up", o->runners_up, "how many runners-up to show")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--grid", o->grid, "calibration grid when tune calibrates: small or full")
      ->check(CLI::IsMember({"small", "full"}));
  cmd->callback([o, cmd] { run_tune(*o, cmd->count("--workload") > 0); });
}

}  // namespace rm::cli
