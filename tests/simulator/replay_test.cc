// The replay's message matching: by posting order on each directed link, as every
// transport pairs messages (the message contract of op_list.h), with both ends checked;
// a group's collectives run in the order posted (one NCCL communicator's); and the ops
// that take no time (kBeginPass, kOwnGrad).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "planner/schedule.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "simulator/free_walk.h"
#include "simulator/message_matching.h"
#include "simulator/replay.h"
#include "tests/simulator/test_jobs.h"

using namespace rm;

namespace {

// A 4-GPU flat ring, attention forward and backward, on one NVSwitch node.
struct FlatRing {
  Topology topo = load_topology("a100-nvlink-box");
  ModelSpec model = load_model(kDefaultModel);
  Fabric fabric{topo, 4};
  CostParams cost = CostParams::from_topology(topo);
  OpSchedule schedule;

  FlatRing() {
    SearchPins pins;
    pins.cp = 4;
    pins.schedule = Schedule::kFlat;
    pins.load_balance = LoadBalance::kZigzag;
    const Job job = make_job(topo, 4, 32768, Workload::kAttention);
    const Plan plan = Planner(model, fabric, cost).best_ring_plan(job, pins);
    schedule = generate_schedule(plan, model, fabric);
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// Swaps the first two receives on one link that one post holds (same phase, different
// sizes: a backward step's K,V and the accumulator, both from the ring predecessor).
// Returns the link as "link src -> dst".
std::string swap_two_receives(OpSchedule& s, int gpu) {
  auto& ops = s.ranks[gpu].ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    for (size_t j = i + 1; j < ops.size() && ops[j].phase == ops[i].phase; ++j) {
      const Op& a = ops[i];
      const Op& b = ops[j];
      if (a.kind == OpKind::kRecv && b.kind == OpKind::kRecv && a.peer == b.peer &&
          a.bytes != b.bytes) {
        std::swap(ops[i], ops[j]);
        return "link " + std::to_string(b.peer) + " -> " + std::to_string(gpu);
      }
    }
  }
  return "";
}

}  // namespace

TEST_CASE("replay refuses a schedule whose two receives on one link were swapped") {
  FlatRing f;
  REQUIRE(sim::replay(f.schedule, f.fabric, f.cost).time_s > 0);
  const std::string link = swap_two_receives(f.schedule, 1);
  REQUIRE(link == "link 0 -> 1");
  const std::string e = error_of([&] { sim::replay(f.schedule, f.fabric, f.cost); });
  CAPTURE(e);
  CHECK(e.find("schedule breaks the message contract: " + link + ", message ") == 0);
  CHECK(e.find("the sender posts tag") != std::string::npos);
  // The walks match by posting order too, and check both ends at run time: the free walk
  // on its own meets the swapped pair and names it as the transports would.
  const std::string walk = error_of([&] { sim::free_comm_time(f.schedule, f.fabric, f.cost); });
  CAPTURE(walk);
  CHECK(walk.find("message contract broken on " + link + ", message ") == 0);
}

TEST_CASE("messages pair by posting order on a link, whatever their tags, and both ends must agree") {
  sim::MessageTable<int> table(2);
  int made = 0;
  auto make = [&] { return made++; };
  // Two sends 0 -> 1 with tags 9 and 3, then their receives in the same order: the n-th
  // send meets the n-th receive.
  const sim::MessageEnd send9{0, 1, true, false, 9, 100}, send3{0, 1, true, false, 3, 50};
  const sim::MessageEnd recv9{0, 1, false, false, 9, 100}, recv3{0, 1, false, false, 3, 50};
  CHECK(table.post(send9, make).first);
  CHECK(table.post(send3, make).first);
  const auto m0 = table.post(recv9, make);
  const auto m1 = table.post(recv3, make);
  CHECK(!m0.first);
  CHECK(m0.value == 0);
  CHECK(!m1.first);
  CHECK(m1.value == 1);
  // Receives posted in the other order: the first receive meets the first send and names
  // both ends.
  CHECK(table.post(send9, make).first);
  CHECK(error_of([&] { table.post(recv3, make); }) ==
        "message contract broken on link 0 -> 1, message 2: the sender posted tag 9 (100 bytes), "
        "the receiver expects tag 3 (50 bytes)");
  // A collective's flows pair by the collective's sequence number (its tag).
  const sim::MessageEnd out{1, 0, true, true, 4, 80}, in{1, 0, false, true, 4, 80};
  CHECK(table.post(in, make).first);
  CHECK(!table.post(out, make).first);
}

TEST_CASE("a GPU's collectives on one group run one after another, as NCCL runs a communicator's") {
  // Each of 4 GPUs posts two all-gathers on their group, waits for the first, computes as
  // long as one gather takes, then waits for the second. In order, the first ends after one
  // gather's time and the compute hides the second: two gathers' time in all. Sharing the
  // links, as the replay did before, both end after two and the compute comes on top: three.
  const Topology topo = load_topology("a100-nvlink-box");
  const Fabric fabric(topo, 4);
  const CostParams cost = CostParams::from_topology(topo);
  auto schedule = [&](bool two, double compute_s) {
    OpSchedule s;
    s.groups = {{0, 1, 2, 3}};
    for (int g = 0; g < 4; ++g) {
      RankSchedule r;
      r.gpu = g;
      auto collective = [&](int request) {
        Op op;
        op.kind = OpKind::kCollective;
        op.group = 0;
        op.tag = request;
        op.request = request;
        op.bytes = 256e6;  // each member's shard: 0.77 GB gathered
        op.layer = -1;
        r.ops.push_back(op);
      };
      auto wait = [&](int request) {
        Op op;
        op.kind = OpKind::kWait;
        op.request = request;
        op.layer = -1;
        r.ops.push_back(op);
      };
      collective(0);
      if (two) collective(1);
      wait(0);
      if (compute_s > 0) {
        Op op;
        op.flops = op.useful_flops = compute_s * cost.peak_flops;
        op.efficiency = 1;
        op.layer = -1;
        r.ops.push_back(op);
      }
      if (two) wait(1);
      s.ranks.push_back(r);
    }
    return s;
  };
  const double one = sim::replay(schedule(false, 0), fabric, cost).time_s;
  REQUIRE(one > 1e-3);
  const double both = sim::replay(schedule(true, one), fabric, cost).time_s;
  CAPTURE(one);
  CHECK(both / one == doctest::Approx(2).epsilon(0.02).scale(0));  // sharing gave 3.00
}

TEST_CASE("flows share a link equally whatever their routes' latencies, as RDMA's credits share it") {
  // Into GPU 0's NIC on 4 DGX A100 nodes: 240 MB from GPU 24 (its rail: NIC to NIC) and
  // 240 MB from GPU 28 (another rail: through both leaves' spine links, twice the latency).
  // GPU 0 waits for the first, computes 10 ms, then waits for the second. Shared equally,
  // both arrive after 2 x 240 MB at the NIC's rate and the compute follows: 30 ms. SimGrid's
  // CM02 weights a share by the route's latency (TCP's round-trip bias): the short route's
  // flow got 2/3 of the NIC, arrived at 15 ms and the compute hid the other (25 ms).
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 32);
  const CostParams cost = CostParams::from_topology(topo);
  REQUIRE(fabric.route(28, 0).size() == 2 * fabric.route(24, 0).size());
  OpSchedule s;
  s.ranks.resize(32);
  for (int g = 0; g < 32; ++g) s.ranks[g].gpu = g;
  constexpr double kBytes = 240e6, kCompute = 0.010;
  auto op = [](OpKind kind, int peer, int request) {
    Op o;
    o.kind = kind;
    o.peer = peer;
    o.request = request;
    o.bytes = kBytes;
    o.layer = -1;
    if (kind != OpKind::kWait) o.phase = 0;  // each link's one message, posted together
    return o;
  };
  for (int src : {24, 28}) {
    s.ranks[src].ops = {op(OpKind::kSend, 0, 0), op(OpKind::kWait, -1, 0)};
    s.ranks[0].ops.push_back(op(OpKind::kRecv, src, src));
  }
  s.ranks[0].ops.push_back(op(OpKind::kWait, -1, 24));
  Op compute;
  compute.flops = compute.useful_flops = kCompute * cost.peak_flops;
  compute.efficiency = 1;
  compute.layer = -1;
  s.ranks[0].ops.push_back(compute);
  s.ranks[0].ops.push_back(op(OpKind::kWait, -1, 28));
  const double nic = cost.link_bytes_per_s(fabric.links()[static_cast<size_t>(fabric.route(24, 0).front())]);
  const double t = sim::replay(s, fabric, cost).time_s;
  CHECK(t == doctest::Approx(2 * kBytes / nic + kCompute).epsilon(0.01).scale(0));
}

