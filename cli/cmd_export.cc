// `ringmaster export --plan plan.yaml --to megatron|torchtitan|slurm [-o FILE]`: the plan in
// the terms of the framework that launches it (planner/export_target.h). Steps: load the
// plan file, refuse what the target cannot express (exit 2, the field and the rule named),
// render, print or write (temporary file, then rename).
// `--to slurm --launch train [--data FILE] [--steps N] [--checkpoint-dir DIR]
// [--checkpoint-every K]`: the script trains a step plan (planner/export_slurm.h) instead
// of timing it with `run`; train's checks that need no data file run here already.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "executor/run.h"
#include "executor/train.h"
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
  std::string launch = "run";  // slurm: run or train
  SlurmLaunch train;           // slurm --launch train: the script's defaults
  std::vector<const CLI::Option*> train_flags;  // --data, --steps, ...: --launch train only
};

// The script `ringmaster train`s the plan: only a step plan describes a training step, and
// train runs on the cpu backend only, so on a CPU topology; then train's own checks.
void check_trainable(const LoadedPlanFile& lp, const std::string& plan_path) {
  if (lp.plan.job.workload != Workload::kStep)
    fail_input(plan_path, "workload",
               std::string("the plan prices '") + to_string(lp.plan.job.workload) +
                   "', not a whole training step, which `--launch train` runs: re-plan with --workload step");
  if (lp.topology.intra.kind != IntraKind::kSharedMemory)
    fail_input(plan_path, "topology",
               "`ringmaster train` runs on the cpu backend only (no CUDA training backend yet), so plans for a "
               "CPU topology such as cpu-local; this plan is for '" + lp.topology.name +
                   "': re-plan with --topology cpu-local, or export --launch run to time its steps on the GPUs");
  exec::TrainOptions t;
  t.plan_path = plan_path;
  t.synthetic_data = true;  // the data file lives on the cluster: the script checks it
  exec::check_train_inputs(t);
}

void run_export(const ExportOptions& o) {
  const ExportTarget target = parse_export_target(o.to, kCommandLine, "--to");
  if (target != ExportTarget::kSlurm && o.launch != "run")
    fail_input(kCommandLine, "--launch", "only with --to slurm (the script's command)");
  for (const CLI::Option* flag : o.train_flags)
    if (flag->count() > 0 && (target != ExportTarget::kSlurm || o.launch != "train"))
      fail_input(kCommandLine, flag->get_name(), "only with --to slurm --launch train (train's inputs)");
  check_output_path(o.out, "--output");
  const LoadedPlanFile lp = load_plan_file(o.plan);
  const int gpn = lp.topology.gpus_per_node;
  std::string text;
  if (target == ExportTarget::kSlurm) {
    // The script runs `ringmaster run` or `train` on the cluster: the plan must be one it runs there.
    SlurmLaunch launch = o.train;
    launch.train = o.launch == "train";
    launch.backend = launch_backend(lp.topology);
    if (launch.train) check_trainable(lp, o.plan);
    else exec::check_plan_runnable(lp, o.plan, launch.backend);
    text = slurm_export(lp.plan, lp.topology, o.plan, launch);
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
  cmd->add_option("--plan,plan", o->plan, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--to", o->to, "megatron, torchtitan or slurm")->required();
  cmd->add_option("-o,--output", o->out, "write to this file instead of stdout");
  cmd->add_option("--launch", o->launch,
                  "slurm: the command the script runs: run (time the plan) or train (train a step plan's "
                  "model on a text file, on the cpu backend)")
      ->check(CLI::IsMember({"run", "train"}))
      ->capture_default_str();
  o->train_flags = {
      cmd->add_option("--data", o->train.data,
                      "--launch train: the training text as the cluster sees it (else set DATA= at submission)"),
      cmd->add_option("--steps", o->train.steps, "--launch train: optimizer steps (else set STEPS= at submission)")
          ->check(CLI::Range(int64_t{1}, kMaxCount)),
      cmd->add_option("--checkpoint-dir", o->train.checkpoint_dir,
                      "--launch train: checkpoint folder; a resubmission resumes from it")
          ->capture_default_str(),
      cmd->add_option("--checkpoint-every", o->train.checkpoint_every,
                      "--launch train: checkpoint every K steps (0: after the last step only)")
          ->check(CLI::Range(int64_t{0}, kMaxCount))
          ->capture_default_str()};
  cmd->callback([o] { run_export(*o); });
}

}  // namespace rm::cli
