// a2a+p2p (USP): the layout of its rings, its all-to-all bytes and its attention time by
// hand on a small two-node fabric built in code, the split's rules, the search and the
// plan file.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/ring_order.h"
#include "planner/search.h"
#include "planner/usp_plan.h"
#include "tests/planner/round_specs.h"

using namespace rm;

namespace {

ModelSpec gqa_model() { return test::round_model(8, 4); }

// Nodes of `gpn` GPUs, no link latency.
Topology two_level(int gpn, int nodes) { return test::round_cluster(gpn, nodes, true, 1, 0); }

PlanChoice usp(int cp, int a2a, int gpus) {
  PlanChoice ch;
  ch.strategy = Strategy::kUsp;
  ch.cp = cp;
  ch.dp = gpus / cp;
  ch.cp_a2a = a2a;
  ch.order = node_major_order(gpus);
  ch.load_balance = LoadBalance::kContiguous;
  return ch;
}

}  // namespace

TEST_CASE("a2a+p2p: rings take every a2a-th GPU of a CP group, heads divided by the a2a degree") {
  const PlanChoice ch = usp(8, 4, 16);
  const PlanChoice rc = usp_ring_choice(ch);
  CHECK(rc.strategy == Strategy::kRing);
  CHECK(rc.cp == 2);
  CHECK(rc.dp == 8);
  CHECK(rc.cp_a2a == 1);
  CHECK(rc.order == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15});
  const ModelSpec m = usp_ring_model(gqa_model(), 1, 4);
  CHECK(m.heads == 2);
  CHECK(m.kv_heads == 1);
  // Per peer: c (h + 2 h_kv) d e / u before attention, c h d e / u after; c = N / cp.
  const A2aBytes b = a2a_bytes(gqa_model(), ch, 8 * 1024, 2);
  CHECK(b.qkv == doctest::Approx(1024.0 * (8 + 8) * 128 * 2 / 4));
  CHECK(b.out == doctest::Approx(1024.0 * 8 * 128 * 2 / 4));
}

TEST_CASE("a2a+p2p attention time, by hand: the all-to-alls on NVLink, the ring across nodes") {
  // 2 nodes x 2 GPUs, cp 4 = a2a 2 x ring 2, non-causal, c = 4096 tokens per GPU.
  const Topology t = two_level(2, 2);
  const Fabric f(t, 4);
  CostParams cost = CostParams::from_topology(t);
  cost.step_sync_s = 0;
  CostModel cm(gqa_model(), f, cost);
  Job job;
  job.gpus = 4;
  job.seq_len = 4 * 4096;
  job.causal = false;
  job.workload = Workload::kAttention;
  job.passes = Passes::kForward;
  const PlanChoice ch = usp(4, 2, 4);
  REQUIRE(cm.why_invalid(job, ch) == "");
  const Prediction p = cm.predict(job, ch);
  // After the all-to-all: N / 2 = 8192 tokens of 4 query heads, 2 kv heads.
  const double cr = 8192;
  const double comp = 4 * cr * cr * 128 * 4 / (100e12 * 0.5);  // one block pair: 2.7 ms
  const double x_ring = 2 * cr * 128 * 2 * 2 / 10e9;         // K,V over the NIC: 0.84 ms, hidden
  CHECK(x_ring < comp);
  const double c = 4096;
  const double a2a = c * (8 + 2 * 4) * 128 * 2 / 2 / 100e9 +  // Q,K,V to the peer
                     c * 8 * 128 * 2 / 2 / 100e9;             // the output back
  // Each all-to-all's pack and unpack read and write the rank's payload (2 TB/s HBM).
  const double copies = 2 * (2 * c * (8 + 2 * 4) * 128 * 2 / 2e12 + 2 * c * 8 * 128 * 2 / 2e12);
  CHECK(p.step_time_s == doctest::Approx(2 * comp + a2a + copies).epsilon(1e-9));
  CHECK(p.exposed_comm_s == doctest::Approx(a2a).epsilon(1e-6).scale(0));  // the copies are not comm
  // The overlap threshold is the ring's, in tokens of its block: c_r x transfer / compute.
  CHECK(p.overlap_threshold_tokens == doctest::Approx(cr * x_ring / comp).epsilon(1e-6).scale(0));
  // Backward too: the same all-to-all bytes the other way; the ring as a 2-GPU ring.
  job.passes = Passes::kForwardBackward;
  const Prediction q = cm.predict(job, ch);
  CHECK(q.exposed_comm_s > 2 * a2a * (1 - 1e-9));
  // ... that is the 2-GPU rings (both a2a indices at once) on 4 heads, plus the all-to-alls
  // of both passes.
  CostModel ring_model(usp_ring_model(gqa_model(), 1, 2), f, cost);
  const Prediction rq = ring_model.predict(job, usp_ring_choice(ch));
  CHECK(q.step_time_s == doctest::Approx(rq.step_time_s + 2 * (a2a + copies)).epsilon(1e-9));
  // The memory: the ring's buffers plus the all-to-all's staging of Q and K,V.
  PlanChoice ring = ch;
  ring.strategy = Strategy::kRing;
  ring.cp_a2a = 1;
  const double staging = 2 * (c * 8 * 128 * 2 + 2 * c * 4 * 128 * 2);
  CHECK(ring_buffers(gqa_model(), ch, job.seq_len, t.gpu).gathered == doctest::Approx(staging));
  CHECK(ring_buffers(gqa_model(), ring, job.seq_len, t.gpu).kv_ring_buffers ==
        ring_buffers(gqa_model(), ch, job.seq_len, t.gpu).kv_ring_buffers);
}

