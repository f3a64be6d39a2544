// The schedule generator, checked by running every rank's op list symbolically: buffers
// carry which K,V block or which dK,dV contributions they hold, sends and receives meet by
// posting order on their link (the message contract, planner/op_list.h: what NCCL does)
// with rendezvous semantics and must agree on tag and size, and the run must finish without deadlock,
// without touching a buffer while a transfer on it is in flight, and with every position
// holding its own complete dK,dV at the end of each backward pass.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/message_contract.h"
#include "planner/schedule.h"
#include "planner/spec_library.h"
#include "planner/usp_plan.h"

namespace rm {
namespace {

ModelSpec small_model(int heads, int kv_heads, int layers = 2) {
  ModelSpec m;
  m.name = "test";
  m.source = "test";
  m.layers = layers;
  m.hidden = heads * 64;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = 64;
  m.ffn_hidden = 4 * m.hidden;
  m.vocab = 1000;
  return m;
}

Plan make_plan(int gpus, int cp, Schedule sched, LoadBalance lb, bool causal, int64_t seq,
               Workload wl = Workload::kAttention) {
  Plan p;
  p.job.model = "test";
  p.job.topology = "dgx-a100-ib";
  p.job.gpus = gpus;
  p.job.seq_len = seq;
  p.job.causal = causal;
  p.job.workload = wl;
  p.choice.cp = cp;
  p.choice.dp = gpus / cp;
  p.choice.schedule = sched;
  p.choice.load_balance = lb;
  p.choice.block_q = 64;
  p.choice.block_kv = 64;
  for (int i = 0; i < gpus; ++i) p.choice.order.push_back(i);
  return p;
}

// What a buffer holds, symbolically.
struct Content {
  int kv = -1;                // K,V block of this ring position
  int dkv = -1;               // dK,dV of this ring position's block ...
  std::set<int> contrib;      // ... summed over these query positions
};

struct Checker {
  const OpSchedule& s;
  const Plan& plan;
  const ModelSpec& m;
  int P;
  std::vector<std::vector<PairFlops>> pairs;  // [q][kv]
  // Results.
  std::map<std::tuple<int, int, bool, int, int>, int> visits;  // gpu, layer, bwd, kind, owner
  std::vector<int> completions;  // backward phases that ended with the own dK,dV complete
  std::vector<double> peak, executed_fwd, executed_bwd, useful_fwd;
  double sent_bytes = 0;
  int messages = 0;

  Checker(const OpSchedule& sched, const Plan& p, const ModelSpec& model)
      : s(sched), plan(p), m(model), P(p.choice.cp) {
    TokenLayout layout{p.choice.load_balance, p.job.seq_len, P};
    pairs.assign(P, std::vector<PairFlops>(P));
    for (int q = 0; q < P; ++q)
      for (int k = 0; k < P; ++k)
        pairs[q][k] = attention_pair_flops(layout, q, k, p.job.causal, m.heads, m.head_dim,
                                           {p.choice.block_q, p.choice.block_kv}, effective_window(m, p.job));
  }

  std::set<int> expected_contrib(int owner) const {
    std::set<int> e;
    for (int q = 0; q < P; ++q)
      if (pairs[q][owner].executed > 0) e.insert(q);
    return e;
  }

  // What an op reads or writes: a buffer, or one block of a gathered one (all_gather;
  // block k holds ring position pos - k's, the op names it by kv_owner).
  static constexpr int kBlocks = 1 << 12;
  int key(int gpu, int buffer, int owner) const {
    const int blocks = s.buffers.at(buffer).blocks;
    if (blocks == 1) return buffer * kBlocks;
    REQUIRE(owner >= 0);
    const int block = ((s.ranks[gpu].position - owner) % P + P) % P;
    REQUIRE(block < blocks);
    return buffer * kBlocks + block;
  }
  struct Req {
    OpKind kind;
    int gpu, peer, tag, buffer;
    double bytes;
    int phase = -1;
    bool matched = false;
    Content payload;  // sends: snapshot at post
    int at = -1;      // key() of what it reads or writes
  };
  struct RankState {
    size_t pc = 0;
    std::map<int, Req*> reqs;
    std::map<int, Content> content;
    std::map<int, int> pending_send, pending_recv;
    std::set<int> allocated;
    double mem = 0;
    bool in_pass = false;
    bool pass_backward = false;
  };

