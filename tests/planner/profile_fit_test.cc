// fit_profile on synthetic records laid out like a ring run's: which record feeds which fit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "planner/profile_fit.h"
#include "planner/spec_library.h"

namespace rm {
namespace {

constexpr double kPeak = 8e10;  // cpu-local's peak (topologies/cpu-local.yaml)
constexpr double kEff = 0.25, kHalf = 5e4, kBwd = 2.2, kInterference = 1.1;
constexpr int kD = 64;

double kernel_s(int bq, int bkv, double fwd_flops) {
  const double tile = 4.0 * bq * bkv * kD;
  return fwd_flops / (kPeak * kEff * tile / (tile + kHalf));
}

CalibrationRecord kernel(int iteration, bool backward, int tile, double start, double fwd_flops, bool in_flight) {
  CalibrationRecord m;
  m.iteration = iteration;
  m.kind = backward ? "attention_backward" : "attention_forward";
  m.block_q = m.block_kv = tile;
  m.head_dim = kD;
  m.flops = fwd_flops * (backward ? kBackwardFlopsFactor : 1.0);
  m.start = start;
  m.seconds = kernel_s(tile, tile, fwd_flops) * (backward ? kBwd : 1.0) * (in_flight ? kInterference : 1.0);
  return m;
}

}  // namespace

TEST_CASE("fit_profile: ring-run records where every backward kernel has a transfer in flight") {
  const Topology topo = load_topology("cpu-local");
  std::vector<CalibrationRecord> records;
  int it = 0;
  for (int tile : {16, 32, 64, 128}) {
    const double flops = 1e8 * (1 + tile / 64.0);
    // Forward: step 0 with the next block in flight (a recv spanning the kernel), step 1 alone.
    CalibrationRecord f0 = kernel(it, false, tile, 0.0, flops, true);
    CalibrationRecord recv;
    recv.iteration = it;
    recv.kind = "recv";
    recv.bytes = 1 << 20;
    recv.peer = 1;
    recv.start = 0.0;
    recv.seconds = f0.seconds + 1e-4;
    CalibrationRecord f1 = kernel(it, false, tile, recv.seconds + 1e-3, flops, false);
    // Backward: the transfer of K,V and dK,dV spans the kernel too.
    const double b_start = f1.start + f1.seconds + 1e-3;
    CalibrationRecord b0 = kernel(it, true, tile, b_start, flops, true);
    CalibrationRecord brecv = recv;
    brecv.start = b_start;
    brecv.seconds = b0.seconds + 1e-4;
    records.insert(records.end(), {f0, recv, f1, b0, brecv});
    ++it;
  }
  std::vector<std::string> notes;
  const Profile p = fit_profile(records, topo, local_cpu_hardware(2), {"test"}, &notes);
  CHECK(p.attention.max_efficiency == doctest::Approx(kEff).epsilon(1e-6).scale(0));
  CHECK(p.attention.half_flops == doctest::Approx(kHalf).epsilon(1e-6).scale(0));
  CHECK(p.overlap_interference == doctest::Approx(kInterference).epsilon(1e-6).scale(0));
  // Fitted on the in-flight backward kernels over curve x interference, not left at 2.5.
  CHECK(p.attention.backward_factor == doctest::Approx(kBwd).epsilon(1e-6).scale(0));
  REQUIRE(p.fits.count("attention_backward") == 1);
  CHECK(p.fits.at("attention_backward").mape < 1e-9);
}

}  // namespace rm

