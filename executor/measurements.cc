// Measurement records: JSON lines IO, the per-iteration summary, and the gather to rank 0.
#include "executor/measurements.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"
#include "planner/json_reader.h"
#include "planner/trace_events.h"

namespace rm::exec {

nlohmann::json to_json(const Measurement& m) {
  nlohmann::json j = {{"rank", m.rank},
          {"ring", m.ring},
          {"position", m.position},
          {"iteration", m.iteration},
          {"op", m.op},
          {"pass", m.backward ? "backward" : "forward"},
          {"layer", m.layer},
          {"step", m.step},
          {"kind", m.kind},
          {"block_q", m.block_q},
          {"block_kv", m.block_kv},
          {"head_dim", m.head_dim},
          {"flops", m.flops},
          {"useful_flops", m.useful_flops},
          {"bytes", m.bytes},
          {"peer", m.peer},
          {"request", m.request},
          {"start", m.start},
          {"seconds", m.seconds}};
  if (m.load1 >= 0) j["load1"] = m.load1;
  if (m.group > 0) j["group"] = m.group;
  return j;
}

Measurement collective_record(int rank, int iteration, int op, const std::string& kind, int group, double bytes,
                              double t0, double t1, double epoch) {
  Measurement m;
  m.rank = rank;
  m.iteration = iteration;
  m.op = op;
  m.layer = -1;
  m.step = -1;
  m.kind = kind;
  m.group = group;
  m.bytes = bytes;
  m.start = t0 - epoch;
  m.seconds = t1 - t0;
  return m;
}

double host_load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  double one = -1;
  if (std::fscanf(f, "%lf", &one) != 1) one = -1;
  std::fclose(f);
  return one;
}

Measurement measurement_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(where + ": expected a JSON object per line");
  const JsonReader r(j, where);
  // Ranks and positions within the GPU limit, tiles as the plan reader allows them, times up
  // to 1e6 s (11 days) and work up to 1e21 FLOPs or 2^50 bytes per op, so sums of them stay
  // finite (one record of 1e308 s once gave a profile with r2 = nan).
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  auto whole = [&](const char* key, int lo, int hi) { return static_cast<int>(r.integer(key, lo, hi)); };
  Measurement m;
  m.rank = whole("rank", 0, kMaxGpus - 1);
  m.ring = whole("ring", 0, kMaxGpus - 1);
  m.position = whole("position", 0, kMaxGpus - 1);
  m.iteration = whole("iteration", 0, kMaxInt);
  m.op = whole("op", 0, kMaxInt);
  const auto pass = r.str("pass");
  if (pass != "forward" && pass != "backward") r.fail("pass", "expected forward or backward (got '" + pass + "')");
  m.backward = pass == "backward";
  m.layer = whole("layer", -1, kMaxInt);  // -1: ops outside the layers
  m.step = whole("step", -1, kMaxInt);
  m.kind = r.str("kind");
  m.block_q = whole("block_q", 0, kMaxBlockTokens);
  m.block_kv = whole("block_kv", 0, kMaxBlockTokens);
  m.head_dim = whole("head_dim", 0, 1 << 14);
  m.flops = r.number("flops", 0, 1e21);
  m.useful_flops = r.number("useful_flops", 0, 1e21);
  m.bytes = r.number("bytes", 0, 0x1p50);
  m.peer = whole("peer", -1, kMaxGpus - 1);
  m.request = whole("request", -1, kMaxInt);
  m.start = r.number("start", -1e6, 1e6);
  m.seconds = r.number("seconds", 0, 1e6);
  if (r.has("load1")) m.load1 = r.number("load1", 0, 1e6);
  if (r.has("group")) m.group = whole("group", 1, kMaxGpus);
  return m;
}

void write_measurements_jsonl(const std::vector<Measurement>& records, const std::string& path) {
  std::string text;
  for (const Measurement& m : records) text += to_json(m).dump() + "\n";
  write_file_atomically(path, text);
}

std::vector<Measurement> read_measurements_jsonl(const std::string& path) {
  return parse_measurements_jsonl(read_input_file(path, InputKind::kMeasurements), path);
}

std::vector<Measurement> parse_measurements_jsonl(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::vector<Measurement> out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw InputError(where + ": not valid JSON");
    out.push_back(measurement_from_json(j, where));
  }
  return out;
}

std::vector<IterationSummary> summarize(const std::vector<Measurement>& records) {
  struct RankIter {
    double begin = 1e300, end = -1e300, compute = 0, wait = 0, flops = 0, useful = 0;
    double rest = 0;  // compute outside the attention kernels: a training step's, a2a's layout copies
  };
  std::map<std::pair<int, int>, RankIter> per;  // (iteration, rank)
  for (const Measurement& m : records) {
    RankIter& r = per[{m.iteration, m.rank}];
    r.begin = std::min(r.begin, m.start);
    r.end = std::max(r.end, m.start + m.seconds);
    if (m.kind == "wait" || m.kind == "all_gather" || m.kind == "reduce_scatter" ||
        m.kind == "all_reduce" || m.kind.rfind("tp_", 0) == 0 ||  // the TP group's, all waited for
        m.kind == "pp_exchange")
      r.wait += m.seconds;
    if (m.kind == "attention_forward" || m.kind == "attention_backward" ||
        m.kind == "accumulate") {
      r.compute += m.seconds;
      r.flops += m.flops;
      r.useful += m.useful_flops;
    }
    if (m.kind == "linear" || m.kind == "elementwise" || m.kind == "optimizer" || m.kind == "a2a_pack" ||
        m.kind == "a2a_unpack")
      r.rest += m.seconds;
  }
  std::vector<IterationSummary> rows;
  std::map<int, int> kernel_ranks;  // iteration -> ranks with kernel time
  for (const auto& [key, r] : per) {
    if (rows.empty() || rows.back().iteration != key.first) {
      rows.push_back({});
      rows.back().iteration = key.first;
    }
    IterationSummary& s = rows.back();
    s.flops += r.flops;
    s.useful_flops += r.useful;
    if (r.compute > 0) {
      s.kernel_flops_per_s += r.flops / r.compute;
      ++kernel_ranks[key.first];
    }
    s.step_s = std::max(s.step_s, r.end - r.begin);
    // The busiest rank is the critical path: under an imbalanced load (contiguous causal)
    // the light rank ends at the same time only because it waits for the heavy one.
    if (r.compute + r.rest > s.compute_s) {
      s.compute_s = r.compute + r.rest;
      s.exposed_comm_s = r.wait;
    }
  }
  for (IterationSummary& s : rows)
    if (kernel_ranks[s.iteration] > 0) s.kernel_flops_per_s /= kernel_ranks[s.iteration];
  return rows;
}

