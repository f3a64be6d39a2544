// The three ring algorithms (see ring_pass.h and schedule.h).
//
// Tags: a message's tag is
//   unit * tag_stride + (stream * (P + 2) + step) * subblocks + subblock,
// with `step` the step in which the sender computed what it sends. Units are emitted in
// the same order on every rank of a ring, so the sender and the receiver compute the same
// tag, and no two messages between the same two GPUs share one. Phases:
//   unit * phase_stride + step * kPhasesPerStep + sub   (sub 0: step start, 1-2: after it).
#include "planner/ring_pass.h"

#include <algorithm>

#include "planner/cost_params.h"

namespace rm {

namespace {

// Message streams of a ring pass (part of the tag, and the order of a phase's posts).
enum Stream {
  kKvCw,       // K,V clockwise (flat ring, bidirectional cw, two-level inner)
  kKvCcw,      // K,V counter-clockwise (bidirectional)
  kAccCw,      // dK,dV accumulators along kKvCw
  kAccCcw,     // dK,dV accumulators along kKvCcw
  kKvOuter,    // two-level: K,V between nodes
  kAccOuter,   // two-level: dK,dV between nodes
  kAccOuterFolded,  // two-level, folded: a macro step's outer dK,dV but the last step's
  kReturnCw,   // bidirectional: final accumulators straight to their owners
  kReturnCcw,
  kStreamCount
};

int mod(int a, int m) { return ((a % m) + m) % m; }

class RingPass {
 public:
  RingPass(const RingContext& ctx, const RingBufferIds& ids, const std::vector<PairFlops>& pairs,
           int pos, RankEmitter& em, double useful_scale, bool backward, int unit)
      : ctx_(ctx), b_(ids), pairs_(pairs), pos_(pos), em_(em), useful_scale_(useful_scale),
        bwd_(backward), unit_(unit) {}

  void run() {
    em_.begin_pass(bwd_);
    if (ctx_.kind == Strategy::kAllGatherCp) return all_gather();
    if (ctx_.kind == Strategy::kUlysses) return all_to_all();
    if (ctx_.kind == Strategy::kUsp) return usp();
    ring();
  }

 private:
  void ring() {
    switch (ctx_.schedule) {
      case Schedule::kFlat: flat(); break;
      case Schedule::kBidirectional: bidirectional(); break;
      case Schedule::kTwoLevel: two_level(); break;
    }
  }

  // A message waiting for its phase's post (flush).
  struct Pending {
    OpKind kind;
    int peer;  // GPU id
    double bytes;
    int buffer;
    Stream stream;
    int step;                 // the step whose data it carries (tag)
    std::vector<int>* reqs;   // where its requests go
    int owner = -1;           // on a gathered buffer: the ring position whose block it is
  };

  const RingContext& ctx_;
  const RingBufferIds& b_;
  const std::vector<PairFlops>& pairs_;  // forward FLOPs against each owner's block
  int pos_;
  RankEmitter& em_;
  double useful_scale_;
  bool bwd_;
  int unit_;  // an all_gather backward moves on to the next for its reduce-scatter
  std::vector<Pending> batch_;
  // The ring steps the step being emitted stands for (RingContext::stands_for): its
  // FLOPs, bytes and sync are that many steps' (a folded "macro" step).
  double repeat_ = 1;

  int tag(Stream stream, int step, int sub) const {
    return unit_ * ctx_.tag_stride() + (stream * (ctx_.P + 2) + step) * ctx_.subblocks + sub;
  }
  void send(int peer_pos, double bytes, int buffer, Stream stream, int step,
            std::vector<int>& reqs, int owner = -1) {
    batch_.push_back({OpKind::kSend, ctx_.gpu(peer_pos), bytes, buffer, stream, step, &reqs, owner});
  }
  void recv(int peer_pos, double bytes, int buffer, Stream stream, int step,
            std::vector<int>& reqs, int owner = -1) {
    batch_.push_back({OpKind::kRecv, ctx_.gpu(peer_pos), bytes, buffer, stream, step, &reqs, owner});
  }
  // Posts the batch as phase (`step`, `sub`): by stream, sends before receives, each
  // split into `n` messages in order. Both ends of a link sort the same way.
  void flush(int step, int sub) { flush(step, sub, ctx_.subblocks); }
  void flush(int step, int sub, int n) {
    std::stable_sort(batch_.begin(), batch_.end(), [](const Pending& a, const Pending& b) {
      return a.stream != b.stream ? a.stream < b.stream : a.kind < b.kind;
    });
    const int phase = unit_ * ctx_.phase_stride() + step * kPhasesPerStep + sub;
    for (const Pending& p : batch_) {
      for (int k = 0; k < n; ++k) {
        p.reqs->push_back(em_.transfer(p.kind, p.peer, p.bytes * repeat_ / n, p.buffer,
                                       tag(p.stream, p.step, k), phase, p.owner));
      }
    }
    batch_.clear();
  }