  void run() {
    const int G = static_cast<int>(s.ranks.size());
    std::vector<RankState> st(G);
    std::vector<std::unique_ptr<Req>> all;
    // (src, dst, n-th message on the link): pairing by posting order.
    std::map<std::tuple<int, int, int>, Req*> open_sends, open_recvs;
    std::map<std::pair<int, int>, int> sends_on_link, recvs_on_link;
    std::map<std::pair<int, int>, std::vector<Req*>> colls;            // (group, tag)
    completions.assign(G, 0);
    peak.assign(G, 0);
    executed_fwd.assign(G, 0);
    executed_bwd.assign(G, 0);
    useful_fwd.assign(G, 0);
    auto pos_of = [&](int gpu) { return s.ranks[gpu].position; };
    auto label = [&](int id) { return s.buffers.at(id).label; };

    bool progress = true;
    while (progress) {
      progress = false;
      for (int g = 0; g < G; ++g) {
        RankState& r = st[g];
        const auto& ops = s.ranks[g].ops;
        while (r.pc < ops.size()) {
          const Op& op = ops[r.pc];
          INFO("gpu " << g << " op " << r.pc << " kind " << static_cast<int>(op.kind)
                      << " layer " << op.layer << " step " << op.step);
          bool blocked = false;
          switch (op.kind) {
            case OpKind::kAlloc:
              REQUIRE(r.allocated.insert(op.buffer).second);
              r.mem += op.bytes;
              CHECK(op.bytes == doctest::Approx(s.buffers.at(op.buffer).bytes));
              peak[g] = std::max(peak[g], r.mem);
              for (int k = 0; k < s.buffers.at(op.buffer).blocks; ++k) r.content[op.buffer * kBlocks + k] = {};
              if (s.buffers.at(op.buffer).role == BufferRole::kKvOwn ||
                  s.buffers.at(op.buffer).role == BufferRole::kKvGathered)
                r.content[op.buffer * kBlocks].kv = pos_of(g);  // block 0: the own K,V
              break;
            case OpKind::kFree:
              REQUIRE(r.allocated.erase(op.buffer) == 1);
              for (int k = 0; k < s.buffers.at(op.buffer).blocks; ++k) {
                REQUIRE(r.pending_send[op.buffer * kBlocks + k] == 0);
                REQUIRE(r.pending_recv[op.buffer * kBlocks + k] == 0);
              }
              r.mem -= s.buffers.at(op.buffer).bytes;
              break;
            case OpKind::kSend:
            case OpKind::kRecv: {
              REQUIRE(r.allocated.count(op.buffer));
              REQUIRE(!r.reqs.count(op.request));
              const int at = key(g, op.buffer, op.kv_owner);
              auto req = std::make_unique<Req>(Req{op.kind, g, op.peer, op.tag, op.buffer, op.bytes, op.phase, false, {}, at});
              Req* q = req.get();
              all.push_back(std::move(req));
              r.reqs[op.request] = q;
              // Both ends must state the same message (NCCL would truncate or hang).
              auto agree = [&](const Req* a, const Req* b) {
                CHECK(a->tag == b->tag);
                CHECK(a->bytes == doctest::Approx(b->bytes));
                CHECK(a->phase == b->phase);
              };
              if (op.kind == OpKind::kSend) {
                REQUIRE(r.pending_recv[at] == 0);  // sending what is still arriving
                r.pending_send[at]++;
                q->payload = r.content[at];
                // A gathered block's message carries the block it names.
                if (s.buffers.at(op.buffer).blocks > 1)
                  CHECK((q->payload.kv >= 0 ? q->payload.kv : q->payload.dkv) == op.kv_owner);
                auto key = std::make_tuple(g, op.peer, sends_on_link[{g, op.peer}]++);
                open_sends[key] = q;
                if (auto it = open_recvs.find(key); it != open_recvs.end()) {
                  agree(q, it->second);
                  it->second->payload = q->payload;
                  it->second->matched = q->matched = true;
                }
                sent_bytes += op.bytes;
                ++messages;
              } else {
                REQUIRE(r.pending_send[at] == 0);  // overwriting what is being sent
                r.pending_recv[at]++;
                auto key = std::make_tuple(op.peer, g, recvs_on_link[{op.peer, g}]++);
                open_recvs[key] = q;
                if (auto it = open_sends.find(key); it != open_sends.end()) {
                  agree(it->second, q);
                  q->payload = it->second->payload;
                  it->second->matched = q->matched = true;
                }
              }
              break;
            }
            case OpKind::kCollective: {
              REQUIRE(!r.reqs.count(op.request));
              auto req = std::make_unique<Req>(Req{op.kind, g, op.group, op.tag, op.buffer, op.bytes, -1, false, {}});
              Req* q = req.get();
              all.push_back(std::move(req));
              r.reqs[op.request] = q;
              auto& members = colls[{op.group, op.tag}];
              members.push_back(q);
              if (members.size() == s.groups.at(op.group).size()) {
                for (Req* x : members) {
                  CHECK(x->bytes == doctest::Approx(op.bytes));
                  x->matched = true;
                }
              }
              break;
            }
            case OpKind::kWait: {
              REQUIRE(r.reqs.count(op.request));
              Req* q = r.reqs[op.request];
              if (!q->matched) {
                blocked = true;
                break;
              }
              if (q->kind == OpKind::kSend) r.pending_send[q->at]--;
              if (q->kind == OpKind::kRecv) {
                r.pending_recv[q->at]--;
                r.content[q->at] = q->payload;
                if (s.buffers.at(q->buffer).blocks > 1)  // it is the block it was received as
                  CHECK((q->payload.kv >= 0 ? q->payload.kv : q->payload.dkv) ==
                        (pos_of(g) - (q->at % kBlocks) + P) % P);
              }
              r.reqs.erase(op.request);
              break;
            }
            case OpKind::kCompute:
              if (op.compute == ComputeKind::kAttentionForward ||
                  op.compute == ComputeKind::kAttentionBackward) {
                // Inside a pass of the same direction (kBeginPass says where it starts).
                CHECK(r.in_pass);
                CHECK(r.pass_backward == (op.compute == ComputeKind::kAttentionBackward));
              }
              compute(g, op, r);
              break;
            case OpKind::kBeginPass:
              r.in_pass = true;
              r.pass_backward = op.compute == ComputeKind::kAttentionBackward;
              break;
            case OpKind::kOwnGrad: {
              // The backward pass names the buffer that holds the own complete dK,dV.
              REQUIRE(r.allocated.count(op.buffer));
              const int at = key(g, op.buffer, op.kv_owner);
              REQUIRE(r.pending_recv[at] == 0);
              CHECK(r.pass_backward);
              CHECK_MESSAGE(is_complete(g, r.content[at]), "own dK,dV incomplete in " << label(op.buffer));
              if (is_complete(g, r.content[at])) completions[g]++;
              r.in_pass = false;
              break;
            }
          }
          if (blocked) break;
          ++r.pc;
          progress = true;
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      INFO("gpu " << g);
      CHECK_MESSAGE(st[g].pc == s.ranks[g].ops.size(), "deadlock: stuck at op " << st[g].pc);
      CHECK(st[g].reqs.empty());
      CHECK(st[g].allocated.empty());
      CHECK(st[g].mem == doctest::Approx(0).epsilon(1e-9));
    }
    CHECK(open_sends.size() == open_recvs.size());
  }

  bool is_complete(int gpu, const Content& c) const {
    const int pos = s.ranks[gpu].position;
    return c.dkv == pos && c.contrib == expected_contrib(pos);
  }

  void compute(int g, const Op& op, RankState& r) {
    auto check_readable = [&](int buffer, int at) {
      REQUIRE(r.allocated.count(buffer));
      REQUIRE(r.pending_recv[at] == 0);
    };
    auto check_writable = [&](int buffer, int at) {
      check_readable(buffer, at);
      REQUIRE(r.pending_send[at] == 0);
    };
    const int pos = s.ranks[g].position;
    switch (op.compute) {
      case ComputeKind::kAttentionForward:
      case ComputeKind::kAttentionBackward: {
        const bool bwd = op.compute == ComputeKind::kAttentionBackward;
        (bwd ? executed_bwd : executed_fwd)[g] += op.flops;
        if (!bwd) useful_fwd[g] += op.useful_flops;
        // A ring block (kv_owner's), or every block of gathered K,V (block k: pos - k's).
        const int blocks = s.buffers.at(op.buffer).blocks;
        if (bwd) CHECK(s.buffers.at(op.aux_buffer).blocks == blocks);
        for (int k = 0; k < blocks; ++k) {
          const int owner = blocks > 1 ? (pos - k + P) % P : op.kv_owner;
          const int at = op.buffer * kBlocks + k;
          check_readable(op.buffer, at);
          CHECK(r.content[at].kv == owner);
          const PairFlops& f = pairs[pos][owner];
          if (f.executed > 0) visits[{g, op.layer, op.backward, static_cast<int>(op.compute), owner}]++;
          if (bwd) {
            check_writable(op.aux_buffer, op.aux_buffer * kBlocks + k);
            Content c;
            c.dkv = owner;
            if (f.executed > 0) c.contrib = {pos};
            r.content[op.aux_buffer * kBlocks + k] = c;
          }
        }
        break;
      }
      case ComputeKind::kAccumulate: {
        const int at = key(g, op.buffer, op.kv_owner), from_at = op.aux_buffer * kBlocks;
        check_writable(op.buffer, at);
        check_readable(op.aux_buffer, from_at);
        Content& into = r.content[at];
        const Content& from = r.content[from_at];
        REQUIRE(into.dkv >= 0);
        CHECK(into.dkv == from.dkv);
        for (int q : from.contrib) CHECK_MESSAGE(into.contrib.insert(q).second, "position " << q << " added twice");
        break;
      }
      default:
        break;
    }
  }
};

// Runs the checker and the per-pass visit/FLOP assertions for an attention workload.
void check_attention(const Plan& plan, const ModelSpec& m) {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, plan.job.gpus);
  const OpSchedule s = generate_schedule(plan, m, fabric);
  Checker ck(s, plan, m);
  ck.run();
  const int P = plan.choice.cp;
  const bool full = plan.choice.checkpointing == Checkpointing::kFull;
  for (int g = 0; g < plan.job.gpus; ++g) {
    const int pos = s.ranks[g].position;
    INFO("gpu " << g << " position " << pos);
    CHECK(ck.completions[g] == 1);  // own dK,dV complete exactly once
    for (int k = 0; k < P; ++k) {
      const int want = ck.pairs[pos][k].executed > 0 ? 1 : 0;
      INFO("kv owner " << k);
      CHECK(ck.visits[{g, 0, false, static_cast<int>(ComputeKind::kAttentionForward), k}] == want);
      CHECK(ck.visits[{g, 0, true, static_cast<int>(ComputeKind::kAttentionBackward), k}] == want);
      CHECK(ck.visits[{g, 0, true, static_cast<int>(ComputeKind::kAttentionForward), k}] ==
            (full ? want : 0));
    }
  }
  // Executed FLOPs summed over the ring equal the closed form (per ring = per sequence).
  const RingAttentionWork w = ring_attention_work({plan.choice.load_balance, plan.job.seq_len, P},
                                                  plan.job.causal, m.heads, m.head_dim,
                                                  {plan.choice.block_q, plan.choice.block_kv});
  double fwd = 0, bwd = 0, useful = 0;
  for (int g = 0; g < plan.job.gpus; ++g) {
    fwd += ck.executed_fwd[g];
    bwd += ck.executed_bwd[g];
    useful += ck.useful_fwd[g];
  }
  const int rings = plan.choice.dp;
  CHECK(fwd == doctest::Approx(rings * w.executed_total * (full ? 2 : 1)));
  CHECK(bwd == doctest::Approx(rings * w.executed_total * kBackwardFlopsFactor));
  CHECK(useful == doctest::Approx(rings * w.useful_total));
}

TEST_CASE("schedule: every variant's ring passes are complete, matched and hazard-free") {
  for (Schedule sched : {Schedule::kFlat, Schedule::kBidirectional}) {
    for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
      for (bool causal : {true, false}) {
        for (int P : {1, 2, 3, 4, 5, 6, 7, 8, 16}) {
          CAPTURE(std::string(to_string(sched)));
          CAPTURE(std::string(to_string(lb)));
          CAPTURE(causal);
          CAPTURE(P);
          check_attention(make_plan(P, P, sched, lb, causal, 256 * P), small_model(8, 2));
        }
      }
    }
  }
}

// All-gather CP: block k of the gathered K,V is position pos - k's, the attention op runs
// against each, and every position's dK,dV partials are reduce-scattered home complete:
// around the ring, or under a sliding window (contiguous chunks: the window's blocks only)
// back towards their owners. FLOPs are the whole sequence's, 1/P on each GPU.
TEST_CASE("schedule: all_gather gathers each block and reduce-scatters dK,dV home") {
  auto check = [](const Plan& plan, const ModelSpec& m, int blocks) {
    const Topology topo = load_topology("dgx-a100-ib");
    const Fabric fabric(topo, plan.job.gpus);
    const OpSchedule s = generate_schedule(plan, m, fabric);
    CHECK(message_contract_violation(s).empty());
    int gathered_buffers = 0;
    for (const BufferInfo& b : s.buffers)
      if (gathered(b.role)) {
        CHECK(b.blocks == blocks);
        ++gathered_buffers;
      }
    CHECK(gathered_buffers == 2);  // the K,V and their dK,dV
    Checker ck(s, plan, m);
    ck.run();
    const int P = plan.choice.cp;
    for (int g = 0; g < plan.job.gpus; ++g) {
      const int pos = s.ranks[g].position;
      INFO("gpu " << g << " position " << pos);
      CHECK(ck.completions[g] == 1);
      for (int k = 0; k < blocks; ++k) {
        const int owner = (pos - k + P) % P;
        const int want = ck.pairs[pos][owner].executed > 0 ? 1 : 0;
        INFO("kv owner " << owner);
        CHECK(ck.visits[{g, 0, false, static_cast<int>(ComputeKind::kAttentionForward), owner}] == want);
        CHECK(ck.visits[{g, 0, true, static_cast<int>(ComputeKind::kAttentionBackward), owner}] == want);
      }
    }
    const RingAttentionWork whole =
        ring_attention_work({LoadBalance::kContiguous, plan.job.seq_len, 1}, plan.job.causal, m.heads, m.head_dim,
                            {plan.choice.block_q, plan.choice.block_kv}, effective_window(m, plan.job));
    double fwd = 0;
    for (int g = 0; g < plan.job.gpus; ++g) fwd += ck.executed_fwd[g];
    CHECK(fwd == doctest::Approx(plan.choice.dp * whole.executed_total));
  };
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    for (bool causal : {true, false}) {
      for (int P : {2, 3, 4, 5, 8, 16}) {
        CAPTURE(std::string(to_string(lb)));
        CAPTURE(causal);
        CAPTURE(P);
        Plan p = make_plan(P, P, Schedule::kFlat, lb, causal, 256 * P);
        p.choice.strategy = Strategy::kAllGatherCp;
        check(p, small_model(8, 2), P);
      }
    }
  }
  // Two rings of 4 with sub-blocks; and a window of 300 tokens over contiguous chunks of
  // 256: each position gathers itself and the two before (3 blocks of 8).
  Plan two = make_plan(8, 4, Schedule::kFlat, LoadBalance::kZigzag, true, 1024);
  two.choice.strategy = Strategy::kAllGatherCp;
  two.choice.kv_subblocks = 2;
  check(two, small_model(4, 4), 4);
  ModelSpec windowed = small_model(8, 2);
  windowed.sliding_window = 300;
  Plan win = make_plan(8, 8, Schedule::kFlat, LoadBalance::kContiguous, true, 2048);
  win.choice.strategy = Strategy::kAllGatherCp;
  check(win, windowed, 3);
}

// The all-to-alls of a2a (DeepSpeed-Ulysses: the group is the ring) and a2a+p2p (USP: groups
// of cp_a2a GPUs around rings), run symbolically: a pack fills the send staging's block j
// with (payload, this member, j); a message carries its block to the member it names and
// lands in the receive block of the member it came from; each unpack must find, in every
// other member's block, the payload it unpacks, from that member, for this one. Per pass:
// the attention ops come after the inbound unpack (Q,K,V forward, dO backward), and the
// outbound all-to-all (out; dQ,dK,dV before the kOwnGrad) after them. Messages are whole
// payloads: never split into sub-blocks, of the bytes the planner prices.
TEST_CASE("schedule: the all-to-alls of a2a and a2a+p2p deliver every payload block to its member") {
  struct Block {
    A2aPayload what = A2aPayload::kNone;
    int from = -1, to = -1;
    bool operator==(const Block& o) const { return what == o.what && from == o.from && to == o.to; }
  };
  auto check = [](const Plan& plan, const ModelSpec& m) {
    const Topology topo = load_topology("dgx-a100-ib");
    const Fabric fabric(topo, plan.job.gpus);
    const OpSchedule s = generate_schedule(plan, m, fabric);
    REQUIRE(message_contract_violation(s).empty());
    // A rank's index in its group: its ring position (a2a), or (tp 1) its ring's index
    // among the cp_a2a rings of its replica (a2a+p2p, schedule.cc).
    const bool usp = plan.choice.strategy == Strategy::kUsp;
    const int P = usp ? plan.choice.cp_a2a : plan.choice.cp;
    auto member = [&](const RankSchedule& rs) { return usp ? rs.ring % P : rs.position; };
    // Per peer: Q,K,V (or their gradients) of c tokens of 1/P of the heads, the output (or dO).
    const double c = static_cast<double>(plan.job.seq_len) / plan.choice.cp, e = topo.gpu.element_bytes;
    const double qkv = c * (m.heads + 2.0 * m.kv_heads) * m.head_dim * e / P, out = c * m.heads * m.head_dim * e / P;
    if (usp) {
      const A2aBytes b = a2a_bytes(m, plan.choice, plan.job.seq_len, topo.gpu.element_bytes);
      CHECK(b.qkv == doctest::Approx(qkv));
      CHECK(b.out == doctest::Approx(out));
    }
    for (const BufferInfo& b : s.buffers)
      if (a2a_staging(b.role)) CHECK(b.blocks == P);
    // The messages on each link (src gpu, dst gpu), in posting order, as their senders packed them.
    std::map<std::pair<int, int>, std::vector<Block>> links;
    for (const RankSchedule& rs : s.ranks) {
      for (const Op& op : rs.ops)
        if (op.kind == OpKind::kSend && a2a_staging(s.buffers[static_cast<size_t>(op.buffer)].role)) {
          CHECK(member(s.ranks[static_cast<size_t>(op.peer)]) == op.kv_owner);
          links[{rs.gpu, op.peer}].push_back({op.a2a, member(rs), op.kv_owner});
        }
    }
    std::map<std::pair<int, int>, size_t> received;
    for (const RankSchedule& rs : s.ranks) {
      INFO("gpu " << rs.gpu);
      std::vector<Block> recv_blocks(static_cast<size_t>(P));
      A2aPayload packed = A2aPayload::kNone;
      int sends = 0, recvs = 0, outstanding = 0, attention = 0, own_grads = 0, view_grads = 0;
      std::vector<A2aPayload> unpacked;  // this pass's, in order
      for (const Op& op : rs.ops) {
        const bool staging = op.buffer >= 0 && a2a_staging(s.buffers[static_cast<size_t>(op.buffer)].role);
        if (op.kind == OpKind::kBeginPass) unpacked.clear();
        if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kA2aPack) {
          packed = op.a2a;
          sends = recvs = 0;
        }
        if ((op.kind == OpKind::kSend || op.kind == OpKind::kRecv) && staging) {
          CHECK(op.a2a == packed);
          const bool inbound = packed == A2aPayload::kQkv || packed == A2aPayload::kDout;
          const bool qkv_sized = packed == A2aPayload::kQkv || packed == A2aPayload::kDqkv;
          CHECK(op.bytes == doctest::Approx(qkv_sized ? qkv : out));
          if (!usp) CHECK(op.step == (inbound ? 0 : 1));
          ++outstanding;
          if (op.kind == OpKind::kSend) {
            ++sends;
          } else {
            ++recvs;
            const size_t n = received[{op.peer, rs.gpu}]++;
            const auto& sent = links[{op.peer, rs.gpu}];
            REQUIRE(n < sent.size());
            recv_blocks[static_cast<size_t>(op.kv_owner)] = sent[n];
          }
        }
        if (op.kind == OpKind::kWait && op.a2a != A2aPayload::kNone) --outstanding;
        if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kA2aUnpack) {
          CHECK(op.a2a == packed);
          CHECK(outstanding == 0);
          CHECK(sends == P - 1);
          CHECK(recvs == P - 1);
          for (int k = 0; k < P; ++k)
            if (k != member(rs)) CHECK(recv_blocks[static_cast<size_t>(k)] == Block{op.a2a, k, member(rs)});
          unpacked.push_back(op.a2a);
          recv_blocks.assign(static_cast<size_t>(P), Block{});
        }
        if (op.kind == OpKind::kCompute &&
            (op.compute == ComputeKind::kAttentionForward || op.compute == ComputeKind::kAttentionBackward)) {
          ++attention;
          REQUIRE(unpacked.size() == 1);
          CHECK(unpacked[0] == (op.compute == ComputeKind::kAttentionForward ? A2aPayload::kQkv : A2aPayload::kDout));
        }
        if (op.kind == OpKind::kOwnGrad) {
          // On the staging: the rank's own dK,dV, after the dQ,dK,dV all-to-all; a2a+p2p's
          // ring names its view's first, between the two all-to-alls.
          if (staging) {
            REQUIRE(unpacked.size() == 2);
            CHECK(unpacked[1] == A2aPayload::kDqkv);
            ++own_grads;
          } else {
            CHECK(usp);
            CHECK(unpacked.size() == 1);
            ++view_grads;
          }
        }
        if (op.kind == OpKind::kCompute && (op.compute == ComputeKind::kA2aPack || op.compute == ComputeKind::kA2aUnpack)) {
          CHECK(op.kv_owner == member(rs));
          // Memory bound: reading and writing the rank's whole payload, P messages' bytes.
          const bool qkv_sized = op.a2a == A2aPayload::kQkv || op.a2a == A2aPayload::kDqkv;
          CHECK(op.flops == doctest::Approx(2.0 * P * (qkv_sized ? qkv : out)));
          CHECK(op.efficiency == doctest::Approx(topo.gpu.hbm_bytes_per_s / topo.gpu.peak_flops));
        }
      }
      // The attention workload: one layer, forward and backward (a2a+p2p: a ring step each).
      CHECK(attention == (usp ? 2 * plan.choice.cp / P : 2));
      CHECK(own_grads == 1);
      CHECK(view_grads == (usp ? 1 : 0));
    }
    for (const auto& [link, sent] : links) CHECK(received[link] == sent.size());
  };
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kZigzag}) {
    for (int P : {2, 4, 8}) {
      CAPTURE(std::string(to_string(lb)));
      CAPTURE(P);
      Plan p = make_plan(P, P, Schedule::kFlat, lb, true, 256 * P);
      p.choice.strategy = Strategy::kUlysses;
      check(p, small_model(8, 8));
    }
  }
  // GQA over 2 members, two rings of them, and sub-blocks the all-to-all must not split.
  Plan two = make_plan(4, 2, Schedule::kFlat, LoadBalance::kZigzag, true, 1024);
  two.choice.strategy = Strategy::kUlysses;
  two.choice.kv_subblocks = 2;
  check(two, small_model(8, 2));
  // a2a+p2p: groups of 4 inside a node around rings of 2 across, and of 2 around rings of 4.
  for (int a2a : {4, 2}) {
    CAPTURE(a2a);
    Plan usp = make_plan(16, 8, Schedule::kFlat, LoadBalance::kZigzag, true, 4096);
    usp.choice.strategy = Strategy::kUsp;
    usp.choice.cp_a2a = a2a;
    check(usp, small_model(8, 4));
  }
}

