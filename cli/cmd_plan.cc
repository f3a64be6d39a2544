// `ringmaster plan`: the fastest ring-attention plan that fits, with the baselines beside
// it and the overlap thresholds of the cluster's links. Steps: parse options, load specs,
// search, print, write.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job_options.h"
#include "cli/plan_report.h"
#include "cli/self_launch.h"
#include "planner/input_error.h"
#include "planner/search.h"
#include "planner/units.h"

namespace rm::cli {

namespace {

struct PlanOptions {
  JobOptions job;
  bool max_seq = false;
  std::string format = "table";
  std::string out;
};

void run_plan(const PlanOptions& o) {
  if (!o.max_seq && o.job.seq.empty()) {
    fail_input("command line", "--seq", "required (or --max-seq for the longest sequence that fits)");
  }
  if (o.max_seq && !o.job.seq.empty()) {
    fail_input("command line", "--max-seq", "searches the sequence length: drop --seq");
  }
  check_output_path(o.out, "--output");  // before printing a plan that cannot be saved
  ResolvedJob r = resolve_job(o.job, o.job.gpus, o.max_seq ? 1 : 0);
  Planner planner(r.model, *r.fabric, r.cost);
  const Plan plan = o.max_seq ? planner.max_seq(r.job, r.pins) : planner.plan(r.job, r.pins);

  if (o.format == "json") {
    std::printf("%s\n", plan_to_json(plan).dump(2).c_str());
  } else if (o.format == "yaml") {
    std::fputs(plan_to_yaml_string(plan).c_str(), stdout);
  } else {
    std::fputs(plan_report(plan, r.topology, r.cost, r.model, o.max_seq).c_str(), stdout);
  }
  if (!o.out.empty()) {
    write_plan_yaml(plan, o.out);
    std::fprintf(stderr, "ringmaster: wrote %s%s\n", o.out.c_str(),
                 plan.predicted.fits ? "" : " (the plan does not fit in GPU memory)");
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand(
      "plan", "The fastest ring-attention plan for a model, cluster, GPU count and sequence length");
  add_job_options(cmd, opts->job, true);
  cmd->add_flag("--max-seq", opts->max_seq, "find the longest sequence that fits, and its plan");
  cmd->add_option("--format", opts->format, "table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  cmd->add_option("-o,--output", opts->out, "write the plan as YAML (for simulate / run)");
  cmd->callback([opts] { run_plan(*opts); });
}

}  // namespace rm::cli
