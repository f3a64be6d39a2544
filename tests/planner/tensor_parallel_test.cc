// Tensor parallelism with sequence parallelism (tensor_parallel.h): its memory terms
// against Megatron's activation formulas, its collectives by hand, the rank order, the
// schedule's TP ops, the search's choice and pin.
#include <doctest/doctest.h>

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/message_contract.h"
#include "planner/schedule.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "planner/tensor_parallel.h"
#include "tests/planner/round_specs.h"

using namespace rm;
using rm::test::step_job;

namespace {

// A GPT-style layer as Korthikanti et al. 2022 count it: MHA, a plain 4h FFN.
ModelSpec gpt_layer(int hidden, int heads) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = 4;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn_hidden = 4 * hidden;
  m.vocab = 51200;
  m.gated_ffn = false;
  return m;
}

// Llama 2 7B on one 8-GPU NVSwitch box at tp 8, one 32K sequence per step: the by-hand cases.
struct OneNodeTp8 {
  ModelSpec m = load_model("llama2-7b");
  Topology topo = load_topology("a100-nvlink-box");
  Fabric fabric{topo, 8};
  CostParams cost = CostParams::from_topology(topo);
  Job job = one_sequence(step_job("llama2-7b", "a100-nvlink-box", 8, 32768));
  static Job one_sequence(Job j) {
    j.batch_tokens = 32768;  // one sequence, one micro-step
    return j;
  }
  PlanChoice choice() const {
    PlanChoice ch;
    ch.tp = 8;
    ch.cp = 1;
    ch.dp = 1;
    ch.order = tp_order(8, 1, 1);
    ch.load_balance = LoadBalance::kContiguous;
    return ch;
  }
};

}  // namespace

TEST_CASE("activations with TP + SP: Megatron's 34·h/t bytes per token per layer, by hand") {
  // Korthikanti et al. 2022, Eq. 5 with FlashAttention (no s x s scores stored): s·b·h·34/t
  // bytes per layer, i.e. 34·h/t per token. Its 34 counts two 1-byte dropout masks that a
  // dropout-free run does not store; ours adds the fp32 log-sum-exp (4 bytes per head).
  for (int t : {1, 2, 4, 8}) {
    CAPTURE(t);
    const ModelSpec m = gpt_layer(4096, 32);
    const double h = m.hidden, a = m.heads;
    CHECK(activation_bytes_per_token_layer(m, Checkpointing::kNone, 2, t) ==
          doctest::Approx(((34 - 2) * h + 4 * a) / t));
    // Full recomputation stores the layer input only: 2·s·b·h/t (sequence-parallel).
    CHECK(activation_bytes_per_token_layer(m, Checkpointing::kFull, 2, t) == doctest::Approx(2 * h / t));
  }
}

TEST_CASE("a TP member's shard: heads, FFN columns and vocabulary divided, weights / tp") {
  const ModelSpec m = load_model("llama3-70b");
  const ModelSpec s = tp_shard(m, 8);
  CHECK(s.heads == m.heads / 8);
  CHECK(s.kv_heads == 1);
  CHECK(s.ffn_hidden == m.ffn_hidden / 8);
  CHECK(s.hidden == m.hidden);
  CHECK(s.layer_params() == doctest::Approx(m.layer_params() / 8));
  CHECK(s.params() == doctest::Approx(m.params() / 8));
  CHECK(tp_why_invalid(m, 8, 8) == "");
  CHECK(tp_why_invalid(m, 16, 8).find("GPUs per node") != std::string::npos);
  // Megatron's GQA rule: tp divides the query groups (8 kv heads).
  CHECK(tp_why_invalid(m, 16, 16).find("kv heads") != std::string::npos);
}

