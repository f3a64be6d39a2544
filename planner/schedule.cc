// The schedule generator (semantics in schedule.h). Each rank's op list is built by the
// same code for every rank, from the rank's ring position alone, so a rank can generate
// its own list (the executor) and still agree with its peers on every tag.
//
// Tags: every ring pass (one layer's attention forward, backward or recompute) is a
// "unit" numbered in emission order; a message's tag is
//   unit * stride + (stream * (P + 2) + step) * subblocks + subblock,
// with the step of the sender. Units are emitted in the same order on every rank of a
// ring, so the sender and the receiver compute the same tag, and no two messages between
// the same two GPUs share one.
#include "planner/schedule.h"

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>
#include <string>

#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/ring_order.h"

namespace rm {

namespace {

// Message streams of a ring pass (part of the tag).
enum Stream {
  kKvCw,       // K,V clockwise (flat ring, bidirectional cw, hierarchical inner)
  kKvCcw,      // K,V counter-clockwise (bidirectional)
  kAccCw,      // dK,dV accumulators along kKvCw
  kAccCcw,     // dK,dV accumulators along kKvCcw
  kKvOuter,    // hierarchical: K,V between nodes
  kAccOuter,   // hierarchical: dK,dV between nodes
  kReturnCw,   // bidirectional: final accumulators straight to their owners
  kReturnCcw,
  kStreamCount
};

int mod(int a, int m) { return ((a % m) + m) % m; }

// Buffer ids by label: the same label means the same buffer id on every rank.
class BufferTable {
 public:
  explicit BufferTable(std::vector<BufferInfo>& list) : list_(list) {}
  int id(const std::string& label, double bytes) {
    auto [it, added] = ids_.emplace(label, static_cast<int>(list_.size()));
    if (added) list_.push_back({label, bytes});
    return it->second;
  }

 private:
  std::vector<BufferInfo>& list_;
  std::map<std::string, int> ids_;
};

// Appends ops to one rank's list; tracks the request ids.
class RankEmitter {
 public:
  explicit RankEmitter(RankSchedule& rs) : rs_(rs) {}

  int layer = 0;
  int step = 0;
  bool backward = false;

  // A ring step starts: the next op carries the step's fixed sync cost (overhead_s).
  void begin_step(int s, double sync_s) {
    step = s;
    pending_sync_ += sync_s;
  }

  // Restores layer, step and backward when it goes out of scope.
  class Scope {
   public:
    explicit Scope(RankEmitter& em) : em_(em), layer_(em.layer), step_(em.step), bwd_(em.backward) {}
    ~Scope() {
      em_.layer = layer_;
      em_.step = step_;
      em_.backward = bwd_;
    }

   private:
    RankEmitter& em_;
    int layer_, step_;
    bool bwd_;
  };

  // A send or receive (`kind`) with `peer`.
  int transfer(OpKind kind, int peer, double bytes, int buffer, int tag) {
    Op op = base(kind);
    op.peer = peer;
    return post(op, bytes, buffer, tag);
  }
  int collective(CollectiveKind kind, int group, double bytes, int buffer, int tag) {
    Op op = base(OpKind::kCollective);
    op.collective = kind;
    op.group = group;
    return post(op, bytes, buffer, tag);
  }
  void wait(int request) {
    Op op = base(OpKind::kWait);
    op.request = request;
    rs_.ops.push_back(op);
  }
  void wait_all(std::vector<int>& requests) {
    for (int r : requests) wait(r);
    requests.clear();
  }
  void compute(ComputeKind kind, double flops, double useful, double efficiency, int buffer,
               int aux_buffer, int kv_owner = -1) {
    Op op = base(OpKind::kCompute);
    op.compute = kind;
    op.flops = flops;
    op.useful_flops = useful;
    op.efficiency = efficiency;
    op.buffer = buffer;
    op.aux_buffer = aux_buffer;
    op.kv_owner = kv_owner;
    rs_.ops.push_back(op);
  }
  void alloc(int buffer, double bytes) {
    Op op = base(OpKind::kAlloc);
    op.buffer = buffer;
    op.bytes = bytes;
    rs_.ops.push_back(op);
  }
  void free(int buffer) {
    Op op = base(OpKind::kFree);
    op.buffer = buffer;
    rs_.ops.push_back(op);
  }

 private:
  RankSchedule& rs_;
  int next_request_ = 0;
  double pending_sync_ = 0;

  Op base(OpKind kind) {
    Op op;
    op.overhead_s = pending_sync_;
    pending_sync_ = 0;
    op.kind = kind;
    op.layer = layer;
    op.step = step;
    op.backward = backward;
    return op;
  }
  // Appends a non-blocking op; returns the request id that wait() takes.
  int post(Op op, double bytes, int buffer, int tag) {
    op.bytes = bytes;
    op.buffer = buffer;
    op.tag = tag;
    op.request = next_request_++;
    rs_.ops.push_back(op);
    return op.request;
  }
};

// Everything one ring pass needs that is the same for every position and layer.
struct RingContext {
  int P = 1;
  int g = 1;  // hierarchical: positions per node
  Schedule schedule = Schedule::kFlat;
  int subblocks = 1;
  double kv_bytes = 0;
  double dkv_bytes = 0;
  double attention_efficiency = 0;
  double accumulate_efficiency = 0;  // memory-bound add, expressed as a fraction of peak
  double sync_s = 0;                 // per ring step (CostParams::step_sync_s)
  double backward_factor = 2.5;
  const std::vector<int>* ring_gpus = nullptr;  // GPU id of each position
  int tag_stride = 0;
  int gpu(int pos) const { return (*ring_gpus)[mod(pos, P)]; }
};

// Buffer ids one rank uses in a ring pass.
struct RingBufferIds {
  int kv_own = -1;       // the position's own K,V (a stored or recomputed activation)
  int kv[4] = {-1, -1, -1, -1};   // ring receive buffers (flat uses 0..1)
  int acc[4] = {-1, -1, -1, -1};  // dK,dV accumulators (flat uses 0..1)
  int dkv_partial = -1;
};

// One rank's ring passes (forward and backward) for one layer.
class RingPass {
 public:
  // `useful_scale`: 0 while recomputing (MFU counts model FLOPs once), else 1.
  RingPass(const RingContext& ctx, const RingBufferIds& ids, const std::vector<PairFlops>& pairs,
           int pos, RankEmitter& em, double useful_scale)
      : ctx_(ctx), b_(ids), pairs_(pairs), pos_(pos), em_(em), useful_scale_(useful_scale) {}

