// One rank of `ringmaster run` (see run.h).
#include "executor/run.h"

#include <malloc.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "executor/backend.h"
#include "executor/measurements.h"
#include "executor/mpi_transport.h"
#include "executor/ring_loop.h"
#include "executor/verify.h"
#include "executor/watchdog.h"
#include "planner/attention_work.h"
#include "planner/export_target.h"
#include "planner/host_memory.h"
#include "planner/input_error.h"
#include "planner/schedule.h"
#include "planner/units.h"

namespace rm::exec {

namespace {

// Refuses a plan whose tensors cannot fit one rank's host memory before any rank allocates
// them (a plan with seq_len 1G once made every rank allocate past the host's memory).
// Counted: each rank's fp32 Q, out, dout, dQ (h heads) and K, V, dK, dV (h_kv heads) of c
// tokens, twice for the ring's receive buffers and the verification copies, plus its token
// ids and one fp32 score and probability tile (tiles are clamped to c): a lower bound of what
// the cpu backend and the verification hold.
void check_host_memory(const std::string& plan_path, const Plan& p, const ModelSpec& m) {
  const double c = static_cast<double>(p.job.seq_len) / p.choice.cp;
  const double tile = std::min<double>(p.choice.block_q, c) * std::min<double>(p.choice.block_kv, c);
  const double need = 2.0 * 4.0 * c * m.head_dim * 4.0 * (m.heads + m.kv_heads) + 8.0 * c + 2.0 * 4.0 * tile;
  const double host = host_memory().total_bytes;
  if (host > 0 && need > host) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "each rank needs at least %.1f GiB of host memory for its tensors (c = %.0f tokens, "
                  "h = %d, h_kv = %d, d = %d) but this host has %.1f GiB: re-plan with a shorter "
                  "sequence or more ranks",
                  need / kGiB, c, m.heads, m.kv_heads, m.head_dim, host / kGiB);
    fail_input(plan_path, "seq_len", text);
  }
}

}  // namespace

LoadedPlanFile load_plan_for_run(const std::string& plan_path, const std::string& backend) {
  LoadedPlanFile lp = load_plan_file(plan_path);
  check_plan_runnable(lp, plan_path, backend);
  check_backend_available(backend);
  check_host_memory(plan_path, lp.plan, lp.model);
  return lp;
}

void check_plan_runnable(const LoadedPlanFile& lp, const std::string& plan_path, const std::string& backend) {
  const std::string why = run_refusal(lp.plan, lp.model, lp.topology, backend);
  if (!why.empty()) throw InputError(plan_path + ": " + why);
}