TEST_CASE("rank order tp-cp-dp: TP groups are consecutive GPUs, ring d·tp + t strides by tp") {
  const std::vector<int> order = tp_order(4, 2, 2);  // 16 GPUs
  REQUIRE(order.size() == 16);
  // Ring 1 (replica 0, TP rank 1): GPUs 1 and 5; ring 4 (replica 1, TP rank 0): 8 and 12.
  CHECK(order[2] == 1);
  CHECK(order[3] == 5);
  CHECK(order[8] == 8);
  CHECK(order[9] == 12);
  const auto tg = tp_groups(order, 4, 2);
  REQUIRE(tg.size() == 4);
  CHECK(tg[0] == std::vector<int>{0, 1, 2, 3});
  CHECK(tg[3] == std::vector<int>{12, 13, 14, 15});
  const auto fg = fsdp_groups(order, 4, 2);
  REQUIRE(fg.size() == 4);
  CHECK(fg[2] == std::vector<int>{2, 6, 10, 14});
  CHECK(tp_order(1, 4, 2) == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("memory with TP: weights, states and activations divided by tp") {
  const ModelSpec m = load_model("llama3-70b");
  const Topology topo = load_topology("dgx-h100-ib");
  PlanChoice a;
  a.tp = 1;
  a.cp = 16;
  a.dp = 8;
  PlanChoice b = a;
  b.tp = 8;
  b.cp = 16;
  b.dp = 1;
  const int64_t n = 131072;
  const MemoryBreakdown x = memory_breakdown(m, a, n, topo.gpu), y = memory_breakdown(m, b, n, topo.gpu);
  // 128 GPUs either way: the model states per GPU are the same 16 B/param / 128.
  CHECK(y.model_states == doctest::Approx(16 * m.params() / 128));
  CHECK(x.model_states == doctest::Approx(y.model_states));
  CHECK(y.layer_buffers == doctest::Approx(x.layer_buffers / 8));
  CHECK(y.activations == doctest::Approx(x.activations / 8));
}

TEST_CASE("TP collectives by hand: 4 + 4 per layer and sequence on the NVLink ring") {
  const OneNodeTp8 fx;
  const ModelSpec& m = fx.m;
  const Fabric& fabric = fx.fabric;
  const CostParams& cost = fx.cost;
  CostModel cm(m, fabric, cost);
  const Job& j = fx.job;
  const PlanChoice ch = fx.choice();
  REQUIRE(cm.why_invalid(j, ch) == "");
  const Prediction p = cm.predict(j, ch);
  // One all-gather over the 8 GPUs of one NVSwitch node: a ring of 8 whose flows carry 7
  // shards of c·hidden·e/8 bytes, plus 6 more step latencies.
  const double shard = 32768.0 * m.hidden * 2 / 8;
  const Link& nv = *std::find_if(fabric.links().begin(), fabric.links().end(),
                                 [](const Link& l) { return l.cls == LinkClass::kNvlink; });
  const double lat = cost.route_latency_s(fabric, 0, 1);
  const double one = 7 * shard / cost.link_bytes_per_s(nv) + 7 * lat;
  CHECK(p.tp_comm_s == doctest::Approx(m.layers * 8 * one).epsilon(0.01).scale(0));
  // Without TP the same GPUs run no TP collective.
  PlanChoice none = ch;
  none.tp = 1;
  none.dp = 8;
  none.order = tp_order(1, 1, 8);
  CHECK(cm.predict(j, none).tp_comm_s == 0);
  // A pinned order other than the tp-cp-dp one, and a two-level ring, are refused.
  PlanChoice bad = ch;
  std::swap(bad.order[0], bad.order[1]);
  CHECK(cm.why_invalid(j, bad).find("tp-cp-dp") != std::string::npos);
}

TEST_CASE("schedule: TP collectives on the TP groups, 4 forward + 4 backward per layer, contract kept") {
  const ModelSpec m = load_model("llama2-7b");
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 16);
  const CostParams cost = CostParams::from_topology(topo);
  SearchPins pins;
  pins.tp = 4;
  pins.cp = 2;
  pins.checkpointing = Checkpointing::kNone;
  pins.tp_comm_overlap = false;
  Job j = step_job("llama2-7b", "dgx-a100-ib", 16, 65536);
  j.batch_tokens = 2 * 65536;
  const Plan plan = Planner(m, fabric, cost).best_ring_plan(j, pins);
  REQUIRE(plan.choice.tp == 4);
  REQUIRE(plan.choice.dp == 2);
  ScheduleOptions so;
  so.max_layers = 2;
  const OpSchedule s = generate_schedule(plan, m, fabric, so);
  // FSDP groups 0..3 (one per TP rank, 4 GPUs each), then 4 TP groups of 4 GPUs.
  REQUIRE(s.groups.size() == 4 + 4);
  CHECK(s.groups[4] == std::vector<int>{0, 1, 2, 3});
  CHECK(s.groups[1] == std::vector<int>{1, 5, 9, 13});
  for (const RankSchedule& rs : s.ranks) {
    int tp_ops = 0, fsdp_ops = 0;
    for (const Op& op : rs.ops) {
      if (op.kind != OpKind::kCollective) continue;
      if (op.group >= 4) {
        ++tp_ops;
        CHECK(op.bytes == doctest::Approx(65536.0 / 2 * m.hidden * 2 / 4));
        CHECK(std::count(s.groups[op.group].begin(), s.groups[op.group].end(), rs.gpu) == 1);
      } else {
        ++fsdp_ops;
        CHECK(op.group == rs.gpu % 4);
      }
    }
    // 2 layers x (4 + 4) per micro-step, one micro-step (a sequence per replica).
    CHECK(tp_ops == 2 * 8 * plan.choice.grad_accum);
    CHECK(fsdp_ops > 0);
  }
  CHECK(message_contract_violation(s) == "");
}

TEST_CASE("pins: --tp that cannot split the model or a node is explained") {
  const ModelSpec m = load_model("llama3-70b");
  const Topology topo = load_topology("dgx-h100-ib");
  const Fabric fabric(topo, 64);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  SearchPins pins;
  pins.tp = 16;
  try {
    planner.best_plan(step_job("llama3-70b", "dgx-h100-ib", 64, 32768), pins);
    FAIL("tp 16 on 8-GPU nodes must be refused");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("--tp 16") != std::string::npos);
    CHECK(std::string(e.what()).find("GPUs per node") != std::string::npos);
  }
  pins.tp = 4;
  const Plan p = planner.best_plan(step_job("llama3-70b", "dgx-h100-ib", 64, 32768), pins);
  CHECK(p.choice.tp == 4);
  CHECK(p.choice.tp * p.choice.cp * p.choice.dp == 64);
}