  // Attention against the block of `owner` held in `kv`; backward writes dK,dV into `aux`.
  // A fully masked block is skipped unless `always` (then it runs with 0 FLOPs, so a
  // fresh accumulator is written with zeros). Returns whether an op was emitted.
  bool attend(int owner, int kv, int aux, bool always = false) {
    const PairFlops& f = pairs_[mod(owner, ctx_.P)];
    if (f.executed <= 0 && !always) return false;
    // The kernel's backward executes kBackwardFlopsFactor x the forward's FLOPs and takes
    // backward_factor x its time (a measured ratio): it runs at forward efficiency x
    // kBackwardFlopsFactor / backward_factor. Model FLOPs count the backward as 2x the
    // forward, as the cost model's MFU does.
    const double factor = bwd_ ? kBackwardFlopsFactor : 1.0;
    const double efficiency =
        ctx_.attention_efficiency * (bwd_ ? kBackwardFlopsFactor / ctx_.backward_factor : 1.0);
    const double useful = f.useful * (bwd_ ? kLinearBackwardFactor : 1.0) * useful_scale_;
    em_.compute(bwd_ ? ComputeKind::kAttentionBackward : ComputeKind::kAttentionForward,
                f.executed * factor * repeat_, useful * repeat_, efficiency, kv, aux, mod(owner, ctx_.P));
    // Every block after the rank's own merges its partial into the running result.
    const ForwardMerge merge = !bwd_ && mod(owner, ctx_.P) > pos_ ? ctx_.later_merge : ForwardMerge{};
    const double merge_eff = merge.sliced ? ctx_.sliced_merge_efficiency : ctx_.merge_efficiency[bwd_ ? 1 : 0];
    if (mod(owner, ctx_.P) != pos_ && merge_eff > 0) {
      em_.compute(ComputeKind::kMerge, ctx_.merge_elements * merge.share * repeat_, 0, merge_eff, kv, -1);
    }
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
    em_.compute(ComputeKind::kAccumulate, elements * repeat_, 0, ctx_.accumulate_efficiency, into, from);
  }

  // Held K,V block at step s: own at s = 0, then the stream's two ring buffers alternately
  // (clockwise, also the flat ring: kv[0..1]; counter-clockwise: kv[2..3]).
  int cw_kv(int s) const { return s == 0 ? b_.kv_own : b_.kv[(s - 1) % 2]; }
  int ccw_kv(int s) const { return s == 0 ? b_.kv_own : b_.kv[2 + (s - 1) % 2]; }

  // --- Flat ring --------------------------------------------------------------------
  // The accumulator of step s is acc[s % 2]: received (from i-1, its step s-1) in the
  // post of step s, added to, sent on (to i+1) in the post of step s+1. After the last
  // step S-1 (S = ctx.steps: P, or fewer under a sliding window) the one held goes home
  // to its owner i-(S-1) (= i+1 when S = P); the own dK,dV arrives in acc[S % 2].