namespace rm {

TEST_CASE("fit_profile: a training step's linear, elementwise and optimizer records set their rates") {
  const Topology topo = load_topology("cpu-local");
  std::vector<CalibrationRecord> records;
  auto add = [&](int it, const char* kind, double flops, double bytes, double seconds) {
    CalibrationRecord m;
    m.iteration = it;
    m.kind = kind;
    m.flops = flops;
    m.bytes = bytes;
    m.seconds = seconds;
    records.push_back(m);
  };
  // A kernel alone, so the attention curve has something to fit.
  add(0, "attention_forward", 1e8, 0, 1e8 / (kPeak * 0.3));
  records.back().block_q = records.back().block_kv = 64;
  records.back().head_dim = kD;
  for (int it = 0; it < 3; ++it) {
    const double scale = 1 + it;  // steps of different sizes, one rate each
    add(it, "linear", 4e9 * scale, 0, 4e9 * scale / (kPeak * 0.5));
    add(it, "elementwise", 0, 2e8 * scale, 2e8 * scale / 3e9);
    add(it, "optimizer", 0, 3e7 * scale, 3e7 * scale / 5e8);
    add(it, "step", 0, 0, 1.0);  // ignored by the fit
  }
  std::vector<std::string> notes;
  const Profile p = fit_profile(records, topo, {"host", "test cpu", 2, "cpu"}, {"test"}, &notes);
  CHECK(p.gemm_efficiency == doctest::Approx(0.5).epsilon(1e-6).scale(0));
  CHECK(p.hbm_bytes_per_s == doctest::Approx(3e9).epsilon(1e-6).scale(0));
  CHECK(p.optimizer_bytes_per_s == doctest::Approx(5e8).epsilon(1e-6).scale(0));
  CHECK(p.fits.at("elementwise").points == 3);
  CHECK(p.fits.at("optimizer").points == 3);
  CostParams params = CostParams::from_topology(topo);
  apply_profile(p, params);
  CHECK(params.optimizer_s(1e6, 12) == doctest::Approx(30e6 / 5e8).epsilon(1e-6).scale(0));
  // A profile written and read back keeps both rates.
  const Profile back = parse_profile(profile_to_yaml_string(p), "p.yaml");
  CHECK(back.hbm_bytes_per_s == doctest::Approx(3e9).epsilon(1e-6).scale(0));
  CHECK(back.optimizer_bytes_per_s == doctest::Approx(5e8).epsilon(1e-6).scale(0));
}

TEST_CASE("fit_profile: an all-to-all's pack and unpack records feed the HBM rate") {
  // A run of an a2a plan: no elementwise records, only the layout copies (bytes = HBM bytes
  // read and written, as the ring loop records them).
  const Topology topo = load_topology("cpu-local");
  std::vector<CalibrationRecord> records(1);
  records[0].kind = "attention_forward";  // a kernel alone, for the curve
  records[0].flops = 1e8;
  records[0].seconds = 1e8 / (kPeak * 0.3);
  records[0].block_q = records[0].block_kv = 64;
  records[0].head_dim = kD;
  for (int it = 0; it < 2; ++it)
    for (const char* kind : {"a2a_pack", "a2a_unpack"}) {
      CalibrationRecord m;
      m.iteration = it;
      m.kind = kind;
      m.bytes = m.flops = 4e7 * (1 + it);
      m.seconds = m.bytes / 6e9;
      records.push_back(m);
    }
  const Profile p = fit_profile(records, topo, {"host", "test cpu", 2, "cpu"}, {"test"}, nullptr);
  CHECK(p.hbm_bytes_per_s == doctest::Approx(6e9).epsilon(1e-6).scale(0));
  CHECK(p.fits.at("elementwise").points == 4);
}

}  // namespace rm

