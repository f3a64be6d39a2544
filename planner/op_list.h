// The op list: what the schedule generator (schedule.h) hands to its three consumers, the
// planner's tests, the simulator and the executor. Every fact a consumer needs is a field
// or an op here, never inferred from a buffer's label or from the order of ops:
//   - what a buffer holds is its BufferRole;
//   - where a ring pass starts is a kBeginPass op;
//   - which buffer holds the rank's own dK,dV after a backward pass is a kOwnGrad op;
//   - which sends and receives are posted together is their `phase`;
//   - which block of a gathered buffer (all-gather CP) an op reads or writes is the ring
//     position whose block it is, its `kv_owner`;
//   - what an all-to-all (a2a, a2a+p2p) moves is its ops' `a2a` payload, laid out into the
//     send staging by a kA2aPack op and out of the receive staging by a kA2aUnpack op.
//
// The message contract (message_contract.h checks it; every transport enforces it):
// on every directed link src -> dst, the n-th send src posts pairs with the n-th receive
// dst posts, with equal tag, bytes and phase. NCCL point-to-point has no tags, so this is
// the only pairing rule that holds on every transport. Transfers of one phase are posted
// back to back (one ncclGroupStart/End on one stream), phases never decrease along a
// rank's list, and no op waits on a phase's transfer before the phase is fully posted;
// so a transport that runs each phase as one group cannot deadlock. Across communicators
// (the ring's, FSDP's, TP's groups), every rank's posts fit one global order (no two ranks
// post two communicators' operations the other way round).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rm {

enum class OpKind : std::uint8_t {
  kCompute,     // busy the device for flops / (peak * efficiency)
  kSend,        // post a non-blocking send of `bytes` from `buffer` to `peer`; yields `request`
  kRecv,        // post a non-blocking receive of `bytes` into `buffer` from `peer`; yields `request`
  kCollective,  // post a non-blocking collective over `group` (data parallel, TP); yields `request`
  kWait,        // block until `request` completes
  kAlloc,       // allocate `bytes` as `buffer` (memory tracking; executor allocates it)
  kFree,        // free `buffer`
  kBeginPass,   // a ring pass starts; `compute` says which: kAttentionForward (forward or
                // recompute: resets out, lse) or kAttentionBackward (resets dQ, computes
                // D = rowsum(dO * out)). No time, no memory.
  kOwnGrad,     // `buffer` now holds this rank's own complete dK,dV (end of a backward
                // pass): the executor takes it as the rank's result. No time, no memory.
                // a2a+p2p has two: its ring's (the head-sharded view's dK,dV), then, on
                // the receive staging, the rank's after the dQ,dK,dV all-to-all.
};

enum class ComputeKind : std::uint8_t {
  kAttentionForward,   // local Q against the K,V in `buffer`; merge into (out, lse)
  kAttentionBackward,  // partial dQ (local), dK, dV (into `aux_buffer`) for the K,V in `buffer`
  kAccumulate,         // add `aux_buffer` into the accumulator `buffer` (dK, dV)
  kMerge,              // merge the block's partial (out, lse), or dQ, into the running ones
                       // outside the kernel (a framework's step; memory bound). Backends
                       // whose kernels merge in place run nothing for it.
  kGemm,               // linear layers (QKV, output projection, FFN, logits), forward or backward
  kOptimizer,          // optimizer update of this GPU's parameter shard
  kElementwise,        // norms, rotary, activation, residual adds, loss: memory bound
                       // (flops = HBM bytes moved, efficiency = HBM bandwidth / peak)
  // An all-to-all's layout copies (a2a, a2a+p2p; `a2a` says what moves, kv_owner is this
  // rank's index in the group): kA2aPack lays this rank's part of the payload out into
  // `buffer` (kA2aSend), one block per member of the group, and moves its own share
  // straight to where the unpack puts the rest; kA2aUnpack takes every other member's block
  // of `buffer` (kA2aRecv) into place. Memory bound as kElementwise: flops = the HBM bytes
  // of reading and writing the rank's whole payload (CostParams::a2a_copy_s).
  kA2aPack,
  kA2aUnpack,
};

