// `ringmaster calibrate --backend cpu|cuda [--np P] -o profile.yaml`: micro-benchmarks
// through the executor (executor/calibration_bench.h), then fits.
// `ringmaster calibrate --from m.jsonl [more.jsonl ...] -o profile.yaml`: refits from
// measurements `ringmaster run --measurements` (or calibrate --measurements) wrote.
//
// Both end in planner/profile_fit.h's fit_profile; the table of fits goes to stdout,
// progress to stderr, the profile to -o (temp file + rename). Outside an MPI job the
// benchmark form replaces itself with `mpirun -np P ringmaster calibrate ...` (like
// `run`); rank 0 gathers every rank's records, fits and writes.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "cli/table.h"
#include "executor/backend.h"
#include "executor/calibration_bench.h"
#include "executor/measurements.h"
#include "executor/run.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/profile.h"
#include "planner/profile_fit.h"
#include "planner/spec_library.h"

namespace rm::cli {
namespace {

struct CalibrateOptions {
  std::string backend = "cpu";
  int np = 2;
  std::vector<std::string> from;
  std::string output;
  std::string topology = "cpu-local";
  std::string model = "tiny";
  std::string grid;  // small | full; default: small under CI=true
  std::string measurements;
};

bool small_grid(const CalibrateOptions& o) {
  if (!o.grid.empty()) return o.grid == "small";
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// A fit this poor is reported, not written silently: below this R^2, or above this mean
// |residual|, the curve does not describe the points (a busy machine or a kernel the model
// misses). Our thresholds: an idle machine's fits reach R^2 >= 0.98 and MAPE <= 5 %.
constexpr double kPoorR2 = 0.9;
constexpr double kPoorMape = 0.15;

// The load average over the last minute and the cores: how busy the machine was while it
// measured ("" where /proc/loadavg is missing).
std::string machine_load() {
  const double one = exec::host_load_average();
  if (one < 0) return "";
  return "load average " + fixed(one, 2) + " over the last minute on " +
         std::to_string(std::thread::hardware_concurrency()) + " cores";
}

// --from: the load the ranks recorded with their measurements (the range over ranks and
// files), or that they recorded none.
std::string recorded_load(const std::vector<exec::Measurement>& records) {
  double lo = 1e300, hi = -1;
  for (const auto& m : records) {
    if (m.load1 < 0) continue;
    lo = std::min(lo, m.load1);
    hi = std::max(hi, m.load1);
  }
  if (hi < 0) return "not recorded in these files (written before measurements carried load1)";
  return "load average " + fixed(lo, 2) + (hi > lo ? "-" + fixed(hi, 2) : "") +
         " over the last minute, as the ranks recorded it (this machine has " +
         std::to_string(std::thread::hardware_concurrency()) + " cores)";
}

void print_fits(const Profile& p, const std::vector<std::string>& notes) {
  Table fits({{"fitted curve", "", Align::kLeft},
              {"points", "", Align::kRight},
              {"R^2", "", Align::kRight},
              {"MAPE", "%", Align::kRight},
              {"bias", "% (meas-pred)/pred", Align::kRight},
              {"max |resid|", "%", Align::kRight}});
  for (const auto& [name, q] : p.fits)
    fits.add_row({name, std::to_string(q.points), fixed(q.r2, 4), fixed(q.mape * 100, 2),
                  fixed(q.mean_residual * 100, 2), fixed(q.max_abs_residual * 100, 2)});
  std::fputs(fits.render().c_str(), stdout);
  for (const auto& [name, q] : p.fits)
    if (q.points > 1 && (q.r2 < kPoorR2 || q.mape > kPoorMape))
      std::fprintf(stderr,
                   "calibrate: warning: the %s fit is poor (R^2 %.3f, MAPE %.1f %%, %d points): a busy "
                   "machine or a kernel the model misses; check the profile before planning with it\n",
                   name.c_str(), q.r2, 100 * q.mape, q.points);

  Table params({{"parameter", "", Align::kLeft}, {"value", "", Align::kRight}, {"unit", "", Align::kLeft}});
  params.add_row({"attention max_efficiency", sig(p.attention.max_efficiency, 4), "of peak"});
  params.add_row({"attention half_flops", sig(p.attention.half_flops, 4), "FLOP per tile"});
  params.add_row({"attention backward_factor", sig(p.attention.backward_factor, 4), "x forward time"});
  params.add_row({"attention peak reached", sig(p.peak_flops * p.attention.max_efficiency * 1e-9, 4), "GFLOP/s"});
  params.add_row({"gemm_efficiency", sig(p.gemm_efficiency, 4), "of peak"});
  params.add_row({"overlap_interference", sig(p.overlap_interference, 4), "x compute time"});
  params.add_row({"transfer_overlap", sig(p.transfer_overlap, 4), "of transfer hidden"});
  params.add_row({"lockstep_jitter", sig(p.lockstep_jitter, 4), "spread of the GPUs' speeds (sigma)"});
  for (const auto& [cls, l] : p.links) {
    params.add_row({std::string("link ") + to_string(cls) + " alpha", sig(l.alpha_s * 1e6, 4), "us"});
    params.add_row({std::string("link ") + to_string(cls) + " beta", sig(l.beta_bytes_per_s * 1e-9, 4), "GB/s"});
  }
  if (p.collectives.beta_bytes_per_s > 0) {
    params.add_row({"collectives alpha", sig(p.collectives.alpha_s * 1e6, 4), "us per pass"});
    params.add_row({"collectives busbw", sig(p.collectives.beta_bytes_per_s * 1e-9, 4), "GB/s"});
    params.add_row({"collectives overlap", sig(p.collective_overlap, 4), "of collective hidden"});
  }
  std::fputs("\n", stdout);
  std::fputs(params.render().c_str(), stdout);
  for (const auto& n : notes) std::fprintf(stderr, "calibrate: note: %s\n", n.c_str());
}

// The executor's records as the profile fit reads them; the records of one run (one file).
// A collective spans the group its record names (files from before the field: all the
// run's ranks, as FSDP sharded then).
std::vector<CalibrationRecord> calibration_records(const std::vector<exec::Measurement>& records, int run) {
  std::vector<CalibrationRecord> out;
  out.reserve(records.size());
  int ranks = 0;
  for (const exec::Measurement& m : records) ranks = std::max(ranks, m.rank + 1);
  for (const exec::Measurement& m : records)
    out.push_back({.rank = m.rank,
                   .iteration = m.iteration,
                   .kind = m.kind,
                   .block_q = m.block_q,
                   .block_kv = m.block_kv,
                   .head_dim = m.head_dim,
                   .flops = m.flops,
                   .bytes = m.bytes,
                   .peer = m.peer,
                   .group = m.group > 0 ? m.group : ranks,
                   .start = m.start,
                   .seconds = m.seconds,
                   .run = run,
                   .ring = m.ring,
                   .position = m.position,
                   .layer = m.layer,
                   .step = m.step});
  return out;
}

void fit_and_write(const std::vector<CalibrationRecord>& records, const Topology& topo,
                   const ProfileHardware& hw, const std::vector<std::string>& sources,
                   const std::string& output) {
  std::vector<std::string> notes;
  const Profile p = fit_profile(records, topo, hw, sources, &notes);
  print_fits(p, notes);
  write_profile(p, output);
  std::fprintf(stderr, "calibrate: wrote %s\n", output.c_str());
}

// --from: no MPI, no benchmarks.
void refit(const CalibrateOptions& o) {
  const Topology topo = load_topology(o.topology);
  std::vector<exec::Measurement> records;
  std::vector<CalibrationRecord> fitted;  // per file: a collective's group is its run's ranks
  std::vector<std::string> sources;
  int ranks = 0;
  for (const auto& f : o.from) {
    auto r = exec::read_measurements_jsonl(f);
    std::fprintf(stderr, "calibrate: %s: %zu records\n", f.c_str(), r.size());
    for (const auto& m : r) {
      // The fit routes every transfer over the topology: a rank outside it is the file's error.
      if (std::max(m.rank, m.peer) >= topo.max_gpus()) {
        fail_input(f, "rank", "record of rank " + std::to_string(m.rank) + " (peer " + std::to_string(m.peer) +
                                  ") is outside topology " + topo.name + " (" + std::to_string(topo.max_gpus()) +
                                  " GPUs); give --topology the machine that was measured");
      }
      ranks = std::max(ranks, m.rank + 1);
    }
    const std::vector<CalibrationRecord> c = calibration_records(r, static_cast<int>(sources.size()));
    fitted.insert(fitted.end(), c.begin(), c.end());
    records.insert(records.end(), r.begin(), r.end());
    sources.push_back("measurements: " + f);
  }
  ProfileHardware hw = local_cpu_hardware(ranks);
  if (topo.intra.kind != IntraKind::kSharedMemory) {
    // GPU records refitted here: the device is the topology's, not this host's CPU.
    hw.device_name = topo.gpu.name;
    hw.backend = "cuda";
  }
  std::fprintf(stderr, "calibrate: machine during the measurements: %s\n", recorded_load(records).c_str());
  fit_and_write(fitted, topo, hw, sources, o.output);
}

// One rank of the benchmark job.
int benchmark_rank(const CalibrateOptions& o) {
  const Topology topo = load_topology(o.topology);
  const ModelSpec model = load_model(o.model);
  exec::init_mpi_rank();  // yielding waits, like `run`: otherwise the exchanges time spinning
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  try {
    exec::CalibrationGrid grid =
        exec::CalibrationGrid::standard(small_grid(o), model.hidden, model.ffn_hidden, o.backend == "cuda");
    grid.heads = model.heads;
    grid.kv_heads = model.kv_heads;
    if (rank == 0)
      std::fprintf(stderr, "calibrate: %s backend, %d ranks, %s grid, shapes of model %s\n",
                   o.backend.c_str(), size, small_grid(o) ? "small" : "full", model.name.c_str());
    auto mine = exec::run_calibration_benchmarks(o.backend, grid, [](const std::string& s) {
      std::fprintf(stderr, "calibrate: %s\n", s.c_str());
    });
    auto all = exec::gather_measurements(mine);
    if (rank == 0) {
      if (!o.measurements.empty()) exec::write_measurements_jsonl(all, o.measurements);
      const std::string load = machine_load();
      if (!load.empty()) std::fprintf(stderr, "calibrate: machine during the measurements: %s\n", load.c_str());
      ProfileHardware hw = local_cpu_hardware(size);
      hw.backend = o.backend;
      if (o.backend == "cuda") hw.device_name = topo.gpu.name;
      const std::string source = "micro-benchmarks: ringmaster calibrate --backend " + o.backend +
                                 " --np " + std::to_string(size) + " --model " + model.name +
                                 " (" + (small_grid(o) ? "small" : "full") + " grid)";
      fit_and_write(calibration_records(all, 0), topo, hw, {source}, o.output);
    }
  } catch (const InputError& e) {
    if (rank == 0) std::fprintf(stderr, "ringmaster: %s\n", e.what());
    code = kExitBadInput;
  }
  MPI_Finalize();
  return code;
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure kernels and links (or refit from run measurements) and write a profile");
  auto o = std::make_shared<CalibrateOptions>();
  cmd->add_option("--backend", o->backend, "cpu (MPI + Eigen) or cuda (NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--np", o->np, "MPI ranks for the benchmarks (links need 2 or more)")
      ->check(CLI::Range(1, kMaxGpus))
      ->capture_default_str();
  cmd->add_option("--from", o->from, "refit from these measurements files instead of benchmarking")
      ->expected(1, -1);
  cmd->add_option("-o,--output", o->output, "profile YAML to write")->required();
  cmd->add_option("--topology", o->topology,
                  "topology whose device and link classes the profile covers")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "model whose heads and layer shapes the benchmarks use")
      ->capture_default_str();
  cmd->add_option("--grid", o->grid, "benchmark grid: small (seconds) or full (default: small if CI=true)")
      ->check(CLI::IsMember({"small", "full"}));
  cmd->add_option("--measurements", o->measurements,
                  "also write the benchmark records (measurements JSONL) for later --from refits");
  cmd->callback([o] {
    if (!o->from.empty()) {
      check_output_path(o->output, "--output");
      refit(*o);
      return;
    }
    if (under_mpi()) {
      const int code = benchmark_rank(*o);
      if (code != 0) std::exit(code);
      return;
    }
    check_output_path(o->output, "--output");
    check_output_path(o->measurements, "--measurements");
    exec::check_backend_available(o->backend);
    const Topology topo = load_topology(o->topology);  // bad names fail before mpirun
    load_model(o->model);
    if (o->backend == "cuda" && topo.intra.kind == IntraKind::kSharedMemory)
      fail_input("--topology", o->topology,
                 "is a CPU topology; name the GPU topology the cuda profile is for");
    relaunch_under_mpirun(o->np, own_arguments());
  });
}

}  // namespace rm::cli