  void flat() {
    const int S = ctx_.steps;
    const int i = pos_;
    const bool ring_bwd = bwd_ && S > 1;
    std::vector<int> reqs, acc_recv;
    for (int s = 0; s < S; ++s) {
      if (!ctx_.emitted(s)) continue;
      repeat_ = ctx_.stands_for(s);
      em_.begin_step(s, ctx_.sync_s * repeat_);
      if (s < S - 1) {
        recv(i - 1, ctx_.kv_bytes, cw_kv(s + 1), kKvCw, s, reqs);
        send(i + 1, ctx_.kv_bytes, cw_kv(s), kKvCw, s, reqs);
      }
      if (ring_bwd && s >= 1) {
        send(i + 1, ctx_.dkv_bytes, b_.acc[(s - 1) % 2], kAccCw, s - 1, reqs);
        recv(i - 1, ctx_.dkv_bytes, b_.acc[s % 2], kAccCw, s - 1, acc_recv);
      }
      flush(s, 0);
      const int owner = i - s;
      if (!bwd_) {
        attend(owner, cw_kv(s), -1);
      } else if (S == 1) {
        attend_into(owner, cw_kv(s), b_.dkv_partial);
      } else if (s == 0) {
        attend_into(owner, cw_kv(s), b_.acc[0]);
      } else {
        attend_and_add(owner, cw_kv(s), b_.acc[s % 2], acc_recv);
      }
      em_.wait_all(reqs);
    }
    repeat_ = 1;
    if (!bwd_) return;
    if (S == 1) {
      own_grad(b_.dkv_partial);
      return;
    }
    em_.begin_step(S, 0);
    send(i - (S - 1), ctx_.dkv_bytes, b_.acc[(S - 1) % 2], kAccCw, S - 1, reqs);
    recv(i + (S - 1), ctx_.dkv_bytes, b_.acc[S % 2], kAccCw, S - 1, reqs);
    flush(S, 0);
    em_.wait_all(reqs);
    own_grad(b_.acc[S % 2]);
  }

  // --- all_gather (Llama 3) ---------------------------------------------------------
  // The gathered K,V (b_.gathered_kv, BufferRole::kKvGathered) hold B = gather_blocks
  // blocks (all P, or a sliding window's), block k position pos-k's and block 0 the own.
  // B-1 ring steps fill blocks 1..B-1: step s receives position pos-1-s's block from pos-1
  // and forwards pos-s's to pos+1. Then one attention op over this GPU's share of the whole
  // sequence, against every block. Backward: gather again, compute every block's dK,dV
  // partial into b_.gathered_dkv, and reduce-scatter them home in B-1 ring steps (the next
  // pass number, so its phases follow the gather's). Each step sends one block's partial
  // sum on, receives the next one's into dkv_partial and adds it to this GPU's partial of
  // that block: an add NCCL's reduce-scatter makes inside its kernel, so the accumulate op
  // carries no FLOPs. Around the ring when B = P (step s sends position pos-1-s's block to
  // pos+1); under a window back towards the owners (step s sends pos-(B-1-s)'s to pos-1).
  // The last step's add completes the rank's own block. Nothing overlaps: the cost model
  // prices B-1 transfers each way plus the compute.

  void gather() {
    std::vector<int> reqs;
    for (int s = 0; s + 1 < ctx_.gather_blocks; ++s) {
      em_.begin_step(s, 0);
      recv(pos_ - 1, ctx_.kv_bytes, b_.gathered_kv, kKvCw, s, reqs, mod(pos_ - 1 - s, ctx_.P));
      send(pos_ + 1, ctx_.kv_bytes, b_.gathered_kv, kKvCw, s, reqs, mod(pos_ - s, ctx_.P));
      flush(s, 0);
      em_.wait_all(reqs);
    }
  }

  void reduce_scatter() {
    const int B = ctx_.gather_blocks;
    const bool around = B == ctx_.P;
    const int dir = around ? 1 : -1;
    const Stream stream = around ? kAccCw : kAccCcw;
    std::vector<int> reqs;
    for (int s = 0; s + 1 < B; ++s) {
      const int sent = around ? pos_ - 1 - s : pos_ - (B - 1 - s);
      const int added = around ? pos_ - 2 - s : pos_ - (B - 2 - s);
      em_.begin_step(s, 0);
      recv(pos_ - dir, ctx_.dkv_bytes, b_.dkv_partial, stream, s, reqs);
      send(pos_ + dir, ctx_.dkv_bytes, b_.gathered_dkv, stream, s, reqs, mod(sent, ctx_.P));
      flush(s, 0);
      em_.wait_all(reqs);
      em_.compute(ComputeKind::kAccumulate, 0, 0, ctx_.accumulate_efficiency, b_.gathered_dkv, b_.dkv_partial,
                  mod(added, ctx_.P));
    }
    em_.own_grad(b_.gathered_dkv, pos_);
  }