std::string format_summary_table(const std::vector<IterationSummary>& rows, int ranks) {
  std::ostringstream o;
  char line[256];
  o << "#  iteration      step    compute   exposed comm    comm     kernel      achieved\n"
       "#                 (ms)       (ms)           (ms)     (%)  (GFLOP/s)  (GFLOP/s/rank)\n";
  auto row = [&](const char* label, const IterationSummary& s) {
    const double pct = s.step_s > 0 ? 100.0 * s.exposed_comm_s / s.step_s : 0.0;
    const double achieved = s.step_s > 0 ? s.useful_flops / s.step_s / ranks / 1e9 : 0.0;
    std::snprintf(line, sizeof line, "%12s %9.3f  %9.3f      %9.3f  %6.1f  %9.2f  %12.2f\n",
                  label, s.step_s * 1e3, s.compute_s * 1e3, s.exposed_comm_s * 1e3, pct,
                  s.kernel_flops_per_s / 1e9, achieved);
    o << line;
  };
  IterationSummary avg;
  for (const IterationSummary& s : rows) {
    row(std::to_string(s.iteration).c_str(), s);
    avg.step_s += s.step_s / rows.size();
    avg.compute_s += s.compute_s / rows.size();
    avg.exposed_comm_s += s.exposed_comm_s / rows.size();
    avg.useful_flops += s.useful_flops / rows.size();
    avg.kernel_flops_per_s += s.kernel_flops_per_s / rows.size();
  }
  if (!rows.empty()) row("avg", avg);
  return o.str();
}

namespace {

// A training step's blocking communication on the send track, named as the simulator's
// trace names its collectives (replay_trace.cc), TP's and the pipeline's told apart; null
// for the other kinds.
const char* waited_comm_name(const std::string& kind) {
  static const std::pair<const char*, const char*> names[] = {
      {"all_gather", "all-gather"},       {"reduce_scatter", "reduce-scatter"},
      {"all_reduce", "all-reduce"},       {"tp_all_gather", "TP all-gather"},
      {"tp_reduce_scatter", "TP reduce-scatter"}, {"tp_all_to_all", "TP all-to-all"},
      {"tp_all_reduce", "TP all-reduce"}, {"pp_exchange", "pipeline exchange"}};
  for (const auto& [k, name] : names)
    if (kind == k) return name;
  return nullptr;
}

}  // namespace

void write_measurements_trace(const std::vector<Measurement>& records, const std::string& path,
                              const std::string& plan_path) {
  TraceWriter trace("measured");
  trace.set_metadata("plan", plan_path);
  trace.set_metadata("clock", "seconds since each rank left the barrier before the timed loop");
  for (const Measurement& m : records) {
    TraceEvent e;
    if (m.kind == "send" || m.kind == "recv") {
      e.name = "transfer";  // the simulator's name, so the two timelines line up
      e.track = m.kind == "send" ? TraceTrack::kSend : TraceTrack::kRecv;
      e.peer = m.peer;
      e.bytes = m.bytes;
    } else if (m.kind == "attention_forward" || m.kind == "attention_backward" ||
               m.kind == "accumulate" || m.kind == "a2a_pack" || m.kind == "a2a_unpack") {
      e.name = m.kind;
      e.flops = m.flops;
    } else if (const char* name = waited_comm_name(m.kind)) {  // the time blocked in it
      e.name = name;
      e.track = TraceTrack::kSend;
      e.bytes = m.bytes;
    } else {
      continue;  // wait, alloc, free: no work of their own; a step's linear and elementwise
                 // records are its sums, not spans
    }
    e.gpu = m.rank;
    e.start_s = m.start;
    e.duration_s = m.seconds;
    e.layer = m.layer;
    e.step = m.step;
    trace.add(std::move(e));
  }
  trace.write(path);
}

std::vector<Measurement> gather_measurements(const std::vector<Measurement>& mine) {
  std::string text;
  const double load = host_load_average();  // each rank its own host's
  for (Measurement m : mine) {
    m.load1 = load;
    text += to_json(m).dump() + "\n";
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int len = static_cast<int>(text.size());
  std::vector<int> lens(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < size; ++r) {
      displs[r] = total;
      total += lens[r];
    }
    all.resize(static_cast<size_t>(total));
  }
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<Measurement> out;
  if (rank != 0) return out;
  std::istringstream in(all);
  std::string line;
  while (std::getline(in, line))
    out.push_back(measurement_from_json(nlohmann::json::parse(line), "gathered measurements"));
  std::sort(out.begin(), out.end(), [](const Measurement& a, const Measurement& b) {
    return std::tie(a.iteration, a.rank, a.op) < std::tie(b.iteration, b.rank, b.op);
  });
  return out;
}

}  // namespace rm::exec
