// a2a+p2p's op lists (schedule.h, ring_pass.h): the all-to-all over each a2a group around
// a p2p ring over the heads it leaves, counted and sized by hand; the message contract on
// the attention, layer and step workloads, with tensor parallelism too; the tracked peak
// memory against the memory model.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/message_contract.h"
#include "planner/schedule.h"
#include "planner/spec_library.h"
#include "planner/tensor_parallel.h"

namespace rm {
namespace {

ModelSpec model_of(int heads, int kv_heads, int layers = 2) {  // d = 64
  ModelSpec m;
  m.name = m.source = "test";
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = 64;
  m.hidden = heads * 64;
  m.ffn_hidden = 4 * m.hidden;
  m.vocab = 1000;
  return m;
}

// a2a+p2p over `gpus` GPUs of dgx-a100-ib (8 per node): tp x (a2a x ring) x dp, the
// tp-cp-dp rank order (node-major), a flat zigzag ring.
Plan usp_plan(int gpus, int tp, int a2a, int ring, int64_t seq, Workload wl) {
  Plan p;
  p.job.model = "test";
  p.job.topology = "dgx-a100-ib";
  p.job.gpus = gpus;
  p.job.seq_len = seq;
  p.job.workload = wl;
  p.choice.strategy = Strategy::kUsp;
  p.choice.tp = tp;
  p.choice.cp = a2a * ring;
  p.choice.cp_a2a = a2a;
  p.choice.dp = gpus / (tp * a2a * ring);
  p.choice.load_balance = LoadBalance::kZigzag;
  p.choice.block_q = p.choice.block_kv = 64;
  p.choice.order = tp_order(tp, p.choice.cp, p.choice.dp);
  return p;
}

// Sends of one rank, by (backward, bytes): how many.
std::map<std::pair<bool, double>, int> sends_by_size(const RankSchedule& rs) {
  std::map<std::pair<bool, double>, int> n;
  for (const Op& op : rs.ops)
    if (op.kind == OpKind::kSend) ++n[{op.backward, op.bytes}];
  return n;
}

// The peak of one rank's alloc/free ops.
double tracked_peak(const OpSchedule& s, const RankSchedule& rs) {
  double live = 0, peak = 0;
  for (const Op& op : rs.ops) {
    if (op.kind == OpKind::kAlloc) live += op.bytes;
    if (op.kind == OpKind::kFree) live -= s.buffers[static_cast<size_t>(op.buffer)].bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

TEST_CASE("a2a+p2p op lists, by hand: all-to-all inside the a2a group, ring over the heads it leaves") {
  // 16 GPUs (2 nodes), cp 16 = a2a 4 x ring 4, N = 16K: c = 1K tokens per GPU, the ring's
  // blocks N / 4 = 4K tokens of 8 / 4 = 2 query heads and 4 / 4 = 1 kv head.
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 16);
  const ModelSpec m = model_of(8, 4);
  Plan p = usp_plan(16, 1, 4, 4, 16384, Workload::kAttention);
  const OpSchedule s = generate_schedule(p, m, fabric);
  CHECK(message_contract_violation(s).empty());
  const double c = 1024, e = 2, d = 64;
  const double qkv = c * (8 + 2 * 4) * d * e / 4;  // per a2a peer: 512 KiB
  const double out = c * 8 * d * e / 4;            // 256 KiB
  const double kv = 4096 * 2 * 1 * d * e;          // the ring's K,V block: 1 MiB
  const double dkv = 4096 * 2 * 1 * d * 4;         // its fp32 dK,dV: 2 MiB
  CHECK(kv == doctest::Approx(ring_buffers(m, p.choice, p.job.seq_len, topo.gpu).kv_block));
  for (const RankSchedule& rs : s.ranks) {
    CAPTURE(rs.gpu);
    // Forward: 3 a2a peers get Q,K,V and the output; the ring passes K,V 3 times.
    // Backward: dout in (out's bytes), the ring's K,V 3 times and dK,dV 3 times plus home,
    // dQ,dK,dV back (Q,K,V's bytes).
    const auto n = sends_by_size(rs);
    CHECK(n.at({false, qkv}) == 3);
    CHECK(n.at({false, out}) == 3);
    CHECK(n.at({false, kv}) == 3);
    CHECK(n.at({true, out}) == 3);
    CHECK(n.at({true, qkv}) == 3);
    CHECK(n.at({true, kv}) == 3);
    CHECK(n.at({true, dkv}) == 4);
    CHECK(n.size() == 7);
    // The a2a group: the 4 consecutive GPUs (one node); the ring: every 4th GPU.
    std::set<int> a2a_peers, ring_peers;
    for (const Op& op : rs.ops) {
      if (op.kind != OpKind::kSend) continue;
      (op.bytes == qkv || op.bytes == out ? a2a_peers : ring_peers).insert(op.peer);
    }
    std::set<int> group, ring;
    for (int i = 0; i < 4; ++i)
      if (rs.gpu / 4 * 4 + i != rs.gpu) group.insert(rs.gpu / 4 * 4 + i);
    CHECK(a2a_peers == group);
    // Flat ring: K,V and dK,dV on to the next position, and the last accumulator home
    // P - 1 positions back, which is the next one too.
    ring.insert((rs.gpu + 4) % 16);
    CHECK(ring_peers == ring);
  }
  // The attention FLOPs of all GPUs: u rings, each over h / u heads, are the whole
  // sequence's work over a ring of 4 positions on all heads.
  double fwd = 0;
  for (const RankSchedule& rs : s.ranks)
    for (const Op& op : rs.ops)
      if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttentionForward) fwd += op.flops;
  const RingAttentionWork w = ring_attention_work(TokenLayout{LoadBalance::kZigzag, 16384, 4}, true, 8, 64, {64, 64});
  CHECK(fwd == doctest::Approx(w.executed_total));
  // Two a2a degrees, sub-blocks, bidirectional: the contract holds.
  for (int a2a : {2, 4}) {
    for (int sub : {1, 3}) {
      Plan q = usp_plan(16, 1, a2a, 16 / a2a, 16384, Workload::kAttention);
      q.choice.kv_subblocks = sub;
      q.choice.schedule = 16 / a2a >= 3 ? Schedule::kBidirectional : Schedule::kFlat;
      CAPTURE(a2a);
      CAPTURE(sub);
      const std::string v = message_contract_violation(generate_schedule(q, m, fabric));
      CHECK_MESSAGE(v.empty(), v);
    }
  }
}

TEST_CASE("a2a+p2p op lists: layer and step workloads with tensor parallelism keep the contract and the memory model's peak") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 32);
  const ModelSpec m = model_of(16, 8, 3);
  struct Case {
    int tp, a2a, ring;
    Workload wl;
    Checkpointing ck;
  };
  for (const Case k : {Case{1, 4, 4, Workload::kStep, Checkpointing::kNone},
                       Case{2, 2, 4, Workload::kStep, Checkpointing::kFull},
                       Case{2, 4, 2, Workload::kLayer, Checkpointing::kSelective},
                       Case{4, 2, 2, Workload::kStep, Checkpointing::kSelective}}) {
    CAPTURE(k.tp);
    CAPTURE(k.a2a);
    CAPTURE(k.ring);
    Plan p = usp_plan(32, k.tp, k.a2a, k.ring, 8192, k.wl);
    p.choice.checkpointing = k.ck;
    p.choice.grad_accum = 2;
    const OpSchedule s = generate_schedule(p, m, fabric);
    const std::string v = message_contract_violation(s);
    CHECK_MESSAGE(v.empty(), v);
    const double want = memory_breakdown(m, p.choice, p.job.seq_len, topo.gpu).total();
    for (const RankSchedule& rs : s.ranks) CHECK(tracked_peak(s, rs) == doctest::Approx(want).epsilon(1e-9));
    // Each GPU's all-to-all peers share its node; its TP group too.
    for (const RankSchedule& rs : s.ranks)
      for (const Op& op : rs.ops)
        if (op.kind == OpKind::kSend && op.step == 0 && fabric.node_of(op.peer) != fabric.node_of(rs.gpu))
          CHECK(op.bytes == doctest::Approx(ring_buffers(m, p.choice, p.job.seq_len, topo.gpu).kv_block));
  }
}

TEST_CASE("a2a+p2p op lists: a split that cannot run is bad input naming the field") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 16);
  Plan p = usp_plan(16, 1, 4, 4, 16384, Workload::kAttention);
  ModelSpec six = model_of(8, 4);
  six.heads = six.kv_heads = 6;
  CHECK_THROWS_WITH_AS(generate_schedule(p, six, fabric), doctest::Contains("hierarchical_context_parallel_sizes"),
                       InputError);
  p.choice.order = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};  // a2a groups across nodes
  CHECK_THROWS_WITH_AS(generate_schedule(p, model_of(8, 4), fabric), doctest::Contains("inside one node"), InputError);
}

}  // namespace rm