// What an all-to-all of a2a (DeepSpeed-Ulysses) or a2a+p2p moves. The group's n members
// each hold c tokens of every head ("sequence-sharded"); between a pass's two all-to-alls
// member m holds all n·c tokens of heads [m·h/n, (m+1)·h/n) ("head-sharded"). Each member's
// message to member j is its tokens of j's heads (kQkv, kDout) or j's tokens of its heads
// (kOut, kDqkv).
enum class A2aPayload : std::uint8_t {
  kNone,
  kQkv,   // forward, sequence- to head-sharded: Q, K, V
  kOut,   // forward, head- to sequence-sharded: the attention output
  kDout,  // backward, sequence- to head-sharded: the output's gradient
  kDqkv,  // backward, head- to sequence-sharded: dQ, dK, dV (the rank's own dK,dV: kOwnGrad)
};

// kAllReduce: NCCL's ring all-reduce (a reduce-scatter then an all-gather over the same
// rings); `bytes` is each member's shard of the buffer (buffer / group size), as for the others.
enum class CollectiveKind : std::uint8_t { kAllGather, kReduceScatter, kAllReduce };

// What a schedule buffer holds. An executor backs the K,V and dK,dV roles with real
// memory; kAccounting buffers exist for memory tracking only (activations, model states).
enum class BufferRole {
  kAccounting,       // tracked bytes only
  kKvOwn,            // this rank's own K,V of a layer, as they are when first read after
                     // its alloc (a2a+p2p: the head-sharded view's, which its Q,K,V
                     // all-to-all lays out after the alloc)
  kKvRing,           // a K,V block received from the ring (double/quad buffered)
  kDkvAccumulator,   // fp32 dK,dV of one block, travelling with it around the ring
  kDkvPartial,       // one backward kernel's partial dK,dV (overwritten, then added); under
                     // all-gather CP, the block a reduce-scatter step receives
  // All-gather CP (ring_pass.cc): BufferInfo::blocks blocks of one block's bytes each, block
  // k the K,V (or the dK,dV partial) of ring position (own - k) mod P. An attention op on it
  // runs against every block; a transfer, an accumulate or a kOwnGrad names its block by
  // kv_owner.
  kKvGathered,       // the gathered K,V; block 0 the rank's own, as kKvOwn
  kDkvGathered,      // fp32 dK,dV partials of the gathered blocks, reduce-scattered home
  // An all-to-all's staging (a2a, a2a+p2p): BufferInfo::blocks blocks, one per member of
  // the group (by index in it), each holding one message (the largest payload's bytes).
  // Transfers name their block by kv_owner (the member the message goes to or comes from)
  // and carry a whole payload; the member's own block is never sent.
  kA2aSend,          // what this rank sends, laid out by kA2aPack
  kA2aRecv,          // what it receives, taken by kA2aUnpack
};

struct Op {
  // One-byte fields first, then the ints, then the doubles: 88 bytes, no padding between
  // (a production-scale replay holds ~10^8 of them; BENCHMARKS.md).
  OpKind kind = OpKind::kCompute;
  ComputeKind compute = ComputeKind::kGemm;
  CollectiveKind collective = CollectiveKind::kAllGather;
  A2aPayload a2a = A2aPayload::kNone;  // what an all-to-all's ops move (pack, transfers, unpack)
  bool backward = false;
  bool micro_stand_in = false;  // in the micro-step that stands for the ones not emitted
  bool sequence_stand_in = false;  // in the sequence that stands for a micro-step's ones not emitted
  int layer = 0;   // layer index (0-based); -1 for embedding/head/optimizer
  int step = 0;    // ring step within the pass (attention ops and their transfers)
  int kv_owner = -1;         // attention: ring position whose K,V block is used; on a
                             // gathered buffer (transfers, accumulate, own_grad too): whose
                             // block of it (-1 on an attention op: all of them); on an
                             // all-to-all's staging: the member a message goes to / comes from
  // kSend / kRecv / kCollective
  int peer = -1;             // GPU id (send/recv)
  int group = -1;            // collective: index into OpSchedule::groups
  int tag = 0;               // unique per (src, dst) pair; both ends state it (checked)
  int phase = -1;            // send/recv: posting phase, equal at both ends (see above)
  // Buffers (kAlloc/kFree/transfers/compute/kOwnGrad): ids into OpSchedule::buffers.
  int buffer = -1;
  int aux_buffer = -1;
  // Async ops yield a request id (unique within the rank); kWait names one.
  int request = -1;
  // kCompute
  double flops = 0;          // FLOPs executed (tile granularity for attention)
  double useful_flops = 0;   // FLOPs the model needs (MFU counts these)
  double efficiency = 0;     // fraction of peak the cost model assumes for this op
  double bytes = 0;          // kSend / kRecv: per message; a collective: what each rank contributes
  // Fixed seconds the cost model charges before this op starts: the first op of each ring
  // step carries CostParams::step_sync_s (stream event wait, the step's launches). The
  // simulator waits it out; an executor ignores it (it pays the real ones).
  double overhead_s = 0;
};
static_assert(sizeof(Op) == 88, "Op's fields are ordered to pack (see above)");