TEST_CASE("a2a+p2p: the split must divide the heads, stay inside a node and leave a ring") {
  const Topology t = two_level(4, 2);
  const Fabric f(t, 8);
  CostModel cm(gqa_model(), f, CostParams::from_topology(t));
  Job job;
  job.gpus = 8;
  job.seq_len = 8 * 4096;
  CHECK(cm.why_invalid(job, usp(8, 4, 8)) == "");
  CHECK(cm.why_invalid(job, usp(8, 8, 8)).find("[2, cp)") != std::string::npos);
  CHECK(cm.why_invalid(job, usp(8, 1, 8)).find("[2, cp)") != std::string::npos);
  ModelSpec three = gqa_model();
  three.heads = 6;
  three.kv_heads = 6;
  CostModel c3(three, f, CostParams::from_topology(t));
  CHECK(c3.why_invalid(job, usp(8, 4, 8)).find("must divide the 6 query heads") != std::string::npos);
  PlanChoice across = usp(8, 2, 8);
  across.order = {0, 4, 1, 5, 2, 6, 3, 7};  // each a2a pair spans the two nodes
  CHECK(cm.why_invalid(job, across).find("inside one node") != std::string::npos);
  PlanChoice two_level_ring = usp(8, 2, 8);
  two_level_ring.schedule = Schedule::kTwoLevel;
  CHECK(cm.why_invalid(job, two_level_ring).find("flat or bidirectional") != std::string::npos);
}

TEST_CASE("a2a+p2p: searched with its split, pinned, and carried by the plan file") {
  const Topology t = two_level(4, 2);
  const Fabric f(t, 8);
  Planner planner(gqa_model(), f, CostParams::from_topology(t));
  Job job;
  job.gpus = 8;
  job.seq_len = 8 * 4096;
  SearchPins pins;
  pins.cp_comm_type = Strategy::kUsp;
  const Plan any = planner.best_plan(job, pins);
  CHECK(any.choice.strategy == Strategy::kUsp);
  CHECK(any.choice.cp % any.choice.cp_a2a == 0);
  pins.cp = 8;
  pins.cp_a2a = 2;
  const Plan p = planner.best_plan(job, pins);
  CHECK(p.choice.cp == 8);
  CHECK(p.choice.cp_a2a == 2);
  CHECK(p.predicted.step_time_s > 0);
  pins.cp_a2a = 3;
  CHECK_THROWS_WITH_AS(planner.best_plan(job, pins), doctest::Contains("a2a degree in [2, cp)"), InputError);
  // The plan file: Megatron's [a2a, ring] sizes, read back; a wrong product is refused.
  Plan named = p;
  named.job.model = "gqa";
  named.job.topology = "test";
  const std::string yaml = plan_to_yaml_string(named);
  CHECK(yaml.find("hierarchical_context_parallel_sizes: [2, 4]") != std::string::npos);
  CHECK(parse_plan_yaml(yaml, "p.yaml").choice.cp_a2a == 2);
  std::string bad = yaml;
  bad.replace(bad.find("[2, 4]"), 6, "[2, 2]");
  CHECK_THROWS_WITH_AS(parse_plan_yaml(bad, "p.yaml"), doctest::Contains("hierarchical_context_parallel_sizes"),
                       InputError);
  CHECK(plan_to_json(named)["plan"]["hierarchical_context_parallel_sizes"] == nlohmann::json{2, 4});
}
