// The pipeline's op lists (pipeline_schedule.h, schedule.cc): each stage's 1F1B order
// (warm-up p-s-1 forwards, steady one forward one backward, cool-down), the exchanges
// between stage s and s+1 (GPU g and g + G/pp), and the message contract over the whole
// schedule, for pp 2 and 4, 4 to 8 micro-batches, every CP kind, TP, sharding levels and
// checkpointing policies.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
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

// The order of a stage's computes: "F0 F1 B0 F2 B1 ..." (interleaved: "F<micro>.<chunk>").
std::string computes(const std::vector<PipelineAction>& stage) {
  const bool interleaved =
      std::any_of(stage.begin(), stage.end(), [](const PipelineAction& a) { return a.chunk > 0; });
  std::string out;
  for (const PipelineAction& a : stage) {
    if (a.kind == PipelineAction::kExchange) continue;
    if (!out.empty()) out += ' ';
    out += a.kind == PipelineAction::kForward ? 'F' : 'B';
    out += std::to_string(a.micro);
    if (a.chunk > 0 || interleaved) out += '.' + std::to_string(a.chunk);
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
  Plan plan = Planner(m, fabric, CostParams::from_topology(topo))
                  .best_plan(step_job(c.model, c.topo, c.gpus, c.seq, c.batch_tokens), pins);
  REQUIRE(plan.choice.strategy == c.kind);
  return plan;
}

}  // namespace