TEST_CASE("schedule: hierarchical ring over several nodes, with sub-blocks and DP") {
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kZigzag}) {
    for (int gpus : {8, 16, 24}) {
      CAPTURE(std::string(to_string(lb)));
      CAPTURE(gpus);
      Plan p = make_plan(gpus, gpus, Schedule::kTwoLevel, lb, true, 128 * gpus);
      p.choice.kv_subblocks = 2;
      check_attention(p, small_model(4, 4));
    }
  }
  // Two rings of 8 (DP 2), flat and bidirectional, full checkpointing (recompute pass).
  for (Schedule sched : {Schedule::kFlat, Schedule::kBidirectional, Schedule::kTwoLevel}) {
    CAPTURE(std::string(to_string(sched)));
    Plan p = make_plan(16, 8, sched, LoadBalance::kStriped, true, 1024);
    p.choice.checkpointing = Checkpointing::kFull;
    std::reverse(p.choice.order.begin(), p.choice.order.end());  // any permutation
    check_attention(p, small_model(8, 2));
  }
}

// The message contract (planner/op_list.h) for every schedule, load balance, sub-blocking,
// pass set and checkpointing policy up to 16 ranks; the two-level ring at 16 and 32.
TEST_CASE("schedule: every link pairs its sends and receives in posting order") {
  // Any ring size fits cpu-local's one 64-rank node; the two-level ring needs DGX nodes.
  const Topology one_node = load_topology("cpu-local");
  const Topology dgx = load_topology("dgx-a100-ib");
  int checked = 0;
  auto check = [&](const Plan& p, const ModelSpec& m) {
    const Fabric fabric(p.choice.schedule == Schedule::kTwoLevel ? dgx : one_node, p.job.gpus);
    const OpSchedule s = generate_schedule(p, m, fabric);
    const std::string v = message_contract_violation(s);
    CHECK_MESSAGE(v.empty(), v);
    ++checked;
  };
  for (Schedule sched : {Schedule::kFlat, Schedule::kBidirectional}) {
    for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
      for (int P = 1; P <= 16; ++P) {
        for (int sub : {1, 2, 3}) {
          for (Passes passes : {Passes::kForward, Passes::kForwardBackward}) {
            for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kFull}) {
              CAPTURE(std::string(to_string(sched)));
              CAPTURE(std::string(to_string(lb)));
              CAPTURE(P);
              CAPTURE(sub);
              Plan p = make_plan(P, P, sched, lb, true, 64 * P);
              p.job.passes = passes;
              p.choice.kv_subblocks = sub;
              p.choice.checkpointing = ck;
              check(p, small_model(4, 2));
            }
          }
        }
      }
    }
  }
  for (int gpus : {16, 32}) {
    for (int sub : {1, 2}) {
      CAPTURE(gpus);
      CAPTURE(sub);
      Plan p = make_plan(gpus, gpus, Schedule::kTwoLevel, LoadBalance::kZigzag, true, 64 * gpus);
      p.choice.kv_subblocks = sub;
      check(p, small_model(4, 2));
      // DP 2 and a whole training step (FSDP collectives beside the rings).
      Plan q = make_plan(gpus, gpus / 2, Schedule::kTwoLevel, LoadBalance::kStriped, true,
                         64 * gpus, Workload::kStep);
      q.choice.kv_subblocks = sub;
      check(q, small_model(4, 2));
    }
  }
  CHECK(checked == 2 * 3 * 16 * 3 * 2 * 2 + 8);
}

