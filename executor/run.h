// One rank of `ringmaster run`: load and check the plan, build this rank's op list, run
// a warm-up iteration and K timed ones through the ring loop, then (rank 0) merge the
// measurements, print the summary, verify, and write the files.
//
// Measurement order (as nccl-tests): barrier, one untimed warm-up iteration, barrier,
// K timed iterations back to back; each iteration runs the plan's whole op list.
#pragma once

#include <cstdint>
#include <string>

#include "planner/plan_loader.h"

namespace rm::exec {

struct RunOptions {
  std::string plan_path;
  int iters = 5;             // timed iterations (after one warm-up)
  bool verify = false;
  std::string measurements_path;  // empty = none
  std::string trace_path;         // empty = none
  std::string backend = "cpu";
  double timeout_s = 60;     // watchdog deadline per op (watchdog.h)
  uint64_t seed = 20240601;  // inputs of ring k use seed + k
  std::string mixed_precision_param;   // step plans: TrainOptions::mixed_precision_param
  std::string mixed_precision_reduce;  // step plans: TrainOptions::mixed_precision_reduce
};

// The plan file as every command loads it (planner/plan_loader.h: specs, GPU count, fabric),
// then checked for what `run` can execute with `backend`; throws InputError naming the
// plan file and field otherwise (strategy other than ring, workload 'layer', a non-CPU
// topology for the cpu backend, ...). Step plans run as whole training steps on
// synthetic tokens (executor/train.h, run_step_options).
LoadedPlanFile load_plan_for_run(const std::string& plan_path, const std::string& backend);
// The plan checks of load_plan_for_run without asking whether `backend` is available on this
// machine (`export --to slurm` writes a script for other machines).
void check_plan_runnable(const LoadedPlanFile& lp, const std::string& plan_path, const std::string& backend);

// MPI_Init_thread (FUNNELED: the watchdog thread never calls MPI) with waiting ranks
// yielding their core; for every command whose ranks run the executor (run, calibrate).
void init_mpi_rank();

// Runs this process as one rank: initialises MPI, runs, finalises. Returns the exit
// code: 0, 1 (verification failed, a run-time failure) or 2 (bad input: the plan does
// not match the MPI world).
int run_rank(const RunOptions& options);

}  // namespace rm::exec