TEST_CASE("llama3-70b at 128K on 256 H100s: heads split inside the nodes: tensor parallelism, and why") {
  const ModelSpec m = load_model("llama3-70b");
  const Topology topo = load_topology("dgx-h100-ib");
  const Fabric fabric(topo, 256);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  // Every kind searched: a2a+p2p 8x8 with tp 1 leads tp 4 x p2p 16 here (86.2 k against
  // 82.4 k tokens/s): both split the heads inside a node, the all-to-all without the TP
  // collectives around every GEMM.
  const Plan any = planner.plan(step_job("llama3-70b", "dgx-h100-ib", 256, 131072));
  const int split = any.choice.tp * any.choice.cp_a2a;
  CHECK(split > 1);
  CHECK(topo.gpus_per_node % split == 0);
  // The ring kinds alone (p2p): tensor parallelism inside the nodes, and why.
  SearchPins p2p;
  p2p.cp_comm_type = Strategy::kRing;
  const Plan p = planner.plan(step_job("llama3-70b", "dgx-h100-ib", 256, 131072), p2p);
  CHECK(p.choice.tp > 1);
  CHECK(topo.gpus_per_node % p.choice.tp == 0);
  CHECK(p.predicted.fits);
  REQUIRE(p.without_tp.has_value());
  // The reason: more tokens/s than the best plan without it, on the same batch.
  CHECK(p.without_tp->tokens_per_s < p.predicted.tokens_per_s);
  // Baselines stay the plans without tensor parallelism.
  for (const Baseline& b : p.baselines) CHECK(b.cp * b.dp == 256);
}