  // One pass: forward (attention forward, also the recompute under full checkpointing)
  // or backward. `unit`: the pass's number in emission order (see the tags at the top).
  void run(bool backward, int unit) {
    unit_ = unit;
    bwd_ = backward;
    switch (ctx_.schedule) {
      case Schedule::kFlat: flat(backward); break;
      case Schedule::kBidirectional: bidirectional(backward); break;
      case Schedule::kHierarchical: hierarchical(backward); break;
    }
  }

 private:
  const RingContext& ctx_;
  const RingBufferIds& b_;
  const std::vector<PairFlops>& pairs_;  // forward FLOPs against each owner's block
  int pos_;
  RankEmitter& em_;
  double useful_scale_;
  int unit_ = 0;
  bool bwd_ = false;

  int tag(Stream stream, int step, int sub) const {
    return unit_ * ctx_.tag_stride + (stream * (ctx_.P + 2) + step) * ctx_.subblocks + sub;
  }
  // A send or receive (`kind`) split into `subblocks` messages; appends their requests.
  void transfer(OpKind kind, int peer_pos, double bytes, int buffer, Stream stream, int step,
                std::vector<int>& reqs) {
    const int n = ctx_.subblocks;
    for (int k = 0; k < n; ++k) {
      reqs.push_back(
          em_.transfer(kind, ctx_.gpu(peer_pos), bytes / n, buffer, tag(stream, step, k)));
    }
  }
  void send(int peer_pos, double bytes, int buffer, Stream stream, int step,
            std::vector<int>& reqs) {
    transfer(OpKind::kSend, peer_pos, bytes, buffer, stream, step, reqs);
  }
  void recv(int peer_pos, double bytes, int buffer, Stream stream, int step,
            std::vector<int>& reqs) {
    transfer(OpKind::kRecv, peer_pos, bytes, buffer, stream, step, reqs);
  }
  // Attention against the block of `owner` held in `kv`; backward writes dK,dV into `aux`.
  // A fully masked block is skipped unless `always` (then it runs with 0 FLOPs, so a
  // fresh accumulator is written with zeros). Returns whether an op was emitted.
  bool attend(int owner, int kv, int aux, bool always = false) {
    const PairFlops& f = pairs_[mod(owner, ctx_.P)];
    if (f.executed <= 0 && !always) return false;
    // The kernel's backward reruns the scores (backward_factor x forward); model FLOPs
    // count the backward as 2x the forward, as the cost model's MFU does.
    const double factor = bwd_ ? ctx_.backward_factor : 1.0;
    const double useful = f.useful * (bwd_ ? kLinearBackwardFactor : 1.0) * useful_scale_;
    em_.compute(bwd_ ? ComputeKind::kAttentionBackward : ComputeKind::kAttentionForward,
                f.executed * factor, useful, ctx_.attention_efficiency, kv, aux,
                mod(owner, ctx_.P));
    return true;
  }
  // Backward of a block whose accumulator starts here (fresh `acc`).
  void attend_into(int owner, int kv, int acc) { attend(owner, kv, acc, true); }
  // Backward of a block whose accumulator arrives by `acc_reqs`: partial, wait, add.
  void attend_and_add(int owner, int kv, int acc, std::vector<int>& acc_reqs) {
    const bool computed = attend(owner, kv, b_.dkv_partial);
    em_.wait_all(acc_reqs);
    if (computed) accumulate(acc, b_.dkv_partial);
  }
  void accumulate(int into, int from) {
    const double elements = ctx_.dkv_bytes / 4;
    em_.compute(ComputeKind::kAccumulate, elements, 0, ctx_.accumulate_efficiency, into, from);
  }

  // Held K,V block at step s: own at s = 0, then the stream's two ring buffers alternately
  // (clockwise, also the flat ring: kv[0..1]; counter-clockwise: kv[2..3]).
  int cw_kv(int s) const { return s == 0 ? b_.kv_own : b_.kv[(s - 1) % 2]; }
  int ccw_kv(int s) const { return s == 0 ? b_.kv_own : b_.kv[2 + (s - 1) % 2]; }

  // --- Flat ring --------------------------------------------------------------------