TEST_CASE("schedule: two swapped receives break the contract, named by link and message") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 4);
  const Plan p = make_plan(4, 4, Schedule::kFlat, LoadBalance::kZigzag, true, 1024);
  OpSchedule s = generate_schedule(p, small_model(4, 2), fabric);
  REQUIRE(message_contract_violation(s).empty());
  // Rank 1's first phase with two receives from rank 0 (backward: K,V and accumulator).
  auto& ops = s.ranks[1].ops;
  size_t a = ops.size(), b = ops.size();
  for (size_t i = 0; i < ops.size() && b == ops.size(); ++i) {
    if (ops[i].kind != OpKind::kRecv || ops[i].peer != 0) continue;
    for (size_t j = i + 1; j < ops.size() && ops[j].phase == ops[i].phase; ++j) {
      if (ops[j].kind == OpKind::kRecv && ops[j].peer == 0) {
        a = i;
        b = j;
        break;
      }
    }
  }
  REQUIRE(b < ops.size());
  CHECK(ops[a].bytes != ops[b].bytes);  // K,V (bf16) against dK,dV (fp32)
  std::swap(ops[a], ops[b]);
  const std::string v = message_contract_violation(s);
  CHECK(v.find("link 0 -> 1, message ") == 0);
  CHECK(v.find("the sender posts tag") != std::string::npos);
  CHECK(v.find("the receiver tag") != std::string::npos);
}