TEST_CASE("begin-pass and own-gradient ops take no time, no memory and leave no trace") {
  FlatRing f;
  OpSchedule stripped = f.schedule;
  int removed = 0;
  for (RankSchedule& r : stripped.ranks) {
    const auto no_time = [](const Op& op) {
      return op.kind == OpKind::kBeginPass || op.kind == OpKind::kOwnGrad;
    };
    removed += static_cast<int>(std::count_if(r.ops.begin(), r.ops.end(), no_time));
    r.ops.erase(std::remove_if(r.ops.begin(), r.ops.end(), no_time), r.ops.end());
  }
  REQUIRE(removed >= 3 * 4);  // each rank: two passes begin, one own gradient
  const std::string dir = "/tmp/rm_replay_test_" + std::to_string(::getpid());
  auto traced = [&](const OpSchedule& s, const std::string& path) {
    sim::ReplayOptions o;
    o.trace_path = path;
    return sim::replay(s, f.fabric, f.cost, o);
  };
  const sim::ReplayResult with = traced(f.schedule, dir + "_with.json");
  const sim::ReplayResult without = traced(stripped, dir + "_without.json");
  CHECK(with.time_s == without.time_s);
  CHECK(with.time_free_comm_s == without.time_free_comm_s);
  CHECK(with.peak_memory_bytes == without.peak_memory_bytes);
  CHECK(with.activities == without.activities);
  CHECK(with.ops == without.ops + removed);
  auto events = [](const std::string& path) {
    std::ifstream in(path);
    const nlohmann::json doc = nlohmann::json::parse(in);
    ::unlink(path.c_str());
    return doc["traceEvents"];
  };
  CHECK(events(dir + "_with.json") == events(dir + "_without.json"));
}