  void flat(bool bwd) {
    const int P = ctx_.P;
    const int i = pos_;
    std::vector<int> kv_reqs, acc_recv, acc_send_prev, acc_send;
    for (int s = 0; s < P; ++s) {
      em_.begin_step(s, ctx_.sync_s);
      if (s < P - 1) {
        recv(i - 1, ctx_.kv_bytes, cw_kv(s + 1), kKvCw, s, kv_reqs);
        send(i + 1, ctx_.kv_bytes, cw_kv(s), kKvCw, s, kv_reqs);
      }
      const int owner = i - s;
      if (!bwd) {
        attend(owner, cw_kv(s), -1);
      } else if (P == 1) {
        attend_into(owner, cw_kv(s), b_.dkv_partial);
      } else {
        const int acc = b_.acc[s % 2];
        if (s == 0) {
          attend_into(owner, cw_kv(s), acc);
        } else {
          recv(i - 1, ctx_.dkv_bytes, acc, kAccCw, s - 1, acc_recv);
          attend_and_add(owner, cw_kv(s), acc, acc_recv);
        }
        // After step P-1 this goes to the block's owner (i + 1).
        send(i + 1, ctx_.dkv_bytes, acc, kAccCw, s, acc_send);
      }
      em_.wait_all(kv_reqs);
      em_.wait_all(acc_send_prev);
      std::swap(acc_send_prev, acc_send);
    }
    if (bwd && P > 1) {
      em_.step = P;
      // Own dK,dV back from i - 1, sent after its step P-1.
      recv(i - 1, ctx_.dkv_bytes, b_.acc[P % 2], kAccCw, P - 1, acc_recv);
      em_.wait_all(acc_recv);
      em_.wait_all(acc_send_prev);
    }
  }

  // --- Bidirectional ring -----------------------------------------------------------

  void bidirectional(bool bwd) {
    const int P = ctx_.P;
    const int i = pos_;
    const int last_cw = P / 2;          // ceil((P-1)/2)
    const int last_ccw = (P - 1) / 2;   // floor((P-1)/2)
    std::vector<int> kv_reqs, acc_recv, send_prev, send_now;
    for (int s = 0; s <= last_cw; ++s) {
      em_.begin_step(s, ctx_.sync_s);
      if (s < last_cw) {
        recv(i - 1, ctx_.kv_bytes, cw_kv(s + 1), kKvCw, s, kv_reqs);
        send(i + 1, ctx_.kv_bytes, cw_kv(s), kKvCw, s, kv_reqs);
      }
      if (s < last_ccw) {
        recv(i + 1, ctx_.kv_bytes, ccw_kv(s + 1), kKvCcw, s, kv_reqs);
        send(i - 1, ctx_.kv_bytes, ccw_kv(s), kKvCcw, s, kv_reqs);
      }
      if (!bwd) {
        attend(i - s, cw_kv(s), -1);
        if (s >= 1 && s <= last_ccw) attend(i + s, ccw_kv(s), -1);
      } else if (P == 1) {
        attend_into(i, b_.kv_own, b_.dkv_partial);
      } else {
        const int acw = b_.acc[s % 2];
        const bool ccw = s >= 1 && s <= last_ccw;
        const int accw = b_.acc[2 + s % 2];
        // Both streams' accumulators are received from the step's start, beside the K,V
        // transfers (the cost model's kv_dkv pattern), not the second one after the first
        // block's compute.
        std::vector<int> ccw_recv;
        if (s >= 1) recv(i - 1, ctx_.dkv_bytes, acw, kAccCw, s - 1, acc_recv);
        if (ccw && s >= 2) recv(i + 1, ctx_.dkv_bytes, accw, kAccCcw, s - 1, ccw_recv);
        // Clockwise stream: the own block's accumulator starts here at s = 0.
        if (s == 0) {
          attend_into(i, cw_kv(0), acw);
        } else {
          attend_and_add(i - s, cw_kv(s), acw, acc_recv);
        }
        if (s < last_cw) send(i + 1, ctx_.dkv_bytes, acw, kAccCw, s, send_now);
        // Counter-clockwise stream: accumulators start at s = 1, one position past the owner.
        if (ccw) {
          if (s == 1) {
            attend_into(i + s, ccw_kv(s), accw);
          } else {
            attend_and_add(i + s, ccw_kv(s), accw, ccw_recv);
          }
          if (s < last_ccw) send(i - 1, ctx_.dkv_bytes, accw, kAccCcw, s, send_now);
        }
      }
      em_.wait_all(kv_reqs);
      em_.wait_all(send_prev);
      std::swap(send_prev, send_now);
    }
    if (bwd && P > 1) {
      // Each stream's last accumulator goes straight to its owner; the own ones come back
      // from the positions that computed last with them (one exposed transfer).
      em_.step = last_cw + 1;
      std::vector<int> reqs;
      send(i - last_cw, ctx_.dkv_bytes, b_.acc[last_cw % 2], kReturnCw, 0, reqs);
      const int own_cw = b_.acc[(last_cw + 1) % 2];
      recv(i + last_cw, ctx_.dkv_bytes, own_cw, kReturnCw, 0, reqs);
      int own_ccw = -1;
      if (last_ccw >= 1) {
        send(i + last_ccw, ctx_.dkv_bytes, b_.acc[2 + last_ccw % 2], kReturnCcw, 0, reqs);
        own_ccw = b_.acc[2 + (last_ccw + 1) % 2];
        recv(i - last_ccw, ctx_.dkv_bytes, own_ccw, kReturnCcw, 0, reqs);
      }
      em_.wait_all(send_prev);
      em_.wait_all(reqs);
      if (own_ccw >= 0) accumulate(own_cw, own_ccw);
    }
  }