TEST_CASE("schedule: a request never waited for, or waited for twice, breaks the contract") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 4);
  const Plan p = make_plan(4, 4, Schedule::kFlat, LoadBalance::kZigzag, true, 1024);
  const OpSchedule good = generate_schedule(p, small_model(4, 2), fabric);
  REQUIRE(message_contract_violation(good).empty());
  auto first_wait = [](const std::vector<Op>& ops) {
    return std::find_if(ops.begin(), ops.end(), [](const Op& op) { return op.kind == OpKind::kWait; });
  };
  OpSchedule dropped = good;
  auto& ops = dropped.ranks[2].ops;
  const auto w = first_wait(ops);
  REQUIRE(w != ops.end());
  const int request = w->request;
  ops.erase(w);
  std::string v = message_contract_violation(dropped);
  CHECK(v.find("rank 2, op ") == 0);
  CHECK(v.find("request " + std::to_string(request) + " is never waited for") != std::string::npos);
  OpSchedule twice = good;
  auto& ops2 = twice.ranks[2].ops;
  ops2.insert(first_wait(ops2) + 1, *first_wait(ops2));
  v = message_contract_violation(twice);
  CHECK(v.find("rank 2, op ") == 0);
  CHECK(v.find("waits for request " + std::to_string(request) + ", which is not in flight") != std::string::npos);
}

