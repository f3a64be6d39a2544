// `ringmaster export --plan plan.yaml --to megatron|torchtitan|slurm [-o FILE]`: the plan in
// the terms of the framework that launches it (planner/export_target.h). Steps: load the
// plan file, refuse what the target cannot express (exit 2, the field and the rule named),
// render, print or write (temporary file, then rename).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "executor/run.h"
#include "planner/atomic_file.h"
#include "planner/export_megatron.h"
#include "planner/export_slurm.h"
#include "planner/export_target.h"
#include "planner/export_torchtitan.h"
#include "planner/input_error.h"
#include "planner/plan_loader.h"

namespace rm::cli {

namespace {

struct ExportOptions {
  std::string plan;
  std::string to;
  std::string out;
};

void run_export(const ExportOptions& o) {
  const ExportTarget target = parse_export_target(o.to, kCommandLine, "--to");
  check_output_path(o.out, "--output");
  const LoadedPlanFile lp = load_plan_file(o.plan);
  const int gpn = lp.topology.gpus_per_node;
  std::string text;
  if (target == ExportTarget::kSlurm) {
    // The script runs `ringmaster run` on the cluster: the plan must be one it runs there.
    const std::string backend = lp.topology.intra.kind == IntraKind::kSharedMemory ? "cpu" : "cuda";
    exec::check_plan_runnable(lp, o.plan, backend);
    text = slurm_export(lp.plan, lp.topology, o.plan, backend);
  } else {
    const std::string why = export_refusal(lp.plan, lp.model, gpn, target);
    if (!why.empty()) throw InputError(o.plan + ": " + why);
    text = target == ExportTarget::kMegatron ? megatron_export(lp.plan, lp.model, gpn, o.plan)
                                             : torchtitan_export(lp.plan, lp.model, gpn, o.plan);
  }
  if (o.out.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    write_file_atomically(o.out, text);
    std::fprintf(stderr, "ringmaster: wrote %s\n", o.out.c_str());
  }
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand(
      "export", "Write a plan as Megatron-LM arguments, a torchtitan job config or a Slurm script");
  cmd->add_option("--plan", o->plan, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--to", o->to, "megatron, torchtitan or slurm")->required();
  cmd->add_option("-o,--output", o->out, "write to this file instead of stdout");
  cmd->callback([o] { run_export(*o); });
}

}  // namespace rm::cli