namespace rm {

TEST_CASE("fit_profile: the collectives' alpha, bus bandwidth and overlap from a step's records") {
  const Topology topo = load_topology("cpu-local");
  std::vector<CalibrationRecord> records;
  auto add = [&](const char* kind, double bytes, double seconds) {
    CalibrationRecord m;
    m.kind = kind;
    m.bytes = bytes;
    m.seconds = seconds;
    m.group = 4;
    records.push_back(m);
  };
  records.push_back({.kind = "attention_forward", .block_q = 64, .block_kv = 64, .head_dim = kD,
                     .flops = 1e8, .seconds = 1e8 / (kPeak * 0.3)});
  // 50 us per pass and 2 GB/s bus bandwidth: a unit of U bytes over 4 ranks moves 3/4 U
  // per pass. Blocking reduce-scatters and an all-reduce (two passes) fix the line;
  // prefetched all-gathers that waited a quarter of their time leave 3/4 hidden.
  const double alpha = 50e-6, busbw = 2e9;
  auto t = [&](double unit, int passes) { return passes * (alpha + 0.75 * unit / busbw); };
  for (double unit : {1e6, 4e6}) {
    add("reduce_scatter", unit, t(unit, 1));
    add("all_gather", unit, 0.25 * t(unit, 1));
  }
  add("all_reduce", 2e6, t(2e6, 2));
  std::vector<std::string> notes;
  const Profile p = fit_profile(records, topo, {"host", "test cpu", 4, "cpu"}, {"test"}, &notes);
  CHECK(p.collectives.alpha_s == doctest::Approx(alpha).epsilon(1e-6).scale(0));
  CHECK(p.collectives.beta_bytes_per_s == doctest::Approx(busbw).epsilon(1e-6).scale(0));
  // Blocked: t1 + t4 + 2·t2 + (t1 + t4) / 4 of 2·(t1 + t4) + 2·t2 fitted.
  const double t1 = t(1e6, 1), t4 = t(4e6, 1), t2 = t(2e6, 2);
  CHECK(p.collective_overlap == doctest::Approx(1 - (1.25 * (t1 + t4) + t2) / (2 * (t1 + t4) + t2)).epsilon(1e-6).scale(0));
  CHECK(p.fits.at("collectives").points == 3);
  // Applied, a group collective of 4 over this fabric costs the fitted line.
  CostParams params = CostParams::from_topology(topo);
  apply_profile(p, params);
  CHECK(fitted_collective_s(params.collectives, 3, 1e6 / 4, 1) == doctest::Approx(t1).epsilon(1e-6).scale(0));
  CHECK(params.collective_exposed_s(t1, t1 / 2) == doctest::Approx(t1 - p.collective_overlap * t1 / 2));
  // Written and read back.
  const Profile back = parse_profile(profile_to_yaml_string(p), "p.yaml");
  CHECK(back.collectives.beta_bytes_per_s == doctest::Approx(busbw).epsilon(1e-6).scale(0));
  CHECK(back.collective_overlap == doctest::Approx(p.collective_overlap).epsilon(1e-6).scale(0));
  // Records without a group (not from a run of the executor) are not fitted.
  for (auto& r : records) r.group = 0;
  CHECK(fit_profile(records, topo, {"host", "test cpu", 4, "cpu"}, {"test"}, &notes).collectives.beta_bytes_per_s == 0);
}

}  // namespace rm

namespace rm {

TEST_CASE("fit_profile: the lockstep jitter from a GPU run's ring kernels, per run and ring, by position") {
  const Topology topo = load_topology("cpu-local");
  std::vector<CalibrationRecord> records;
  // Two positions whose speeds differ by 1 +- a (a spread of a sqrt(2) = 0.05), the same in
  // every step and pass; the second run's kernels twice as long, which would read as spread
  // were runs pooled into one ring.
  const double a = 0.05 / std::sqrt(2.0);
  for (int run : {0, 1}) {
    for (int it = 0; it < 3; ++it) {
      for (int rank : {0, 1}) {
        for (int step : {0, 1}) {
          for (bool backward : {false, true}) {
            CalibrationRecord m = kernel(it, backward, 64, step, 1e8, false);
            m.rank = m.position = rank;
            m.run = run;
            m.ring = 0;
            m.step = step;
            m.seconds *= (1 + run) * (1 + (rank == 0 ? a : -a));
            records.push_back(m);
          }
        }
      }
    }
  }
  ProfileHardware gpus = local_cpu_hardware(2);
  gpus.backend = "cuda";
  std::vector<std::string> notes;
  Profile p = fit_profile(records, topo, gpus, {"test"}, &notes);
  CHECK(p.lockstep_jitter == doctest::Approx(0.05).epsilon(1e-9));
  REQUIRE(p.fits.count("lockstep") == 1);
  CHECK(p.fits.at("lockstep").points == 2);  // one ring in each run
  // The cpu backend's ranks share cores: no fit, and a note saying why.
  notes.clear();
  p = fit_profile(records, topo, local_cpu_hardware(2), {"test"}, &notes);
  CHECK(p.lockstep_jitter == 0);
  CHECK(p.fits.count("lockstep") == 0);
  CHECK(std::any_of(notes.begin(), notes.end(), [](const std::string& n) { return n.find("cpu backend") == 0; }));
  // Benchmark records (no ring) leave it at 0, with a note.
  for (CalibrationRecord& m : records) m.ring = -1;
  notes.clear();
  p = fit_profile(records, topo, gpus, {"test"}, &notes);
  CHECK(p.lockstep_jitter == 0);
  CHECK(p.fits.count("lockstep") == 0);
  CHECK(std::find(notes.begin(), notes.end(),
                  "no ring was timed on two positions or more over two steps or more: lockstep_jitter = 0") != notes.end());
}

}  // namespace rm