TEST_CASE("schedule: a group's members post its collectives in one order, or the contract names the first that differs") {
  // NCCL and MPI match a communicator's collectives by call order alone.
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 16);
  Plan p = make_plan(16, 8, Schedule::kFlat, LoadBalance::kZigzag, true, 8192, Workload::kStep);
  p.choice.sharding = Sharding::kFsdp;
  const OpSchedule good = generate_schedule(p, small_model(8, 2, 3), fabric);
  REQUIRE(message_contract_violation(good).empty());
  // Rank 3's first all-gather and first reduce-scatter trade places.
  OpSchedule swapped = good;
  auto& ops = swapped.ranks[3].ops;
  auto find = [&](CollectiveKind kind) {
    return std::find_if(ops.begin(), ops.end(),
                        [&](const Op& op) { return op.kind == OpKind::kCollective && op.collective == kind; });
  };
  const auto gather = find(CollectiveKind::kAllGather), scatter = find(CollectiveKind::kReduceScatter);
  REQUIRE(gather != ops.end());
  REQUIRE(scatter != ops.end());
  std::swap(gather->collective, scatter->collective);
  std::swap(gather->bytes, scatter->bytes);
  const std::string v = message_contract_violation(swapped);
  CHECK(v.find("group ") == 0);
  CHECK(v.find(", collective ") != std::string::npos);
  CHECK(v.find("rank 3's is reduce_scatter") != std::string::npos);
  CHECK(v.find("'s is all_gather") != std::string::npos);
  // One collective dropped: the member posts fewer than the others.
  OpSchedule dropped = good;
  auto& ops2 = dropped.ranks[5].ops;
  auto last = std::find_if(ops2.rbegin(), ops2.rend(), [](const Op& op) { return op.kind == OpKind::kCollective; });
  REQUIRE(last != ops2.rend());
  const int request = last->request;
  ops2.erase(std::next(last).base());
  ops2.erase(std::remove_if(ops2.begin(), ops2.end(),
                            [&](const Op& op) { return op.kind == OpKind::kWait && op.request == request; }),
             ops2.end());
  CHECK(message_contract_violation(dropped).find("rank 5 posts ") != std::string::npos);
}

