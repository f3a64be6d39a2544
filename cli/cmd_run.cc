// `ringmaster run --plan plan.yaml [--np P] [--iters K] [--verify] [--measurements m.jsonl]
//  [--trace t.json] [--backend cpu|cuda] [--timeout-s S]`
//
// Outside an MPI job it checks the plan, then replaces itself with
//   mpirun -np P [--allow-run-as-root] [--oversubscribe] --bind-to none
//          -x OMP_NUM_THREADS=1 <this binary> run <same options>
// (P defaults to the plan's GPU count). Under mpirun (or any launcher that sets the
// PMI/PMIx environment) it runs as one rank, so `mpirun -np P --hostfile H ringmaster run
// ...` spans machines.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "executor/run.h"
#include "planner/input_error.h"

namespace rm::cli {

namespace {

bool under_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

// An output path is user input: refuse a missing or unwritable folder before any rank runs.
void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0)
    fail_input(flag, path, "folder '" + dir + "' does not exist or is not writable");
}

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this binary's path (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

[[noreturn]] void relaunch_under_mpirun(const exec::RunOptions& o, int np) {
  std::vector<std::string> args{"mpirun", "-np", std::to_string(np)};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  if (np > static_cast<int>(std::thread::hardware_concurrency())) args.push_back("--oversubscribe");
  for (const char* a : {"--bind-to", "none", "-x", "OMP_NUM_THREADS=1"}) args.push_back(a);
  if (std::getenv("RINGMASTER_FAULT") != nullptr) {
    args.push_back("-x");
    args.push_back("RINGMASTER_FAULT");
  }
  args.push_back(self_path());
  args.push_back("run");
  for (const std::string& a :
       {std::string("--plan"), o.plan_path, std::string("--iters"), std::to_string(o.iters),
        std::string("--backend"), o.backend, std::string("--timeout-s"), std::to_string(o.timeout_s)})
    args.push_back(a);
  if (o.verify) args.push_back("--verify");
  if (!o.measurements_path.empty()) {
    args.push_back("--measurements");
    args.push_back(o.measurements_path);
  }
  if (!o.trace_path.empty()) {
    args.push_back("--trace");
    args.push_back(o.trace_path);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp("mpirun", argv.data());
  throw std::runtime_error("cannot start mpirun (" + std::string(std::strerror(errno)) +
                           "): install Open MPI, or launch the ranks with your MPI launcher");
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run", "Run a plan's ring attention for real over MPI ranks: verify it, measure it");
  auto o = std::make_shared<exec::RunOptions>();
  auto np = std::make_shared<int>(0);
  cmd->add_option("--plan", o->plan_path, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--np", *np, "MPI ranks to start (default: the plan's GPU count)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--iters", o->iters, "timed iterations after one untimed warm-up")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_flag("--verify", o->verify,
                "compare out, lse, dQ, dK, dV with an fp64 reference (rel err <= 1e-4)");
  cmd->add_option("--measurements", o->measurements_path,
                  "write one JSON line per executed op (format: executor/measurements.h)");
  cmd->add_option("--trace", o->trace_path, "write a Chrome trace-event JSON (Perfetto)");
  cmd->add_option("--backend", o->backend, "cpu (MPI + Eigen) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--timeout-s", o->timeout_s,
                  "a rank with no progress for this long aborts the run (dead or stalled peer)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([o, np] {
    if (under_mpi()) {
      const int code = exec::run_rank(*o);
      if (code != 0) std::exit(code);
      return;
    }
    check_output_path(o->measurements_path, "--measurements");
    check_output_path(o->trace_path, "--trace");
    const exec::LoadedPlan lp = exec::load_plan_for_run(o->plan_path, o->backend);
    if (*np != 0 && *np != lp.plan.job.gpus)
      fail_input(o->plan_path, "gpus",
                 "the plan is for " + std::to_string(lp.plan.job.gpus) + " ranks but --np is " +
                     std::to_string(*np) + "; re-plan with --gpus " + std::to_string(*np));
    relaunch_under_mpirun(*o, lp.plan.job.gpus);
  });
}

}  // namespace rm::cli