  // --- Hierarchical (double) ring ---------------------------------------------------
  // Position p = k*g + l; outer buffers kv[0..1], inner buffers kv[2..3]; inner
  // accumulators acc[0..1], outer accumulators acc[2..3].
  void hierarchical(bool bwd) {
    const int g = ctx_.g;
    const int n = ctx_.P / g;
    const int k = pos_ / g;
    const int l = pos_ % g;
    auto at = [&](int node, int local) { return mod(node, n) * g + mod(local, g); };
    auto outer_kv = [&](int o) { return o == 0 ? b_.kv_own : b_.kv[(o - 1) % 2]; };
    std::vector<int> outer_reqs, outer_acc_recv, outer_send_prev, outer_send_now;
    for (int o = 0; o < n; ++o) {
      em_.step = o * g;
      if (o < n - 1) {
        recv(at(k - 1, l), ctx_.kv_bytes, outer_kv(o + 1), kKvOuter, o, outer_reqs);
        send(at(k + 1, l), ctx_.kv_bytes, outer_kv(o), kKvOuter, o, outer_reqs);
      }
      if (bwd && o >= 1) {
        recv(at(k - 1, l), ctx_.dkv_bytes, b_.acc[2 + o % 2], kAccOuter, o - 1, outer_acc_recv);
      }
      // The inner cycle's result for the outer block lands here. A ring of one has no
      // accumulators (memory model): its dK,dV stay in the partial, as in the flat ring.
      const int result = ctx_.P == 1 ? b_.dkv_partial : o == 0 ? b_.acc[2] : b_.acc[g % 2];
      auto inner_kv = [&](int t) { return t == 0 ? outer_kv(o) : b_.kv[2 + (t - 1) % 2]; };
      std::vector<int> kv_reqs, acc_recv, send_prev, send_now;
      for (int t = 0; t < g; ++t) {
        const int step = o * g + t;
        em_.begin_step(step, ctx_.sync_s);
        if (t < g - 1) {
          recv(at(k, l - 1), ctx_.kv_bytes, inner_kv(t + 1), kKvCw, step, kv_reqs);
          send(at(k, l + 1), ctx_.kv_bytes, inner_kv(t), kKvCw, step, kv_reqs);
        }
        const int owner = at(k - o, l - t);
        if (!bwd) {
          attend(owner, inner_kv(t), -1);
        } else if (g == 1) {
          attend_into(owner, inner_kv(t), result);
        } else {
          const int acc = b_.acc[t % 2];
          if (t == 0) {
            attend_into(owner, inner_kv(t), acc);
          } else {
            recv(at(k, l - 1), ctx_.dkv_bytes, acc, kAccCw, step - 1, acc_recv);
            attend_and_add(owner, inner_kv(t), acc, acc_recv);
          }
          // A full inner cycle: after t = g-1 this reaches the GPU passing the block on.
          send(at(k, l + 1), ctx_.dkv_bytes, acc, kAccCw, step, send_now);
        }
        em_.wait_all(kv_reqs);
        em_.wait_all(send_prev);
        std::swap(send_prev, send_now);
      }
      if (!bwd) {
        em_.wait_all(outer_reqs);
        continue;
      }
      if (g > 1) {
        recv(at(k, l - 1), ctx_.dkv_bytes, result, kAccCw, o * g + g - 1, acc_recv);
        em_.wait_all(acc_recv);
        em_.wait_all(send_prev);
      }
      // Outer accumulator: the inner cycle's result plus what the previous node summed.
      const int outer_acc = b_.acc[2 + o % 2];
      if (o >= 1) {
        em_.wait_all(outer_acc_recv);
        accumulate(outer_acc, result);
      }
      if (n > 1) send(at(k + 1, l), ctx_.dkv_bytes, outer_acc, kAccOuter, o, outer_send_now);
      em_.wait_all(outer_reqs);
      em_.wait_all(outer_send_prev);
      std::swap(outer_send_prev, outer_send_now);
    }
    if (bwd && n > 1) {
      // Own dK,dV back from the previous node after its last outer step.
      em_.step = ctx_.P;
      recv(at(k - 1, l), ctx_.dkv_bytes, b_.acc[2 + n % 2], kAccOuter, n - 1, outer_acc_recv);
      em_.wait_all(outer_acc_recv);
      em_.wait_all(outer_send_prev);
    }
  }
};

}  // namespace

// --- Whole-schedule generation ----------------------------------------------------------

namespace {

// Stored activations of one layer (labels "<name>.L<layer>", see schedule.h).
struct LayerStore {
  int q = -1, kv = -1, out = -1, lse = -1, rest = -1;
};

class Generator {
 public:
  Generator(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
            const ScheduleOptions& options)
      : job_(plan.job),
        choice_(plan.choice),
        m_(model),
        fabric_(fabric),
        opt_(options),
        costs_(options.costs ? *options.costs : CostParams::from_topology(fabric.topology())),
        table_(out_.buffers) {}

  OpSchedule run() {
    validate();
    setup();
    out_.ranks.resize(G_);
    for (int gpu = 0; gpu < G_; ++gpu) out_.ranks[gpu].gpu = gpu;
    for (int r = 0; r < choice_.dp; ++r) {
      for (int p = 0; p < P_; ++p) {
        const int gpu = choice_.order[r * P_ + p];
        RankSchedule& rs = out_.ranks[gpu];
        rs.ring = r;
        rs.position = p;
        if (!wanted(gpu)) continue;
        emit_rank(rs, r, p);
      }
    }
    return std::move(out_);
  }

 private:
  const Job& job_;
  const PlanChoice& choice_;
  const ModelSpec& m_;
  const Fabric& fabric_;
  const ScheduleOptions& opt_;
  CostParams costs_;
  OpSchedule out_;
  BufferTable table_;