TEST_CASE("schedule: posts across communicators have one order every rank keeps, or the contract names the cycle") {
  // Two ranks, two communicators over both (say FSDP's and TP's), and a link between them.
  auto collective = [](int group, int request) {
    Op op;
    op.kind = OpKind::kCollective;
    op.group = group;
    op.bytes = 1024;
    op.request = request;
    return op;
  };
  auto transfer = [](OpKind kind, int peer, int request) {
    Op op;
    op.kind = kind;
    op.peer = peer;
    op.tag = 7;
    op.phase = 0;
    op.bytes = 4096;
    op.request = request;
    return op;
  };
  auto wait = [](int request) {
    Op op;
    op.kind = OpKind::kWait;
    op.request = request;
    return op;
  };
  auto schedule = [&](std::vector<Op> zero, std::vector<Op> one) {
    OpSchedule s;
    s.groups = {{0, 1}, {0, 1}};
    s.ranks.resize(2);
    s.ranks[0].gpu = 0;
    s.ranks[1].gpu = 1;
    for (int r : {0, 1}) {
      std::vector<Op>& ops = r == 0 ? zero : one;
      const size_t posts = ops.size();
      for (size_t i = 0; i < posts; ++i) ops.push_back(wait(ops[i].request));
      s.ranks[static_cast<size_t>(r)].ops = ops;
    }
    return s;
  };
  // Both post group 0's, then group 1's: one order serves both.
  CHECK(message_contract_violation(schedule({collective(0, 0), collective(1, 1)}, {collective(0, 0), collective(1, 1)}))
            .empty());
  // Each group's own order holds, but rank 1 takes the groups the other way round.
  const std::string crossed =
      message_contract_violation(schedule({collective(0, 0), collective(1, 1)}, {collective(1, 0), collective(0, 1)}));
  CHECK(crossed.find("no one order of posts across communicators serves every rank (NCCL may hang): ") == 0);
  CHECK(crossed.find("collective 0 on group 0 before collective 0 on group 1") != std::string::npos);
  CHECK(crossed.find("collective 0 on group 1 before collective 0 on group 0") != std::string::npos);
  // A point-to-point phase against a collective: rank 0 sends first, rank 1 joins the
  // collective before it receives.
  const std::string p2p = message_contract_violation(
      schedule({transfer(OpKind::kSend, 1, 0), collective(0, 1)}, {collective(0, 0), transfer(OpKind::kRecv, 0, 1)}));
  CHECK(p2p.find("rank 0 posts phase 0 between ranks 0 and 1 before collective 0 on group 0") != std::string::npos);
  CHECK(p2p.find("rank 1 posts collective 0 on group 0 before phase 0 between ranks 0 and 1") != std::string::npos);
  CHECK(message_contract_violation(
            schedule({transfer(OpKind::kSend, 1, 0), collective(0, 1)}, {transfer(OpKind::kRecv, 0, 0), collective(0, 1)}))
            .empty());
}