  // The one attention op of all_gather and a2a (backward as attend() counts it), against
  // the K,V in `kv`; the backward writes dK,dV into `dkv`.
  void share_compute(int kv, int dkv) {
    const double factor = bwd_ ? kBackwardFlopsFactor : 1.0;
    const double efficiency =
        ctx_.attention_efficiency * (bwd_ ? kBackwardFlopsFactor / ctx_.backward_factor : 1.0);
    em_.compute(bwd_ ? ComputeKind::kAttentionBackward : ComputeKind::kAttentionForward,
                ctx_.share_executed * factor,
                ctx_.share_useful * (bwd_ ? kLinearBackwardFactor : 1.0) * useful_scale_, efficiency, kv,
                bwd_ ? dkv : -1);
  }

  void all_gather() {
    gather();
    share_compute(b_.gathered_kv, b_.gathered_dkv);
    if (!bwd_) return;
    ++unit_;
    em_.step = 0;
    reduce_scatter();
  }

  // --- a2a (DeepSpeed-Ulysses) --------------------------------------------------------
  // An all-to-all over the group (one phase), the attention op over this GPU's heads of the
  // whole sequence, the second all-to-all. Forward: Q,K,V in, output back; backward: the
  // output's gradient in, those of Q,K,V back.

  // One all-to-all of `what` over `group` (GPU ids), this rank being member `me` (the pack's
  // and unpack's kv_owner): the pack into the send staging, one message to and from every
  // other member (block = the member's index; whole payloads, never split into sub-blocks:
  // an all-to-all is one NCCL send/recv pair per peer), the waits, the unpack. The pack and
  // the unpack each read and write the rank's whole payload, n messages (CostParams::a2a_copy_s).
  void exchange(const std::vector<int>& group, int me, double bytes, A2aPayload what, Stream stream, int step) {
    std::vector<int> reqs;
    const int n = static_cast<int>(group.size());
    const double copy_bytes = CostParams::a2a_copy_bytes(n * bytes);
    em_.begin_step(step, 0);
    em_.a2a = what;
    em_.compute(ComputeKind::kA2aPack, copy_bytes, 0, ctx_.elementwise_efficiency, b_.a2a_send, -1, me);
    for (int d = 1; d < n; ++d) {
      batch_.push_back({OpKind::kSend, group[mod(me + d, n)], bytes, b_.a2a_send, stream, 0, &reqs, mod(me + d, n)});
      batch_.push_back({OpKind::kRecv, group[mod(me - d, n)], bytes, b_.a2a_recv, stream, 0, &reqs, mod(me - d, n)});
    }
    flush(step, 0, 1);
    em_.wait_all(reqs);
    em_.compute(ComputeKind::kA2aUnpack, copy_bytes, 0, ctx_.elementwise_efficiency, b_.a2a_recv, -1, me);
    em_.a2a = A2aPayload::kNone;
  }

  // The attention op works on the head-sharded tensors the first unpack laid out (named by
  // the receive staging); its dK,dV (dkv_partial, head-sharded) go back by the second.
  void all_to_all() {
    exchange(*ctx_.ring_gpus, pos_, bwd_ ? ctx_.a2a_out_bytes : ctx_.a2a_qkv_bytes,
             bwd_ ? A2aPayload::kDout : A2aPayload::kQkv, kKvCw, 0);
    share_compute(b_.a2a_recv, b_.dkv_partial);
    exchange(*ctx_.ring_gpus, pos_, bwd_ ? ctx_.a2a_qkv_bytes : ctx_.a2a_out_bytes,
             bwd_ ? A2aPayload::kDqkv : A2aPayload::kOut, kAccCw, 1);
    if (bwd_) em_.own_grad(b_.a2a_recv);
  }

  // --- a2a+p2p (USP) --------------------------------------------------------------------
  // a2a's all-to-all over the rank's a2a group (Q,K,V from sequence- to head-sharded; the
  // backward's dout), the flat or bidirectional ring over the p2p group on the heads it
  // leaves, the all-to-all back (the output; the backward's dQ,dK,dV). Each is a pass
  // number of its own, so the ring's tags and phases are the ring's and all three follow
  // one another. The rank's dK,dV (sequence-sharded again) come from the last unpack.

