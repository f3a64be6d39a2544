// The pipeline's op lists (pipeline_schedule.h, schedule.cc): each stage's 1F1B order
// (warm-up p-s-1 forwards, steady one forward one backward, cool-down), the exchanges
// between stage s and s+1 (GPU g and g + G/pp), and the message contract over the whole
// schedule, for pp 2 and 4, 4 to 8 micro-batches, every CP kind, TP, sharding levels and
// checkpointing policies.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/message_contract.h"
#include "planner/pipeline_parallel.h"
#include "planner/pipeline_schedule.h"
#include "planner/schedule.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "tests/planner/round_specs.h"

using namespace rm;
using rm::test::step_job;

namespace {

// The order of a stage's computes: "F0 F1 B0 F2 B1 ...".
std::string computes(const std::vector<PipelineAction>& stage) {
  std::string out;
  for (const PipelineAction& a : stage) {
    if (a.kind == PipelineAction::kExchange) continue;
    out += (out.empty() ? "" : " ") + std::string(a.kind == PipelineAction::kForward ? "F" : "B") +
           std::to_string(a.micro);
  }
  return out;
}

struct PpCase {
  const char* model;
  const char* topo;
  int gpus, pp, tp, cp;
  int64_t seq, batch_tokens;
  Strategy kind;
  Sharding sharding;
  Checkpointing ckpt;
};

Plan pp_plan(const PpCase& c) {
  const ModelSpec m = load_model(c.model);
  const Topology topo = load_topology(c.topo);
  const Fabric fabric(topo, c.gpus);
  SearchPins pins;
  pins.pp = c.pp;
  pins.virtual_stages = 1;
  pins.tp = c.tp;
  pins.cp = c.cp;
  pins.cp_comm_type = c.kind;
  pins.sharding = c.sharding;
  pins.checkpointing = c.ckpt;
  pins.micro_batch = 1;
  return Planner(m, fabric, CostParams::from_topology(topo))
      .best_ring_plan(step_job(c.model, c.topo, c.gpus, c.seq, c.batch_tokens), pins);
}

}  // namespace