struct BufferInfo {
  std::string label;  // "kv0", "dkv_acc0", "q.L3", ...: for people and traces only
  double bytes = 0;
  BufferRole role = BufferRole::kAccounting;
  int blocks = 1;  // kKvGathered, kDkvGathered: ring positions gathered (bytes / block);
                   // kA2aSend, kA2aRecv: members of the all-to-all's group
};

struct RankSchedule {
  int gpu = 0;            // global GPU id (= MPI rank in the executor)
  int ring = 0;           // which ring (0..dp-1)
  int position = 0;       // position within the ring (0..P-1)
  std::vector<Op> ops;
};

// Named OpSchedule, not Schedule: rm::Schedule is the plan's ring-schedule enum (plan.h).
struct OpSchedule {
  std::vector<RankSchedule> ranks;         // indexed by GPU id
  std::vector<BufferInfo> buffers;         // shared id space; same meaning on every rank
  std::vector<std::vector<int>> groups;    // collective groups (GPU ids)
  int layers_emitted = 0;                  // layers present in the op lists
  int layers_modelled = 0;                 // the model's, which they stand for (layer_weights.h)
  // Micro-step folding (ScheduleOptions::fold_micro_steps): the micro-steps the stand-in
  // (its ops have Op::micro_stand_in) counts for, itself included; 1 = each for itself.
  int micro_stand_in_weight = 1;
  // Sequence folding (the same option): the sequences of one micro-step the stand-in (its ops
  // have Op::sequence_stand_in) counts for, itself included; 1 = each for itself.
  int sequence_stand_in_weight = 1;
  // By Op::step: the ring steps an emitted step stands for when steps are folded
  // (ScheduleOptions::fold_ring_steps); empty = every step stands for itself.
  std::vector<double> step_weights;
  // A p2p ring's kernels (attention ops with a kv_owner) keep the pace of its slowest GPU:
  // the replay charges their time this many times over (CostParams::lockstep_slowdown(P);
  // planner/straggler.h). Waiting, not compute, so the free-communication walk does not; 1
  // for every other kind.
  double lockstep_slowdown = 1;
  // Replica folding (ScheduleOptions::fold_replicas): the GPUs whose op lists are emitted
  // (sorted; empty = all), and the (src, dst) GPU pairs of every rank's ring transfers,
  // emitted or not, so a replay can keep the load of the rings it does not replay.
  std::vector<int> emitted_gpus;
  std::vector<std::pair<int, int>> ring_flows;
  std::string note;                        // e.g. "1 of 32 identical layers emitted"
};

// Names used in output, traces and measurements ("attention_forward", "send", "kv_ring").
const char* op_name(const Op& op);
const char* to_string(BufferRole role);
const char* to_string(A2aPayload payload);  // "qkv", "out", "dout", "dqkv"; "" for kNone
// This rank's index in its all-to-all group (a2a, a2a+p2p: its first kA2aPack's kv_owner),
// -1 when its list has no all-to-all.
int a2a_member(const RankSchedule& rank);
// Whether the role is K,V or dK,dV (an executor backs it with real memory).
inline bool holds_kv(BufferRole r) {
  return r == BufferRole::kKvOwn || r == BufferRole::kKvRing || r == BufferRole::kKvGathered;
}
inline bool holds_dkv(BufferRole r) {
  return r == BufferRole::kDkvAccumulator || r == BufferRole::kDkvPartial || r == BufferRole::kDkvGathered;
}
inline bool gathered(BufferRole r) { return r == BufferRole::kKvGathered || r == BufferRole::kDkvGathered; }
inline bool a2a_staging(BufferRole r) { return r == BufferRole::kA2aSend || r == BufferRole::kA2aRecv; }

}  // namespace rm