namespace {

std::string describe_plan(const std::string& path, const LoadedPlanFile& lp, int ranks) {
  const Plan& p = lp.plan;
  const ModelSpec& m = lp.model;
  std::ostringstream o;
  o << "# ringmaster run: " << path << ": " << m.name << " on " << lp.topology.name << ", "
    << ranks << " ranks = " << (p.choice.tp > 1 ? "tp " + std::to_string(p.choice.tp) + " x " : "") << "cp "
    << p.choice.cp << " x dp " << p.choice.dp << ", "
    << cp_exchange_text(p.choice) << " (" << p.choice.order_name << " order), "
    << (has_load_balance(p.choice) ? std::string(to_string(p.choice.load_balance)) + ", " : "")
    << (p.job.causal ? "causal" : "non-causal")
    << "\n#   N = " << p.job.seq_len << " tokens (c = " << p.job.seq_len / p.choice.cp
    << " per rank), d = " << m.head_dim << ", h = " << m.heads << ", h_kv = " << m.kv_heads
    << (p.choice.tp > 1 ? " (" + std::to_string(m.heads / p.choice.tp) + " and " +
                              std::to_string(m.kv_heads / p.choice.tp) + " per TP member, each in its TP rank's ring)"
                        : std::string())
    << ", tiles " << p.choice.block_q << " x " << p.choice.block_kv << ", kv sub-blocks "
    << p.choice.kv_subblocks << ", attention " << to_string(p.job.passes) << "\n";
  return o.str();
}


int run_body(const RunOptions& opt, int rank, int size) {
  const LoadedPlanFile lp = load_plan_for_run(opt.plan_path, opt.backend);
  const Plan& plan = lp.plan;
  if (size != plan.job.gpus)
    fail_input(opt.plan_path, "gpus",
               "the plan is for " + std::to_string(plan.job.gpus) + " ranks (tp " + std::to_string(plan.choice.tp) +
                   " x cp " + std::to_string(plan.choice.cp) + " x dp " + std::to_string(plan.choice.dp) +
                   ") but the MPI world has " + std::to_string(size) + "; run with --np " +
                   std::to_string(plan.job.gpus));
  ScheduleOptions so;
  so.only_gpus = {rank};
  so.where = opt.plan_path;
  OpSchedule sched = generate_schedule(plan, lp.model, *lp.fabric, so);
  const FaultSpec fault = fault_from_env();
  maybe_swap_posts(fault, sched.ranks.at(static_cast<size_t>(rank)));
  const RankSchedule& me = sched.ranks.at(static_cast<size_t>(rank));

  const TokenLayout layout = ring_token_layout(plan);
  const AttentionShape shape = plan_attention_shape(plan, lp.model);
  const std::vector<int64_t> tokens = rank_token_indices(plan, me.position, std::max(0, a2a_member(me)));
  // Inputs by replica (a CP group): a2a+p2p's groups span several of the schedule's rings.
  const int replica = plan_replica(plan, rank);

  Watchdog watchdog(rank, opt.timeout_s);
  watchdog.arm_setup(opt.backend);
  maybe_stall_setup(fault, rank, watchdog);
  std::unique_ptr<Backend> backend = make_backend(opt.backend);
  backend->setup(shape, tokens, opt.seed + static_cast<uint64_t>(replica));
  RingLoop loop(*backend, sched, rank, layout, shape, &watchdog, fault);
  watchdog.disarm();

  // Barrier, untimed warm-up, barrier, timed loop (nccl-tests order).
  auto barrier = [&](const char* what) {
    watchdog.arm(what);
    MPI_Barrier(MPI_COMM_WORLD);
    watchdog.disarm();
  };
  barrier("the barrier before the warm-up iteration");
  const double warm0 = backend->now();
  loop.run(-1, warm0, nullptr);
  const double warmup_s = backend->now() - warm0;
  // --verify checks the warm-up iteration too: the first run of the op list, on fresh
  // buffers, where a buffer read before the op list fills it cannot pass on what an earlier,
  // identical iteration left there.
  std::vector<HostTensors> first;
  if (opt.verify) {
    watchdog.arm("gathering the warm-up iteration's tensors to rank 0");
    first = gather_host_tensors(backend->download());
    watchdog.disarm();
  }
  barrier("the barrier before the timed iterations");
  std::vector<Measurement> records;
  const double epoch = backend->now();
  for (int k = 0; k < opt.iters; ++k) {
    loop.run(k, epoch, &records);
    if (rank == 0 && warmup_s > 2.0)
      std::fprintf(stderr, "ringmaster run: iteration %d/%d done\n", k + 1, opt.iters);
  }
  backend->synchronize();

  watchdog.arm("gathering measurements to rank 0");
  const std::vector<Measurement> all = gather_measurements(records);
  std::vector<HostTensors> gathered;
  if (opt.verify) gathered = gather_host_tensors(backend->download());
  watchdog.disarm();
  if (rank != 0) return 0;

  std::string out = describe_plan(opt.plan_path, lp, size);
  out += "# backend " + backend->name() +
         ": 1 thread per rank (Eigen single-threaded, OMP_NUM_THREADS=1); 1 warm-up + " +
         std::to_string(opt.iters) + " timed iterations\n";
  const auto rows = summarize(all);
  out += format_summary_table(rows, size);
  double avg_step = 0;
  for (const auto& r : rows) avg_step += r.step_s / rows.size();
  char line[256];
  if (plan.predicted.step_time_s > 0) {
    std::snprintf(line, sizeof line,
                  "# planner predicted %.3f ms per iteration; measured %.3f ms (%+.0f %%)\n",
                  plan.predicted.step_time_s * 1e3, avg_step * 1e3,
                  100.0 * (avg_step / plan.predicted.step_time_s - 1.0));
    out += line;
  }
  bool ok = true;
  if (opt.verify) {
    // The reference is fp64 on this host's cores: tell a person waiting on a long one.
    const double n = static_cast<double>(plan.job.seq_len);
    const double ref_flop = 4.0 * (loop.has_backward() ? 3 : 1) * shape.h * n * n * shape.d *
                            (shape.causal ? 0.5 : 1.0) * plan.choice.dp * plan.choice.tp;
    if (ref_flop > 2e10)
      std::fprintf(stderr, "ringmaster run: verifying against the fp64 reference (%.0f GFLOP on %u cores)\n",
                   ref_flop / 1e9, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<VerifyResult> results;
    for (int k = 0; k < plan.choice.dp * plan.choice.tp; ++k) {  // every ring: TP rank t of replica d is d·tp + t
      std::vector<std::vector<HostTensors>> iterations(2);  // the warm-up and the last
      for (int r = 0; r < size; ++r)
        if (plan_replica(plan, r) == k) {
          iterations[0].push_back(std::move(first[static_cast<size_t>(r)]));
          iterations[1].push_back(std::move(gathered[static_cast<size_t>(r)]));
        }
      results.push_back(verify_ring(iterations, shape, opt.seed + static_cast<uint64_t>(k),
                                    loop.has_backward(), backend->verify_tolerance()));
      results.back().ring = k;
    }
    out += format_verify_table(results, backend->verify_tolerance());
    double worst = 0;
    for (const auto& r : results) {
      ok = ok && r.ok();
      for (const auto& c : r.checks) worst = std::max(worst, c.rel_err);
    }
    std::snprintf(line, sizeof line, "# verification: %s (max rel err %.2e, tolerance %.0e)\n",
                  ok ? "OK" : "FAILED", worst, backend->verify_tolerance());
    out += line;
  } else {
    out += "# verification: not run (add --verify)\n";
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  if (!opt.measurements_path.empty()) write_measurements_jsonl(all, opt.measurements_path);
  if (!opt.trace_path.empty()) write_measurements_trace(all, opt.trace_path, opt.plan_path);
  return ok ? 0 : 1;
}

}  // namespace

void init_mpi_rank() {
  // A waiting rank yields its core (Open MPI spins otherwise) unless the user chose: when
  // ranks share cores with other work, a spinning rank holds the core its peer needs and
  // every exchange waits for a scheduler tick (4-8 ms, measured: BENCHMARKS.md).
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  // Activations and unsharded weights and gradients are freed and allocated again every
  // micro-step. glibc hands blocks above its mmap threshold back to the kernel on free, so
  // each step page-faults them in again (zeroed pages): a micro-batch-2 step of the tiny
  // model took 148 ms instead of 89 (BENCHMARKS.md). Keep freed memory in the heap, as
  // PyTorch's caching allocator keeps it on a GPU; the peak stays the plan's.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
}

int run_rank(const RunOptions& options) {
  init_mpi_rank();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int rank = world_rank();
  int code = 0;
  try {
    code = run_body(options, rank, size);
  } catch (const InputError& e) {
    // Every rank reads the same plan and fails the same way: one message is enough.
    if (rank == 0) std::fprintf(stderr, "ringmaster: %s\n", e.what());
    code = kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringmaster run: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

}  // namespace rm::exec
