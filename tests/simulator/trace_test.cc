// The simulated timeline: Chrome trace-event JSON that Perfetto opens, a process per GPU
// with compute, send and recv tracks whose complete events never overlap on one track.
#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "planner/trace_events.h"
#include "simulator/simulate.h"
#include "tests/simulator/test_jobs.h"

using namespace rm;

TEST_CASE("simulate --trace: valid trace-event JSON, one process per GPU, compute/send/recv tracks") {
  const Topology topo = load_topology(kStudyTopology);
  const ModelSpec model = load_model(kDefaultModel);
  const Fabric fabric(topo, 16);
  const CostParams cost = CostParams::from_topology(topo);
  const Plan plan =
      Planner(model, fabric, cost).best_ring_plan(make_job(topo, 16, 131072, Workload::kLayer), {});
  const std::string path = "/tmp/rm_trace_test_" + std::to_string(::getpid()) + ".json";
  sim::SimulateOptions so;
  so.replay.trace_path = path;
  const sim::Simulation s = sim::simulate_plan(plan, model, fabric, cost, so);

  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  ::unlink(path.c_str());
  REQUIRE(doc.contains("traceEvents"));
  REQUIRE(doc["traceEvents"].is_array());
  std::set<int> processes;
  std::map<int, std::set<std::string>> tracks;  // pid -> thread names
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  double last_end = 0;
  for (const auto& e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") processes.insert(e.at("pid").get<int>());
    if (ph == "M" && e.at("name") == "thread_name") {
      tracks[e.at("pid").get<int>()].insert(e.at("args").at("name").get<std::string>());
    }
    if (ph != "X") continue;
    const double ts = e.at("ts"), dur = e.at("dur");
    CHECK(dur >= 0);
    spans[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back({ts, ts + dur});
    last_end = std::max(last_end, ts + dur);
  }
  CHECK(processes.size() == 16);
  for (int g = 0; g < 16; ++g) {
    CHECK(tracks[g].count("compute") == 1);
    CHECK(tracks[g].count("send") == 1);
    CHECK(tracks[g].count("recv") == 1);
  }
  // Complete events on one track follow each other (lanes take the overlaps).
  for (auto& [track, v] : spans) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i) CHECK(v[i].first >= v[i - 1].second - 2e-3);  // ns rounding of ts and dur
  }
  // The timeline ends with the replay (microseconds; the last waits are not events).
  CHECK(last_end <= 1e6 * s.replay.replayed_time_s + 1e-3);
  CHECK(last_end > 0.95e6 * s.replay.replayed_time_s);
}

TEST_CASE("trace writer: names are escaped, an unwritable path is an InputError") {
  TraceWriter w("a \"quoted\" title");
  w.add({0, TraceTrack::kCompute, "gemm\\1", 0.0, 1e-3});
  w.set_metadata("plan", "line\nbreak");
  const nlohmann::json doc = nlohmann::json::parse(w.to_json());
  CHECK(doc["metadata"]["title"] == "a \"quoted\" title");
  CHECK(doc["metadata"]["plan"] == "line\nbreak");
  CHECK_THROWS_AS(w.write("/nonexistent-folder/trace.json"), InputError);
}