TEST_CASE("1F1B order per stage: warm-up p-s-1 forwards, then one forward one backward, then the cool-down") {
  const PipelineProgram p = pp_1f1b_program(4, 6, true);
  REQUIRE(p.stages.size() == 4);
  CHECK(computes(p.stages[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(computes(p.stages[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  CHECK(computes(p.stages[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(computes(p.stages[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up stops at m.
  CHECK(computes(pp_1f1b_program(4, 2, true).stages[0]) == "F0 F1 B0 B1");
  // Forward only: no backward, one exchange per micro-batch and boundary.
  CHECK(computes(pp_1f1b_program(2, 3, false).stages[1]) == "F0 F1 F2");
  // Each boundary carries every micro-batch's activation down and its gradient up: 2·m
  // messages, in m + W exchanges (W = the upper stage's warm-up).
  int exchanges = 0;
  for (int b = 0; b < 3; ++b) exchanges += 6 + std::min(3 - b, 6);
  CHECK(p.exchanges == exchanges);
}

TEST_CASE("1F1B exchanges: both ends agree on each, and each stage meets its own in increasing order") {
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 5, 8, 16}) {
      CAPTURE(pp);
      CAPTURE(m);
      const PipelineProgram p = pp_1f1b_program(pp, m, true);
      std::vector<std::vector<const PipelineAction*>> by_number(static_cast<size_t>(p.exchanges));
      for (int s = 0; s < pp; ++s) {
        int last = -1, sent_down = 0, sent_up = 0;
        for (const PipelineAction& a : p.stages[static_cast<size_t>(s)]) {
          if (a.kind != PipelineAction::kExchange) continue;
          CHECK(a.number > last);
          last = a.number;
          REQUIRE(a.number >= 0);
          REQUIRE(a.number < p.exchanges);
          by_number[static_cast<size_t>(a.number)].push_back(&a);
          // Activations go down in micro-batch order, gradients up likewise.
          if (a.send >= 0) CHECK(a.send == (a.up ? sent_up++ : sent_down++));
        }
        CHECK(sent_down == (s + 1 < pp ? m : 0));
        CHECK(sent_up == (s > 0 ? m : 0));
      }
      for (const auto& ends : by_number) {
        REQUIRE(ends.size() == 2);  // one stage's down exchange, the next one's up exchange
        CHECK(ends[0]->up != ends[1]->up);
        CHECK(ends[0]->send == ends[1]->recv);
        CHECK(ends[0]->recv == ends[1]->send);
      }
    }
  }
}

TEST_CASE("pipeline op lists: every stage's layers, the exchanges with g ± G/pp, and the message contract") {
  const Strategy p2p = Strategy::kRing, a2a = Strategy::kUlysses, ag = Strategy::kAllGatherCp, usp = Strategy::kUsp;
  const Sharding fsdp = Sharding::kFsdp, ddp = Sharding::kDdp, zero1 = Sharding::kZero1, zero2 = Sharding::kZero2;
  const Checkpointing none = Checkpointing::kNone, sel = Checkpointing::kSelective, full = Checkpointing::kFull;
  for (const PpCase c : {PpCase{"llama2-7b", "a100-nvlink-box", 8, 2, 1, 4, 32768, 4 * 32768, p2p, fsdp, none},
                         PpCase{"llama2-7b", "a100-nvlink-box", 8, 4, 1, 2, 32768, 6 * 32768, a2a, ddp, sel},
                         PpCase{"llama2-7b", "a100-nvlink-box", 8, 4, 2, 1, 16384, 8 * 16384, p2p, zero1, full},
                         PpCase{"llama2-7b", "dgx-a100-ib", 16, 2, 1, 4, 65536, 10 * 65536, ag, zero2, none},
                         PpCase{"llama2-7b", "dgx-a100-ib", 32, 4, 2, 4, 65536, 5 * 65536, p2p, fsdp, sel},
                         PpCase{"llama3-8b", "dgx-h100-ib", 32, 2, 1, 16, 131072, 4 * 131072, usp, fsdp, none}}) {
    CAPTURE(c.model);
    CAPTURE(c.gpus);
    CAPTURE(c.pp);
    CAPTURE(c.tp);
    CAPTURE(c.cp);
    const Plan plan = pp_plan(c);
    REQUIRE(plan.choice.pp == c.pp);
    const int m_micro = plan.choice.grad_accum;
    CHECK(m_micro >= 4);
    const ModelSpec model = load_model(c.model);
    const Fabric fabric(load_topology(c.topo), c.gpus);
    const OpSchedule s = generate_schedule(plan, model, fabric);
    CHECK(message_contract_violation(s) == "");
    CHECK(s.layer_multiplier == 1);
    const int per_stage = c.gpus / c.pp;
    const std::vector<int> layers = pp_stage_layers(model.layers, c.pp, 1);
    for (const RankSchedule& rs : s.ranks) {
      const int stage = rs.gpu / per_stage;
      CAPTURE(rs.gpu);
      int first = 0;
      for (int k = 0; k < stage; ++k) first += layers[static_cast<size_t>(k)];
      int lo = 1 << 30, hi = -1, sends = 0, recvs = 0, logits = 0;
      for (const Op& op : rs.ops) {
        if (op.kind == OpKind::kCompute && op.layer >= 0) {
          lo = std::min(lo, op.layer);
          hi = std::max(hi, op.layer);
        }
        if (op.kind == OpKind::kCompute && op.layer < 0 && op.compute == ComputeKind::kGemm) ++logits;
        if ((op.kind == OpKind::kSend || op.kind == OpKind::kRecv) && std::abs(op.peer - rs.gpu) == per_stage &&
            op.peer / per_stage != stage) {
          (op.kind == OpKind::kSend ? sends : recvs) += 1;
          CHECK(op.bytes == doctest::Approx(pp_p2p_bytes(model, c.seq / c.cp, 1, 2, c.tp)));
        }
      }
      // Its own layers only; the head (logits forward and backward) on the last stage only.
      CHECK(lo == first);
      CHECK(hi == first + layers[static_cast<size_t>(stage)] - 1);
      CHECK(logits == (stage == c.pp - 1 ? 2 * m_micro : 0));
      // Activations down and gradients up, one each per micro-batch and boundary.
      const int boundaries = (stage > 0 ? 1 : 0) + (stage + 1 < c.pp ? 1 : 0);
      CHECK(sends == boundaries * m_micro);
      CHECK(recvs == boundaries * m_micro);
    }
  }
}

TEST_CASE("pipeline op lists: interleaved 1F1B and other-than-step workloads are refused naming the field") {
  const ModelSpec m = load_model("llama2-7b");
  const Topology topo = load_topology("a100-nvlink-box");
  const Fabric fabric(topo, 8);
  SearchPins pins;
  pins.pp = 2;
  pins.virtual_stages = 2;
  pins.cp = 4;
  const Plan plan = Planner(m, fabric, CostParams::from_topology(topo))
                        .best_ring_plan(step_job("llama2-7b", "a100-nvlink-box", 8, 32768, 4 * 32768), pins);
  REQUIRE(plan.choice.virtual_stages == 2);
  try {
    generate_schedule(plan, m, fabric);
    FAIL("an interleaved plan must be refused");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("virtual_stages") != std::string::npos);
    CHECK(std::string(e.what()).find("interleaved") != std::string::npos);
  }
  Plan attention = plan;
  attention.choice.virtual_stages = 1;
  attention.job.workload = Workload::kAttention;
  CHECK_THROWS_AS(generate_schedule(attention, m, fabric), InputError);
}