  int G_ = 1, P_ = 1, E_ = 1;  // GPUs, ring size, layers emitted
  int64_t c_ = 0;
  TokenLayout layout_{};
  RingBuffers rb_{};
  MemoryBreakdown mem_{};
  RingContext ring_{};
  std::vector<std::vector<int>> ring_gpus_;
  LinearFlops lin_{};
  double act_per_layer_ = 0;  // stored activation bytes of one layer (this policy)

  bool wanted(int gpu) const {
    return opt_.only_gpus.empty() ||
           std::find(opt_.only_gpus.begin(), opt_.only_gpus.end(), gpu) != opt_.only_gpus.end();
  }

  void validate() const {
    const std::string& w = opt_.where;
    auto num = [](auto v) { return std::to_string(v); };
    if (choice_.strategy != Strategy::kRing && choice_.strategy != Strategy::kFlashFsdp) {
      fail_input(w, "strategy",
                 std::string("the schedule generator runs ring and flash-fsdp plans (got ") +
                     to_string(choice_.strategy) + "; it is a planner baseline only)");
    }
    if (job_.gpus != fabric_.gpus()) {
      fail_input(w, "gpus", "must equal the topology's GPU count " + num(fabric_.gpus()) +
                                " (got " + num(job_.gpus) + ")");
    }
    if (choice_.cp < 1 || choice_.dp < 1 || choice_.cp * choice_.dp != job_.gpus) {
      fail_input(w, "cp, dp", "cp * dp must equal gpus = " + num(job_.gpus) + " (got cp " +
                                  num(choice_.cp) + ", dp " + num(choice_.dp) + ")");
    }
    if (choice_.strategy == Strategy::kFlashFsdp && choice_.cp != 1) {
      fail_input(w, "cp", "must be 1 for flash-fsdp (got " + num(choice_.cp) + ")");
    }
    check_order(choice_.order, job_.gpus, w);
    TokenLayout::check_divisible(choice_.load_balance, job_.seq_len, choice_.cp, w);
    if (m_.heads < 1 || m_.kv_heads < 1 || m_.heads % m_.kv_heads != 0) {
      fail_input(m_.source, "kv_heads", "must divide heads (" + num(m_.heads) + ")");
    }
    if (choice_.block_q < 1 || choice_.block_kv < 1) {
      fail_input(w, "block_q, block_kv", "must be >= 1");
    }
    if (choice_.kv_subblocks < 1) {
      fail_input(w, "kv_subblocks", "must be >= 1 (got " + num(choice_.kv_subblocks) + ")");
    }
    if (choice_.grad_accum < 1) {
      fail_input(w, "grad_accum", "must be >= 1 (got " + num(choice_.grad_accum) + ")");
    }
    const int g = fabric_.topology().gpus_per_node;
    if (choice_.schedule == Schedule::kHierarchical && (g < 1 || choice_.cp % g != 0)) {
      fail_input(w, "schedule",
                 "hierarchical needs cp to be a multiple of the GPUs per node " + num(g) +
                     " (got cp " + num(choice_.cp) + ")");
    }
    if (costs_.attention.efficiency(choice_.block_q, choice_.block_kv, m_.head_dim) <= 0) {
      fail_input(w, "block_q, block_kv",
                 "the attention tile does not fit the GPU's on-chip memory (got " +
                     num(choice_.block_q) + " x " + num(choice_.block_kv) + ")");
    }
  }

  void setup() {
    G_ = job_.gpus;
    P_ = choice_.cp;
    c_ = job_.seq_len / P_;
    layout_ = TokenLayout{choice_.load_balance, job_.seq_len, P_};
    const GpuSpec& gpu = fabric_.topology().gpu;
    rb_ = ring_buffers(m_, choice_, job_.seq_len, gpu);
    mem_ = memory_breakdown(m_, choice_, job_.seq_len, gpu);
    lin_ = linear_flops_per_token(m_);
    act_per_layer_ = static_cast<double>(c_) *
                     activation_bytes_per_token_layer(m_, choice_.checkpointing, gpu.element_bytes);

    E_ = m_.layers;
    if (opt_.max_layers > 0 && opt_.max_layers < m_.layers) {
      // The largest layer count <= max_layers that divides the model's layers.
      E_ = opt_.max_layers;
      while (m_.layers % E_ != 0) --E_;
    }
    // The attention and layer workloads are one layer by definition: nothing to extrapolate.
    const bool step = job_.workload == Workload::kStep;
    out_.layers_emitted = step ? E_ : 1;
    out_.layer_multiplier = step ? m_.layers / E_ : 1;
    if (out_.layer_multiplier > 1) {
      out_.note = std::to_string(out_.layers_emitted) + " of " + std::to_string(m_.layers) +
                  " identical layers emitted";
    }

    ring_gpus_.assign(choice_.dp, {});
    for (int r = 0; r < choice_.dp; ++r) {
      ring_gpus_[r].assign(choice_.order.begin() + r * P_, choice_.order.begin() + (r + 1) * P_);
    }
    // FSDP shards over all cp·dp GPUs; NCCL's ring for it is rail-aligned (the snake), as
    // in CostModel::fsdp_collective_s.
    if (G_ > 1) out_.groups.push_back(snake_order(fabric_));

    ring_.P = P_;
    ring_.g = choice_.schedule == Schedule::kHierarchical ? fabric_.topology().gpus_per_node : 1;
    ring_.schedule = choice_.schedule;
    ring_.subblocks = choice_.kv_subblocks;
    ring_.kv_bytes = rb_.kv_block;
    ring_.dkv_bytes = rb_.dkv_block;
    ring_.attention_efficiency =
        costs_.attention.efficiency(choice_.block_q, choice_.block_kv, m_.head_dim);
    ring_.accumulate_efficiency = costs_.accumulate_efficiency();
    ring_.sync_s = costs_.step_sync_s;
    ring_.backward_factor = costs_.attention.backward_factor;
    ring_.tag_stride = kStreamCount * (P_ + 2) * choice_.kv_subblocks;
  }