TEST_CASE("1F1B order per stage: warm-up p-s-1 forwards, then one forward one backward, then the cool-down") {
  const PipelineProgram p = pp_1f1b_program(4, 1, 6, true, InterleavedWarmup::kMegatron);
  REQUIRE(p.stages.size() == 4);
  CHECK(computes(p.stages[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(computes(p.stages[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5");
  CHECK(computes(p.stages[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(computes(p.stages[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: the warm-up stops at m.
  CHECK(computes(pp_1f1b_program(4, 1, 2, true, InterleavedWarmup::kMegatron).stages[0]) == "F0 F1 B0 B1");
  // Forward only.
  CHECK(computes(pp_1f1b_program(2, 1, 3, false, InterleavedWarmup::kMegatron).stages[1]) == "F0 F1 F2");
  // Each boundary carries every micro-batch's activation down and its gradient up.
  CHECK(p.messages == 3 * 2 * 6);
  // An exchange is with one neighbour: the down one sends the activation and takes a
  // gradient back (stage 0's fifth exchange: after F4, gradient of B1 expected).
  std::vector<const PipelineAction*> ex;
  for (const PipelineAction& a : p.stages[0]) {
    if (a.kind == PipelineAction::kExchange) ex.push_back(&a);
  }
  REQUIRE(ex.size() == 9);  // 3 warm-up, 3 steady, 3 cool-down
  REQUIRE(ex[4]->messages.size() == 2);
  for (const PipelineMessage& msg : ex[4]->messages) {
    CHECK(msg.peer == 1);
    CHECK(msg.tag == (msg.send ? 4 : 1));
    CHECK(msg.gradient == !msg.send);
  }
}

TEST_CASE("interleaved 1F1B order: chunk groups of pp micro-batches, Megatron's warm-up, the last chunk's backward after its forward") {
  // pp 4, v 2, m 8: stage 3 warms up (v-1)·p = 4 forwards (chunk 0 of micro-batches 0-3),
  // then runs chunk 1's forward of each micro-batch right before its backward.
  const PipelineProgram p = pp_1f1b_program(4, 2, 8, true, InterleavedWarmup::kMegatron);
  CHECK(computes(p.stages[3]).rfind("F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 ", 0) == 0);
  // Stage 0 warms up 2·(p-1) + (v-1)·p = 10 of its 16 chunk forwards.
  CHECK(computes(p.stages[0]).rfind("F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 ", 0) == 0);
  // m = p: Megatron runs all 8 forwards of stage 3 first; torch's ScheduleInterleaved1F1B
  // warms up (v-1)·p = 4 and starts the backwards as at m = 8.
  const std::string megatron = computes(pp_1f1b_program(4, 2, 4, true, InterleavedWarmup::kMegatron).stages[3]);
  const std::string torch = computes(pp_1f1b_program(4, 2, 4, true, InterleavedWarmup::kTorch).stages[3]);
  CHECK(megatron.rfind("F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 B0.1 ", 0) == 0);
  CHECK(torch.rfind("F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 ", 0) == 0);
}

TEST_CASE("pipeline exchanges: every chunk computed once, links paired in order, phases increasing on every stage") {
  struct Shape {
    int pp, v, m;
  };
  std::vector<Shape> shapes;
  for (int pp : {2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 5, 8, 16}) shapes.push_back({pp, 1, m});
  }
  for (int pp : {3, 4, 8}) {
    for (int v : {2, 3, 4}) {
      for (int k : {1, 2, 3}) shapes.push_back({pp, v, k * pp});
    }
  }
  for (const Shape sh : shapes) {
    for (const auto& run : {std::pair{true, InterleavedWarmup::kMegatron}, std::pair{false, InterleavedWarmup::kMegatron},
                           std::pair{true, InterleavedWarmup::kTorch}}) {
      const bool backward = run.first;
      const InterleavedWarmup rule = run.second;
      CAPTURE(sh.pp);
      CAPTURE(sh.v);
      CAPTURE(sh.m);
      CAPTURE(backward);
      CAPTURE(static_cast<int>(rule));
      const PipelineProgram p = pp_1f1b_program(sh.pp, sh.v, sh.m, backward, rule);
      // (src, dst) -> tags and phases in posting order, from each end.
      std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sent, received;
      for (int s = 0; s < sh.pp; ++s) {
        int last_phase = -1, forwards = 0, backwards = 0;
        for (const PipelineAction& a : p.stages[static_cast<size_t>(s)]) {
          if (a.kind == PipelineAction::kForward) ++forwards;
          if (a.kind == PipelineAction::kBackward) ++backwards;
          for (const PipelineMessage& msg : a.messages) {
            CHECK(msg.phase > last_phase);
            last_phase = msg.phase;
            (msg.send ? sent[{s, msg.peer}] : received[{msg.peer, s}]).push_back({msg.tag, msg.phase});
          }
        }
        CHECK(forwards == sh.m * sh.v);
        CHECK(backwards == (backward ? sh.m * sh.v : 0));
      }
      CHECK(sent == received);
      // Every chunk boundary of the model carries each micro-batch once each way.
      int messages = 0;
      for (const auto& link : sent) messages += static_cast<int>(link.second.size());
      CHECK(messages == (sh.pp * sh.v - 1) * sh.m * (backward ? 2 : 1));
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
    CHECK(s.layers_emitted == model.layers);
    const int per_stage = c.gpus / c.pp;
    const std::vector<int> layers = pp_stage_layers({model.layers, c.pp, 1});
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

TEST_CASE("pipeline op lists: a chunk of the head alone gathers it for each micro-batch and waits for that gather") {
  // Llama 3 8B's 4-layer shapes, pp 4 with the embedding and the loss counted as layers: the
  // last stage holds the head alone. Its backward prefetched a layer's weights for a layer
  // below that this chunk does not have, so the next micro-batch's head waited for that
  // gather and never for its own, which no op waited for (the contract names it).
  const PpCase c{"llama3-8b-4layers", "tpu-v4-torus", 16, 4, 1, 2, 4096, 4 * 4096, Strategy::kRing, Sharding::kFsdp,
                 Checkpointing::kNone};
  const Plan plan = pp_plan(c);
  REQUIRE(plan.choice.grad_accum == 2);
  const ModelSpec model = load_model(c.model);
  const PipelineLayout layout = pp_layout(model.layers, plan.choice);
  REQUIRE(pp_chunk_layer_count(layout, c.pp - 1) == 0);
  const OpSchedule s = generate_schedule(plan, model, Fabric(load_topology(c.topo), c.gpus));
  CHECK(message_contract_violation(s) == "");
  const RankSchedule& last = s.ranks[static_cast<size_t>(c.gpus - 1)];
  int gathers = 0, head_gemms = 0;
  int gathered = -1;  // the last all-gather's request
  bool waited = false;
  for (const Op& op : last.ops) {
    if (op.kind == OpKind::kCollective && op.collective == CollectiveKind::kAllGather) {
      ++gathers;
      gathered = op.request;
      waited = false;
    }
    if (op.kind == OpKind::kWait && op.request == gathered) waited = true;
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kGemm && !op.backward) {
      ++head_gemms;
      CHECK(waited);  // the head's forward GEMM after its own gather's wait
    }
  }
  CHECK(gathers == 2);  // the head's, once per micro-batch: no layer's
  CHECK(head_gemms == 2);
}

TEST_CASE("interleaved pipeline op lists (pp 4 and 8, 2-4 chunks per stage): the message contract, every layer once") {
  const ModelSpec model = load_model("llama2-7b");
  struct Case {
    const char* topo;
    int gpus, pp, v, cp, sequences;
    Sharding sharding;
  };
  for (const Case c : {Case{"a100-nvlink-box", 8, 4, 2, 2, 4, Sharding::kFsdp},
                       Case{"a100-nvlink-box", 8, 4, 4, 2, 8, Sharding::kZero1},
                       Case{"dgx-a100-ib", 32, 8, 2, 4, 16, Sharding::kFsdp}}) {
    CAPTURE(c.pp);
    CAPTURE(c.v);
    const Topology topo = load_topology(c.topo);
    const Fabric fabric(topo, c.gpus);
    SearchPins pins;
    pins.pp = c.pp;
    pins.virtual_stages = c.v;
    pins.cp = c.cp;
    pins.cp_comm_type = Strategy::kRing;
    pins.sharding = c.sharding;
    pins.micro_batch = 1;
    const Plan plan = Planner(model, fabric, CostParams::from_topology(topo))
                          .best_ring_plan(step_job("llama2-7b", c.topo, c.gpus, 32768, c.sequences * int64_t{32768}), pins);
    REQUIRE(plan.choice.virtual_stages == c.v);
    const OpSchedule s = generate_schedule(plan, model, fabric);
    CHECK(message_contract_violation(s) == "");
    // Each layer's forward computed once per micro-batch, on its stage's GPUs only.
    const int per_stage = c.gpus / c.pp, chunk = model.layers / (c.pp * c.v);
    for (const RankSchedule& rs : s.ranks) {
      std::map<int, int> qkv_forwards;  // by layer
      for (const Op& op : rs.ops) {
        if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttentionForward && !op.backward && op.layer >= 0 &&
            op.step == 0)
          ++qkv_forwards[op.layer];
      }
      CHECK(static_cast<int>(qkv_forwards.size()) == model.layers / c.pp);
      for (const auto& layer : qkv_forwards) {
        CHECK(layer.first / chunk % c.pp == rs.gpu / per_stage);
        CHECK(layer.second == plan.choice.grad_accum);
      }
    }
  }
}

TEST_CASE("interleaved pipeline op lists: Megatron gathers micro-batch 0's chunks ahead, FSDP2 when the activation arrives") {
  // Megatron's schedule (param_sync_func) gathers chunks 0 and 1 before a stage's first
  // action and each later chunk during the forwards of the one before, every layer of the
  // chunk at once (DistributedDataParallel.start_param_sync dispatches all its bucket
  // groups); FSDP2's forward pre-hook gathers a chunk once its first activation has arrived.
  const ModelSpec model = load_model("llama2-7b");
  const Topology topo = load_topology("a100-nvlink-box");
  const Fabric fabric(topo, 8);
  const int pp = 4, v = 4, per_stage = 2;
  for (const Framework framework : {Framework::kAny, Framework::kMegatron, Framework::kPytorch}) {
    CAPTURE(static_cast<int>(framework));
    SearchPins pins;
    pins.pp = pp;
    pins.virtual_stages = v;
    pins.cp = 2;
    pins.cp_comm_type = Strategy::kRing;
    pins.sharding = Sharding::kZero1;
    pins.micro_batch = 1;
    Job job = step_job("llama2-7b", "a100-nvlink-box", 8, 32768, 8 * int64_t{32768});
    job.framework = framework;
    const Plan plan = Planner(model, fabric, CostParams::from_topology(topo)).best_ring_plan(job, pins);
    REQUIRE(plan.choice.virtual_stages == v);
    const OpSchedule s = generate_schedule(plan, model, fabric);
    CHECK(message_contract_violation(s) == "");
    for (const RankSchedule& rs : s.ranks) {
      const int stage = rs.gpu / per_stage;
      if (stage == 0) continue;  // its first action waits for no activation
      CAPTURE(rs.gpu);
      int gathers = 0, before_first_recv = -1;
      for (const Op& op : rs.ops) {
        if (op.kind == OpKind::kRecv && before_first_recv < 0) before_first_recv = gathers;
        if (op.kind == OpKind::kCollective && op.collective == CollectiveKind::kAllGather) ++gathers;
      }
      // zero1 gathers each layer (and the last stage the head) once a step, whoever dispatches it.
      CHECK(gathers == model.layers / pp + (stage == pp - 1 ? 1 : 0));
      CHECK(before_first_recv == (framework == Framework::kPytorch ? 0 : 2 * model.layers / (pp * v)));
    }
  }
}

TEST_CASE("pipeline op lists: interleaved 1F1B with pp 2 and other-than-step workloads are refused naming the field") {
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
