// `ringmaster run --plan plan.yaml [--np P] [--iters K] [--verify] [--measurements m.jsonl]
//  [--trace t.json] [--backend cpu|cuda] [--mixed-precision-param|--mixed-precision-reduce T] [--timeout-s S]`
//
// An attention plan runs its ring attention (executor/run.h); a step plan runs whole
// training steps of its model on synthetic tokens (executor/train.h, run_step_options).
//
// Outside an MPI job it checks the plan, then replaces itself with
//   mpirun -np P [--allow-run-as-root] [--oversubscribe] --bind-to none
//          -x OMP_NUM_THREADS=1 <this binary> run <same options>
// (P defaults to the plan's GPU count). Under mpirun (or any launcher that sets the
// PMI/PMIx environment) it runs as one rank, so `mpirun -np P --hostfile H ringmaster run
// ...` spans machines.
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "executor/run.h"
#include "executor/train.h"
#include "executor/watchdog.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"

namespace rm::cli {

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Run a plan for real over MPI ranks (ring attention, or whole training steps): verify it, measure it");
  auto o = std::make_shared<exec::RunOptions>();
  auto np = std::make_shared<int>(0);
  cmd->add_option("--plan,plan", o->plan_path, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--np", *np, "MPI ranks to start (default: the plan's GPU count)")
      ->check(CLI::Range(1, kMaxGpus));
  cmd->add_option("--iters", o->iters, "timed iterations after one untimed warm-up")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--verify", o->verify,
                "compare out, lse, dQ, dK, dV with an fp64 reference (rel err <= 1e-4), after the warm-up "
                "and the last iteration");
  cmd->add_option("--measurements", o->measurements_path,
                  "write one JSON line per executed op (format: executor/measurements.h)");
  cmd->add_option("--trace", o->trace_path, "write a Chrome trace-event JSON (Perfetto)");
  cmd->add_option("--backend", o->backend, "cpu (MPI + Eigen) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--mixed-precision-param", o->mixed_precision_param,
                  "step plans: the pass's precision, bfloat16 or float32 (as `train`'s; default bfloat16 on "
                  "cuda where the plan's GPUs compute in bf16, float32 on the cpu)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cmd->add_option("--mixed-precision-reduce", o->mixed_precision_reduce,
                  "step plans: the type gradients are reduced in, bfloat16 or float32 (as `train`'s; default "
                  "float32 where the plan says grad_reduce_in_fp32, else the pass's precision)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cmd->add_option("--timeout-s", o->timeout_s,
                  "a rank with no progress for this long aborts the run (a dead or stalled peer, or a set-up "
                  "that never finishes)")
      ->check(finite_in(0.001, 86400))
      ->capture_default_str();
  cmd->callback([o, np] {
    if (under_mpi()) {
      // Step plans run whole training steps (executor/train.h), attention plans the ring.
      const bool step = read_plan_yaml(o->plan_path).job.workload == Workload::kStep;
      const int code = step ? exec::train_rank(exec::run_step_options(*o)) : exec::run_rank(*o);
      if (code != 0) std::exit(code);
      return;
    }
    check_output_path(o->measurements_path, "--measurements");
    check_output_path(o->trace_path, "--trace");
    const LoadedPlanFile lp = exec::load_plan_for_run(o->plan_path, o->backend);
    if (lp.plan.job.workload == Workload::kStep) exec::check_train_inputs(exec::run_step_options(*o));
    exec::fault_from_env();  // a bad RINGMASTER_FAULT is refused here, before any rank starts
    if (*np != 0 && *np != lp.plan.job.gpus)
      fail_input(o->plan_path, "gpus",
                 "the plan is for " + std::to_string(lp.plan.job.gpus) + " ranks but --np is " +
                     std::to_string(*np) + "; re-plan with --gpus " + std::to_string(*np));
    relaunch_under_mpirun(lp.plan.job.gpus, own_arguments());  // exactly what was typed
  });
}

}  // namespace rm::cli