  // --- One rank --------------------------------------------------------------------------

  struct Rank {
    Rank(RankSchedule& rs, const RingContext& ring, int position) : em(rs), ctx(ring), pos(position) {}
    RankEmitter em;
    RingContext ctx;
    std::vector<PairFlops> pairs;  // forward FLOPs against each ring position's block
    RingBufferIds ids;
    int pos = 0;
    int units = 0;                 // ring passes emitted (tags)
    int collectives = 0;           // collectives emitted on group 0 (their tag)
    std::vector<int> gathers;      // outstanding all-gathers, oldest first
    int scatter = -1;              // outstanding reduce-scatter
    double useful_scale = 1;       // 0 while recomputing (MFU does not count recompute)
  };

  int buf(const std::string& label, double bytes) { return table_.id(label, bytes); }
  int buf_l(const char* name, int layer, double bytes) {
    return buf(std::string(name) + ".L" + std::to_string(layer), bytes);
  }

  void emit_rank(RankSchedule& rs, int ring, int pos) {
    Rank r(rs, ring_, pos);
    r.ctx.ring_gpus = &ring_gpus_[ring];
    const AttentionTiles tiles{choice_.block_q, choice_.block_kv};
    r.pairs.resize(P_);
    for (int j = 0; j < P_; ++j) {
      r.pairs[j] = attention_pair_flops(layout_, pos, j, job_.causal, m_.heads, m_.head_dim, tiles);
    }
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) r.ids.kv[k] = buf("kv" + std::to_string(k), rb_.kv_block);
    for (int k = 0; k < rb_.dkv_accumulators; ++k) {
      r.ids.acc[k] = buf("dkv_acc" + std::to_string(k), rb_.dkv_block);
    }
    r.ids.dkv_partial = buf("dkv_partial", rb_.dkv_partial);

    RankEmitter& em = r.em;
    em.layer = -1;
    const int states = buf("model_states", mem_.model_states);
    const int layer_bufs = buf("layer_buffers", mem_.layer_buffers);
    const int reserve = buf("runtime_reserve", mem_.runtime_reserve);
    em.alloc(reserve, mem_.runtime_reserve);
    em.alloc(states, mem_.model_states);
    em.alloc(layer_bufs, mem_.layer_buffers);
    const bool bwd = job_.passes == Passes::kForwardBackward;
    const int micro_steps = job_.workload == Workload::kStep ? choice_.grad_accum : 1;
    for (int micro = 0; micro < micro_steps; ++micro) {
      switch (job_.workload) {
        case Workload::kAttention: attention_workload(r, bwd); break;
        case Workload::kLayer: layer_workload(r, bwd); break;
        case Workload::kStep: step_workload(r, bwd); break;
      }
    }
    em.layer = -1;
    em.step = 0;
    if (job_.workload == Workload::kStep && bwd) {
      // Adam on this GPU's shard, memory bound: flops = parameters, at the efficiency that
      // gives CostParams::optimizer_s.
      const double shard_params = m_.params() / G_;
      em.compute(ComputeKind::kOptimizer, shard_params, 0,
                 1 / (costs_.optimizer_s(1) * costs_.peak_flops), states, -1);
    }
    em.free(layer_bufs);
    em.free(states);
    em.free(reserve);
  }

  // --- Workloads ---------------------------------------------------------------------------

  // Stored activations of the layers not emitted (identical to the emitted ones), and the
  // final hidden state where the workload stops short of the head, so the tracked peak is
  // the whole model's (memory_model.h).
  int alloc_other_activations(Rank& r) {
    double bytes = (m_.layers - out_.layers_emitted) * act_per_layer_;
    if (job_.workload != Workload::kStep) bytes += final_hidden_bytes();
    if (bytes == 0) return -1;
    const int id = buf("activations.other", bytes);
    r.em.alloc(id, bytes);
    return id;
  }
  double final_hidden_bytes() const {
    return static_cast<double>(c_) * m_.hidden * fabric_.topology().gpu.element_bytes;
  }

  // The attention tensors (Q, own K,V, out, lse) plus the rest of a layer's activations.
  LayerStore alloc_store(Rank& r, const std::string& suffix, double rest_bytes, const char* rest) {
    LayerStore s;
    s.q = buf("q" + suffix, rb_.q);
    s.kv = buf("kv_own" + suffix, rb_.kv_block);
    s.out = buf("out" + suffix, rb_.q);
    s.lse = buf("lse" + suffix, rb_.lse);
    s.rest = buf(rest + suffix, rest_bytes);
    for (int id : {s.q, s.kv, s.out, s.lse, s.rest}) r.em.alloc(id, out_.buffers[id].bytes);
    return s;
  }
  double attention_store_bytes() const { return 2 * rb_.q + rb_.kv_block + rb_.lse; }
  bool full_ckpt() const { return choice_.checkpointing == Checkpointing::kFull; }