  void usp() {
    exchange(*ctx_.a2a_gpus, ctx_.a2a_index, bwd_ ? ctx_.a2a_out_bytes : ctx_.a2a_qkv_bytes,
             bwd_ ? A2aPayload::kDout : A2aPayload::kQkv, kKvCw, 0);
    ++unit_;
    ring();
    ++unit_;
    exchange(*ctx_.a2a_gpus, ctx_.a2a_index, bwd_ ? ctx_.a2a_qkv_bytes : ctx_.a2a_out_bytes,
             bwd_ ? A2aPayload::kDqkv : A2aPayload::kOut, kAccCw, 0);
    if (bwd_) em_.own_grad(b_.a2a_recv);
  }

  // The ring's own dK,dV: the rank's (a2a+p2p: its head-sharded view's, which the second
  // all-to-all sends home, so the pass has a second kOwnGrad, on the receive staging).
  void own_grad(int buffer) { em_.own_grad(buffer); }

  // --- Bidirectional ring -----------------------------------------------------------
  // Clockwise as the flat ring (acc[0..1]); counter-clockwise accumulators (acc[2..3])
  // start at step 1, one position past the owner, and travel i -> i-1. After the last
  // step each stream's last accumulator goes straight to its owner (one exposed
  // transfer); the own dK,dV is the clockwise one plus the counter-clockwise one.

  void bidirectional() {
    const int P = ctx_.P;
    const int i = pos_;
    const int last_cw = P / 2;          // ceil((P-1)/2)
    const int last_ccw = (P - 1) / 2;   // floor((P-1)/2)
    const bool ring_bwd = bwd_ && P > 1;
    std::vector<int> reqs, cw_recv, ccw_recv;
    for (int s = 0; s <= last_cw; ++s) {
      if (!ctx_.emitted(s)) continue;
      repeat_ = ctx_.stands_for(s);
      em_.begin_step(s, ctx_.sync_s * repeat_);
      if (s < last_cw) {
        recv(i - 1, ctx_.kv_bytes, cw_kv(s + 1), kKvCw, s, reqs);
        send(i + 1, ctx_.kv_bytes, cw_kv(s), kKvCw, s, reqs);
      }
      if (s < last_ccw) {
        recv(i + 1, ctx_.kv_bytes, ccw_kv(s + 1), kKvCcw, s, reqs);
        send(i - 1, ctx_.kv_bytes, ccw_kv(s), kKvCcw, s, reqs);
      }
      const bool ccw = s >= 1 && s <= last_ccw;
      if (ring_bwd && s >= 1) {
        send(i + 1, ctx_.dkv_bytes, b_.acc[(s - 1) % 2], kAccCw, s - 1, reqs);
        recv(i - 1, ctx_.dkv_bytes, b_.acc[s % 2], kAccCw, s - 1, cw_recv);
      }
      if (ring_bwd && ccw && s >= 2) {
        send(i - 1, ctx_.dkv_bytes, b_.acc[2 + (s - 1) % 2], kAccCcw, s - 1, reqs);
        recv(i + 1, ctx_.dkv_bytes, b_.acc[2 + s % 2], kAccCcw, s - 1, ccw_recv);
      }
      flush(s, 0);
      if (!bwd_) {
        attend(i - s, cw_kv(s), -1);
        if (ccw) attend(i + s, ccw_kv(s), -1);
      } else if (P == 1) {
        attend_into(i, b_.kv_own, b_.dkv_partial);
      } else {
        if (s == 0) {
          attend_into(i, cw_kv(0), b_.acc[0]);
        } else {
          attend_and_add(i - s, cw_kv(s), b_.acc[s % 2], cw_recv);
        }
        if (ccw && s == 1) attend_into(i + s, ccw_kv(s), b_.acc[2 + s % 2]);
        if (ccw && s >= 2) attend_and_add(i + s, ccw_kv(s), b_.acc[2 + s % 2], ccw_recv);
      }
      em_.wait_all(reqs);
    }
    repeat_ = 1;
    if (!bwd_) return;
    if (P == 1) {
      own_grad(b_.dkv_partial);
      return;
    }
    em_.begin_step(last_cw + 1, 0);
    send(i - last_cw, ctx_.dkv_bytes, b_.acc[last_cw % 2], kReturnCw, last_cw, reqs);
    const int own_cw = b_.acc[(last_cw + 1) % 2];
    recv(i + last_cw, ctx_.dkv_bytes, own_cw, kReturnCw, last_cw, reqs);
    int own_ccw = -1;
    if (last_ccw >= 1) {
      send(i + last_ccw, ctx_.dkv_bytes, b_.acc[2 + last_ccw % 2], kReturnCcw, last_ccw, reqs);
      own_ccw = b_.acc[2 + (last_ccw + 1) % 2];
      recv(i - last_ccw, ctx_.dkv_bytes, own_ccw, kReturnCcw, last_ccw, reqs);
    }
    flush(last_cw + 1, 0);
    em_.wait_all(reqs);
    if (own_ccw >= 0) accumulate(own_cw, own_ccw);
    own_grad(own_cw);
  }