TEST_CASE("TP comm overlap by hand: tp chunks, one chunk exposed at each end, max(GEMM chunk, transfer) between") {
  // tp_overlapped_s: x + (t-1)·max(g/t, x) + g/t, the same for an all-gather and a
  // reduce-scatter; partial overlap o of the transfer as collective_overlap prices it.
  CostParams hides;  // collective_overlap 1, the default
  CHECK(tp_overlapped_s(8.0, 0.5, 4, hides) == doctest::Approx(0.5 + 3 * 2.0 + 2.0));  // GEMM bound
  CHECK(tp_overlapped_s(8.0, 3.0, 4, hides) == doctest::Approx(3.0 + 3 * 3.0 + 2.0));  // transfer bound
  CostParams waits = hides;
  waits.collective_overlap = 0;  // a library that moves a collective only inside its wait
  CHECK(tp_overlapped_s(8.0, 0.5, 4, waits) == doctest::Approx(0.5 + 3 * 2.5 + 2.0));

  const OneNodeTp8 fx;
  const ModelSpec& m = fx.m;
  const Fabric& fabric = fx.fabric;
  const CostParams& cost = fx.cost;
  CostModel cm(m, fabric, cost);
  const Job& j = fx.job;
  const PlanChoice ch = fx.choice();
  PlanChoice on = ch;
  on.tp_comm_overlap = true;
  const Prediction off_p = cm.predict(j, ch), on_p = cm.predict(j, on);
  // By hand: each chunk an all-gather or reduce-scatter of 1/8 of the bytes on the node's
  // ring (7 shards, 7 latencies), each GEMM at the layer's rate.
  const ModelSpec ms = tp_shard(m, 8);
  const LinearFlops lf = linear_flops_per_token(ms);
  const double c = 32768, Fg = cost.gemm_flops_per_s(c * lf.layer(), rm::regathers_weights(ch));
  const double shard = c * m.hidden * 2 / 8 / 8;
  const Link& nv = *std::find_if(fabric.links().begin(), fabric.links().end(),
                                 [](const Link& l) { return l.cls == LinkClass::kNvlink; });
  const double x = 7 * shard / cost.link_bytes_per_s(nv) + 7 * cost.route_latency_s(fabric, 0, 1);
  auto extra = [&](double flops, double factor) {
    const double g = factor * c * flops / Fg;
    return x + 7 * std::max(g / 8, x) + g / 8 - g;
  };
  const double up = lf.ffn_recompute_selective, down = lf.ffn - up;
  const double fwd = extra(lf.qkv, 1) + extra(lf.out_proj, 1) + extra(up, 1) + extra(down, 1);
  const double bwd = extra(lf.qkv, 2) + extra(lf.out_proj, 2) + extra(up, 2) + extra(down, 2);
  CHECK(on_p.tp_comm_s == doctest::Approx(m.layers * (fwd + bwd)).epsilon(0.01).scale(0));
  // At 32K tokens the chunks hide behind the GEMMs: far less exposed than waiting at once,
  // the same memory.
  CHECK(on_p.tp_comm_s < 0.5 * off_p.tp_comm_s);
  CHECK(on_p.step_time_s < off_p.step_time_s);
  CHECK(on_p.memory_bytes_per_gpu == off_p.memory_bytes_per_gpu);
}

TEST_CASE("schedule with TP comm overlap: tp chunk collectives per region, the same GEMM FLOPs, contract kept") {
  const ModelSpec m = load_model("llama2-7b");
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 16);
  const CostParams cost = CostParams::from_topology(topo);
  Job j = step_job("llama2-7b", "dgx-a100-ib", 16, 65536);
  j.batch_tokens = 2 * 65536;
  for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull}) {
    CAPTURE(static_cast<int>(ck));
    SearchPins pins;
    pins.tp = 4;
    pins.cp = 2;
    pins.checkpointing = ck;
    pins.tp_comm_overlap = false;
    Plan off = Planner(m, fabric, cost).best_ring_plan(j, pins);
    Plan on = off;
    on.choice.tp_comm_overlap = true;
    ScheduleOptions so;
    so.max_layers = 2;
    const OpSchedule s_off = generate_schedule(off, m, fabric, so), s_on = generate_schedule(on, m, fabric, so);
    CHECK(message_contract_violation(s_on) == "");
    const int regions = 8 + (ck == Checkpointing::kFull ? 4 : ck == Checkpointing::kSelective ? 1 : 0);
    for (int g = 0; g < 16; ++g) {
      CAPTURE(g);
      int tp_ops = 0;
      double tp_bytes = 0, gemm_off = 0, gemm_on = 0;
      for (const Op& op : s_on.ranks[g].ops) {
        if (op.kind == OpKind::kCollective && op.group >= 4) {
          ++tp_ops;
          tp_bytes += op.bytes;
        }
        if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kGemm) gemm_on += op.flops;
      }
      for (const Op& op : s_off.ranks[g].ops)
        if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kGemm) gemm_off += op.flops;
      // Each region's collective in 4 chunks of a quarter of its bytes, 2 layers.
      CHECK(tp_ops == 2 * regions * 4 * off.choice.grad_accum);
      CHECK(tp_bytes == doctest::Approx(2.0 * regions * off.choice.grad_accum * 65536.0 / 2 * m.hidden * 2 / 4));
      CHECK(gemm_on == doctest::Approx(gemm_off));
    }
  }
}