TEST_CASE("schedule: step workload tracks the memory model's peak and balances alloc/free") {
  const Topology topo = load_topology("dgx-a100-ib");
  for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull}) {
    for (Schedule sched : {Schedule::kFlat, Schedule::kTwoLevel}) {
     for (bool chunked : {true, false}) {  // the loss in chunks, or over the whole logits
     // ringmaster's loop over sequences, or a framework's layer over the whole micro-batch
     for (Framework fw : {Framework::kAny, Framework::kPytorch}) {
      CAPTURE(std::string(to_string(ck)));
      CAPTURE(std::string(to_string(sched)));
      CAPTURE(chunked);
      CAPTURE(std::string(to_string(fw)));
      ModelSpec m = small_model(8, 2, 3);
      m.vocab = 128256;  // Llama 3's: the whole logits are the largest working set
      Plan p = make_plan(16, 8, sched, LoadBalance::kZigzag, true, 8192, Workload::kStep);
      p.job.chunked_loss = chunked;
      p.job.framework = fw;
      p.choice.checkpointing = ck;
      p.choice.grad_accum = 2;
      p.choice.micro_batch = sched == Schedule::kFlat ? 3 : 1;  // three sequences per micro-step
      const Fabric fabric(topo, 16);
      const OpSchedule s = generate_schedule(p, m, fabric);
      Checker c(s, p, m);
      c.run();
      const double want =
          memory_breakdown(m, p.choice, p.job.seq_len, topo.gpu, {.chunked_loss = chunked, .framework = fw}).total();
      for (int g = 0; g < 16; ++g) {
        CHECK(c.peak[g] == doctest::Approx(want).epsilon(1e-9));
        // Each layer's backward, each sequence of each micro-step.
        CHECK(c.completions[g] == 2 * p.choice.micro_batch * m.layers);
      }
      // One layer emitted stands for all three: same peak.
      ScheduleOptions one;
      one.max_layers = 1;
      const OpSchedule s1 = generate_schedule(p, m, fabric, one);
      CHECK(s1.layers_emitted == 1);
      CHECK(s1.layers_modelled == 3);
      Checker c1(s1, p, m);
      c1.run();
      CHECK(c1.peak[0] == doctest::Approx(want).epsilon(1e-9));
     }
     }
    }
  }
}

TEST_CASE("schedule: only_gpus emits the same ops for the chosen ranks") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 8);
  const ModelSpec m = small_model(8, 2);
  const Plan p = make_plan(8, 8, Schedule::kBidirectional, LoadBalance::kZigzag, true, 2048,
                           Workload::kLayer);
  const OpSchedule all = generate_schedule(p, m, fabric);
  ScheduleOptions o;
  o.only_gpus = {3};
  const OpSchedule one = generate_schedule(p, m, fabric, o);
  REQUIRE(one.ranks.size() == 8);
  CHECK(one.ranks[0].ops.empty());
  REQUIRE(one.ranks[3].ops.size() == all.ranks[3].ops.size());
  for (size_t i = 0; i < all.ranks[3].ops.size(); ++i) {
    const Op& a = all.ranks[3].ops[i];
    const Op& b = one.ranks[3].ops[i];
    CHECK(std::tie(a.kind, a.peer, a.tag, a.buffer, a.request) ==
          std::tie(b.kind, b.peer, b.tag, b.buffer, b.request));
  }
}

TEST_CASE("schedule: a plan that does not match its topology is bad input") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 8);
  const ModelSpec m = small_model(8, 2);
  Plan p = make_plan(8, 8, Schedule::kFlat, LoadBalance::kZigzag, true, 2048);
  SUBCASE("GPU count") {
    p.job.gpus = 16;
    CHECK_THROWS_WITH_AS(generate_schedule(p, m, fabric), doctest::Contains("gpus"), InputError);
  }
  SUBCASE("order not a permutation") {
    p.choice.order[3] = 0;
    CHECK_THROWS_WITH_AS(generate_schedule(p, m, fabric), doctest::Contains("permutation"), InputError);
  }
  SUBCASE("sequence not divisible") {
    p.job.seq_len = 2048 + 8;
    CHECK_THROWS_WITH_AS(generate_schedule(p, m, fabric), doctest::Contains("multiple of 16"), InputError);
  }
  SUBCASE("hierarchical ring smaller than a node") {
    p = make_plan(8, 4, Schedule::kTwoLevel, LoadBalance::kZigzag, true, 2048);
    CHECK_THROWS_WITH_AS(generate_schedule(p, m, fabric), doctest::Contains("two-level"), InputError);
  }
}

}  // namespace
}  // namespace rm