  // --- Two-level (double) ring ------------------------------------------------------
  // Position p = k*g + l (node k, local l). Outer step o = 0..n-1 handles the g blocks of
  // node k-o: its first inner step also posts the outer K,V transfer to (k+1, l), which
  // hides behind the g inner steps. Outer blocks kv[0..1], inner blocks kv[2..3]; inner
  // accumulators acc[0..1], outer accumulators acc[2..3].
  // Backward: the inner accumulators make a full inner cycle; after the outer step's last
  // inner step (phase 1) the last one comes home as `result`; result plus the outer
  // accumulator from (k-1, l) goes to (k+1, l) (phase 2), which receives it in the same
  // phase and adds to it one outer step later. After step P-1 that lands at the owner.

  void two_level() {
    const int g = ctx_.g;
    const int n = ctx_.P / g;
    const int k = pos_ / g;
    const int l = pos_ % g;
    auto at = [&](int node, int local) { return mod(node, n) * g + mod(local, g); };
    auto outer_kv = [&](int o) { return o == 0 ? b_.kv_own : b_.kv[(o - 1) % 2]; };
    std::vector<int> outer_reqs, outer_acc_recv, outer_send;
    int own = ctx_.P == 1 ? b_.dkv_partial : -1;
    for (int o = 0; o < n; ++o) {
      if (!ctx_.emitted(o)) continue;
      repeat_ = ctx_.stands_for(o);
      // The inner cycle's result for the outer block lands here. A ring of one has no
      // accumulators (memory model): its dK,dV stay in the partial, as in the flat ring.
      const int result = ctx_.P == 1 ? b_.dkv_partial : o == 0 ? b_.acc[2] : b_.acc[g % 2];
      auto inner_kv = [&](int t) { return t == 0 ? outer_kv(o) : b_.kv[2 + (t - 1) % 2]; };
      std::vector<int> reqs, acc_recv;
      for (int t = 0; t < g; ++t) {
        const int step = o * g + t;
        em_.begin_step(step, ctx_.sync_s * repeat_);
        if (t == 0 && o < n - 1) {
          recv(at(k - 1, l), ctx_.kv_bytes, outer_kv(o + 1), kKvOuter, o, outer_reqs);
          send(at(k + 1, l), ctx_.kv_bytes, outer_kv(o), kKvOuter, o, outer_reqs);
        }
        if (t == 0 && bwd_ && repeat_ > 1) {
          // A macro step's outer dK,dV: each step it stands for sends its sum on behind the
          // next step's inner cycle, so all but the last move during the macro step itself
          // (sent after it, they were exposed: 5 ms a layer at 512 GPUs, cp 512 x dp 1).
          // Each of those sums arrives before the step that adds it, and leaves before the
          // next is sent: the macro step's add waits for them, and so does its last send.
          const double ahead = ctx_.dkv_bytes * (repeat_ - 1) / repeat_;
          send(at(k + 1, l), ahead, b_.acc[2 + o % 2], kAccOuterFolded, o, outer_send);
          recv(at(k - 1, l), ahead, b_.acc[2 + (o + 1) % 2], kAccOuterFolded, o, outer_acc_recv);
        }
        if (t < g - 1) {
          recv(at(k, l - 1), ctx_.kv_bytes, inner_kv(t + 1), kKvCw, step, reqs);
          send(at(k, l + 1), ctx_.kv_bytes, inner_kv(t), kKvCw, step, reqs);
        }
        if (bwd_ && g > 1 && t >= 1) {
          send(at(k, l + 1), ctx_.dkv_bytes, b_.acc[(t - 1) % 2], kAccCw, step - 1, reqs);
          recv(at(k, l - 1), ctx_.dkv_bytes, b_.acc[t % 2], kAccCw, step - 1, acc_recv);
        }
        flush(step, 0);
        const int owner = at(k - o, l - t);
        if (!bwd_) {
          attend(owner, inner_kv(t), -1);
        } else if (g == 1) {
          attend_into(owner, inner_kv(t), result);
        } else if (t == 0) {
          attend_into(owner, inner_kv(t), b_.acc[0]);
        } else {
          attend_and_add(owner, inner_kv(t), b_.acc[t % 2], acc_recv);
        }
        em_.wait_all(reqs);
      }
      const int last = o * g + g - 1;
      if (!bwd_) {
        em_.wait_all(outer_reqs);
        continue;
      }
      if (g > 1) {
        // A full inner cycle: the last accumulator reaches the GPU passing the block on.
        send(at(k, l + 1), ctx_.dkv_bytes, b_.acc[(g - 1) % 2], kAccCw, last, reqs);
        recv(at(k, l - 1), ctx_.dkv_bytes, result, kAccCw, last, reqs);
        flush(last, 1);
        em_.wait_all(reqs);
      }
      if (n == 1) {
        own = result;
        break;
      }
      // Outer accumulator: the inner cycle's result plus what the previous node summed.
      const int outer_acc = b_.acc[2 + o % 2];
      if (o >= 1) {
        em_.wait_all(outer_acc_recv);
        accumulate(outer_acc, result);
      }
      em_.wait_all(outer_send);  // frees acc[2 + (o + 1) % 2] for the next receive
      // (In a macro step only the last step's: the others went with kAccOuterFolded.)
      send(at(k + 1, l), ctx_.dkv_bytes / repeat_, outer_acc, kAccOuter, o, outer_send);
      recv(at(k - 1, l), ctx_.dkv_bytes / repeat_, b_.acc[2 + (o + 1) % 2], kAccOuter, o, outer_acc_recv);
      flush(last, 2);
      em_.wait_all(outer_reqs);
    }
    repeat_ = 1;
    if (!bwd_) return;
    if (n > 1) {
      // Own dK,dV from the previous node, sent after its last outer step.
      em_.step = ctx_.P;
      em_.wait_all(outer_acc_recv);
      em_.wait_all(outer_send);
      own = b_.acc[2 + n % 2];
    }
    own_grad(own);
  }
};

}  // namespace

int ring_pass_units(const RingContext& ctx, bool backward) {
  if (ctx.kind == Strategy::kUsp) return 3;
  return ctx.kind == Strategy::kAllGatherCp && backward ? 2 : 1;
}

int RingContext::tag_stride() const { return kStreamCount * (P + 2) * subblocks; }
int RingContext::gpu(int pos) const { return (*ring_gpus)[mod(pos, P)]; }

std::vector<int> ring_send_positions(const RingContext& ctx, int pos) {
  std::vector<int> to;
  if (ctx.P == 1) return to;
  if (ctx.schedule == Schedule::kTwoLevel) {
    const int n = ctx.P / ctx.g, k = pos / ctx.g, l = pos % ctx.g;
    if (ctx.g > 1) to.push_back(k * ctx.g + mod(l + 1, ctx.g));
    if (n > 1) to.push_back(mod(k + 1, n) * ctx.g + l);
    return to;
  }
  to.push_back(mod(pos + 1, ctx.P));
  if (ctx.schedule == Schedule::kBidirectional && ctx.P > 2) to.push_back(mod(pos - 1, ctx.P));
  return to;
}

int RingContext::pass_steps() const {
  if (schedule == Schedule::kBidirectional) return P / 2 + 1;
  if (schedule == Schedule::kTwoLevel) return P / g;
  return steps;
}

bool RingContext::emitted(int s) const {
  const int steps = pass_steps();
  if (!fold || steps <= kFoldHeadSteps + 1 + kFoldTailSteps) return true;
  return s <= kFoldHeadSteps || s >= steps - kFoldTailSteps;
}

int RingContext::stands_for(int s) const {
  const int steps = pass_steps();
  if (!fold || steps <= kFoldHeadSteps + 1 + kFoldTailSteps || s != kFoldHeadSteps) return 1;
  return steps - kFoldHeadSteps - kFoldTailSteps;
}

void emit_ring_pass(const RingContext& ctx, const RingBufferIds& ids,
                    const std::vector<PairFlops>& pairs, int pos, RankEmitter& em,
                    double useful_scale, bool backward, int unit) {
  RingPass(ctx, ids, pairs, pos, em, useful_scale, backward, unit).run();
}

}  // namespace rm