  // What a layer keeps from its forward to its backward: everything it stores (none,
  // selective), or its input only (full).
  LayerStore alloc_layer_store(Rank& r, int layer) {
    const std::string suffix = ".L" + std::to_string(layer);
    if (!full_ckpt()) return alloc_store(r, suffix, act_per_layer_ - attention_store_bytes(), "act");
    LayerStore s;
    s.rest = buf("act" + suffix, act_per_layer_);
    r.em.alloc(s.rest, act_per_layer_);
    return s;
  }
  // Full checkpointing: the layer's activations while its forward runs or is rerun.
  LayerStore alloc_transient_store(Rank& r) {
    return alloc_store(r, "", rb_.recompute - attention_store_bytes(), "recompute");
  }
  void free_store(Rank& r, const LayerStore& s) {
    for (int id : {s.q, s.kv, s.out, s.lse, s.rest}) {
      if (id >= 0) r.em.free(id);
    }
  }

  void gemm(Rank& r, double flops_per_token, double factor = 1) {
    const double flops = flops_per_token * factor * static_cast<double>(c_);
    r.em.compute(ComputeKind::kGemm, flops, flops * r.useful_scale, costs_.gemm_flops_per_s() / costs_.peak_flops,
                 -1, -1);
  }

  // Forward ring pass with its transient buffers (fp32 output accumulator, score tiles,
  // K,V ring buffers).
  void attention_forward_phase(Rank& r, int kv_own) {
    RankEmitter& em = r.em;
    const int out_acc = buf("out_acc", rb_.out_acc);
    const int tiles = buf("score_tiles", rb_.score_tiles);
    em.alloc(out_acc, rb_.out_acc);
    em.alloc(tiles, rb_.score_tiles);
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) em.alloc(r.ids.kv[k], rb_.kv_block);
    r.ids.kv_own = kv_own;
    ring_pass(r, false);
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) em.free(r.ids.kv[k]);
    em.free(tiles);
    em.free(out_acc);
  }

  // Backward ring pass with the buffers the memory model's attention phase counts.
  void attention_backward_phase(Rank& r, int kv_own) {
    RankEmitter& em = r.em;
    std::vector<std::pair<int, double>> bufs = {
        {buf("dq", rb_.dq), rb_.dq},           {buf("dout", rb_.dout), rb_.dout},
        {buf("delta", rb_.delta), rb_.delta},  {buf("score_tiles", rb_.score_tiles), rb_.score_tiles},
        {r.ids.dkv_partial, rb_.dkv_partial}};
    for (int k = 0; k < rb_.kv_ring_buffers; ++k) bufs.push_back({r.ids.kv[k], rb_.kv_block});
    for (int k = 0; k < rb_.dkv_accumulators; ++k) bufs.push_back({r.ids.acc[k], rb_.dkv_block});
    for (auto [id, bytes] : bufs) em.alloc(id, bytes);
    r.ids.kv_own = kv_own;
    ring_pass(r, true);
    for (auto it = bufs.rbegin(); it != bufs.rend(); ++it) em.free(it->first);
  }

  void ring_pass(Rank& r, bool backward) {
    const RankEmitter::Scope keep(r.em);
    RingPass(r.ctx, r.ids, r.pairs, r.pos, r.em, r.useful_scale).run(backward, r.units++);
  }

  int alloc_grad_stream(Rank& r) {
    const int id = buf("grad_stream", rb_.grad_stream);
    r.em.alloc(id, rb_.grad_stream);
    return id;
  }

  // --- FSDP ----------------------------------------------------------------------------------
  // Parameters are sharded over all cp·dp GPUs (memory_model.h): each unit (a layer, the
  // embedding, the head) is all-gathered before use, one ahead (prefetch), and its
  // gradients reduce-scattered after its backward, one in flight.

  double layer_shard_bytes() const {
    return m_.layer_params() * fabric_.topology().gpu.element_bytes / G_;
  }
  double vocab_shard_bytes() const {
    return static_cast<double>(m_.vocab) * m_.hidden * fabric_.topology().gpu.element_bytes / G_;
  }
  void gather(Rank& r, double bytes) {
    if (G_ == 1) return;
    r.gathers.push_back(r.em.collective(CollectiveKind::kAllGather, 0, bytes,
                                        buf("layer_buffers", mem_.layer_buffers), r.collectives++));
  }
  void wait_gather(Rank& r) {
    if (G_ == 1) return;
    r.em.wait(r.gathers.front());
    r.gathers.erase(r.gathers.begin());
  }
  void scatter(Rank& r, double bytes) {
    if (G_ == 1) return;
    const int req = r.em.collective(CollectiveKind::kReduceScatter, 0, bytes,
                                    buf("layer_buffers", mem_.layer_buffers), r.collectives++);
    if (r.scatter >= 0) r.em.wait(r.scatter);
    r.scatter = req;
  }
  void finish_scatter(Rank& r) {
    if (r.scatter >= 0) r.em.wait(r.scatter);
    r.scatter = -1;
  }

  // --- Layers ------------------------------------------------------------------------------

  // A layer's forward or backward starts: prefetch the `prefetch` bytes all-gather (none at
  // 0), then wait for this layer's parameters.
  void begin_layer(Rank& r, int layer, bool backward, double prefetch) {
    r.em.layer = layer;
    r.em.backward = backward;
    r.em.step = 0;
    if (prefetch > 0) gather(r, prefetch);
    wait_gather(r);
  }

  // Forward of one layer; `next_gather` is what to prefetch (the next layer or the head).
  LayerStore layer_forward(Rank& r, int layer, double next_gather) {
    begin_layer(r, layer, false, next_gather);
    const LayerStore s = alloc_layer_store(r, layer);
    const LayerStore live = full_ckpt() ? alloc_transient_store(r) : s;
    gemm(r, lin_.qkv);
    attention_forward_phase(r, live.kv);
    gemm(r, lin_.out_proj);
    ffn_phase(r, [&] { gemm(r, lin_.ffn); });
    if (full_ckpt()) free_store(r, live);
    return s;
  }

  // Backward of one layer; `prev_gather` is the previous layer's all-gather to prefetch.
  void layer_backward(Rank& r, int layer, const LayerStore& s, double prev_gather) {
    begin_layer(r, layer, true, prev_gather);
    LayerStore live = s;
    if (full_ckpt()) {
      live = alloc_transient_store(r);
      recompute(r, [&] {
        gemm(r, lin_.qkv);
        attention_forward_phase(r, live.kv);
        gemm(r, lin_.out_proj);
      });
    }
    ffn_phase(r, [&] {
      const double redo = full_ckpt() ? lin_.ffn
                          : choice_.checkpointing == Checkpointing::kSelective
                              ? lin_.ffn_recompute_selective
                              : 0;
      if (redo > 0) recompute(r, [&] { gemm(r, redo); });
      gemm(r, lin_.ffn, kLinearBackwardFactor);
    });
    gemm(r, lin_.out_proj, kLinearBackwardFactor);
    attention_backward_phase(r, live.kv);
    gemm(r, lin_.qkv, kLinearBackwardFactor);
    if (full_ckpt()) free_store(r, live);
    free_store(r, s);
    scatter(r, layer_shard_bytes());
  }

  template <class F>
  void ffn_phase(Rank& r, F body) {
    const int chunk = buf("ffn_chunk", rb_.ffn_chunk);
    r.em.alloc(chunk, rb_.ffn_chunk);
    body();
    r.em.free(chunk);
  }
  // Recomputed work: executed, not counted as useful (MFU counts model FLOPs once).
  template <class F>
  void recompute(Rank& r, F body) {
    r.useful_scale = 0;
    body();
    r.useful_scale = 1;
  }

  void attention_workload(Rank& r, bool bwd) {
    RankEmitter& em = r.em;
    const int other = alloc_other_activations(r);
    em.layer = 0;
    const LayerStore s = alloc_layer_store(r, 0);
    const LayerStore live = full_ckpt() ? alloc_transient_store(r) : s;
    attention_forward_phase(r, live.kv);
    if (full_ckpt()) free_store(r, live);
    if (bwd) {
      const int grads = alloc_grad_stream(r);
      em.backward = true;
      LayerStore again = s;
      if (full_ckpt()) {
        again = alloc_transient_store(r);
        recompute(r, [&] { attention_forward_phase(r, again.kv); });
      }
      attention_backward_phase(r, again.kv);
      if (full_ckpt()) free_store(r, again);
      em.free(grads);
    }
    free_store(r, s);
    if (other >= 0) em.free(other);
  }

  void layer_workload(Rank& r, bool bwd) {
    const int other = alloc_other_activations(r);
    gather(r, layer_shard_bytes());
    const LayerStore s = layer_forward(r, 0, bwd ? layer_shard_bytes() : 0);
    if (bwd) {
      const int grads = alloc_grad_stream(r);
      layer_backward(r, 0, s, 0);
      r.em.free(grads);
      finish_scatter(r);
    } else {
      free_store(r, s);
    }
    if (other >= 0) r.em.free(other);
  }

  void step_workload(Rank& r, bool bwd) {
    RankEmitter& em = r.em;
    em.layer = -1;
    em.backward = false;
    const int other = alloc_other_activations(r);
    gather(r, vocab_shard_bytes());  // embedding
    gather(r, layer_shard_bytes());  // layer 0
    wait_gather(r);                  // the embedding lookup needs the table
    std::vector<LayerStore> stores;
    for (int l = 0; l < E_; ++l) {
      stores.push_back(layer_forward(r, l, l + 1 < E_ ? layer_shard_bytes() : vocab_shard_bytes()));
    }
    em.layer = -1;
    em.step = 0;
    wait_gather(r);  // the head
    const int final_hidden = buf("final_hidden", final_hidden_bytes());
    em.alloc(final_hidden, final_hidden_bytes());
    const int grads = bwd ? alloc_grad_stream(r) : -1;
    // Logits and loss, chunked; their backward right after (the head is still gathered).
    if (bwd) gather(r, layer_shard_bytes());  // prefetch the last layer for its backward
    const int chunk = buf("logits_chunk", rb_.logits_chunk);
    em.alloc(chunk, rb_.logits_chunk);
    gemm(r, lin_.logits);
    if (bwd) {
      em.backward = true;
      gemm(r, lin_.logits, kLinearBackwardFactor);
    }
    em.free(chunk);
    if (bwd) {
      scatter(r, vocab_shard_bytes());  // head gradients
      for (int l = E_ - 1; l >= 0; --l) {
        layer_backward(r, l, stores[l], l > 0 ? layer_shard_bytes() : 0);
      }
      em.layer = -1;
      em.step = 0;
      scatter(r, vocab_shard_bytes());  // embedding gradients
      finish_scatter(r);
      em.free(grads);
    } else {
      for (int l = E_ - 1; l >= 0; --l) free_store(r, stores[l]);
    }
    em.free(final_hidden);
    if (other >= 0) em.free(other);
  }
};

}  // namespace

OpSchedule generate_schedule(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                             const ScheduleOptions& options) {
  return Generator(plan, model, fabric, options).run();
}

}  // namespace rm
