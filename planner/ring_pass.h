// One rank's ring pass (one layer's attention forward, backward, or recompute) as ops:
// the three ring algorithms of the schedule generator (semantics in schedule.h), and the
// passes of the other context-parallel kinds (all_gather, a2a), which follow the same
// post / compute / wait pattern without overlap; a2a+p2p is a2a's all-to-all over its
// a2a group around a flat or bidirectional ring.
//
// Every algorithm follows one pattern per ring step, which is what makes the message
// contract (op_list.h) hold by construction:
//   1. post: all of the step's sends and receives, as one phase, sorted by stream, so
//      both ends of every link list the link's messages in the same order;
//   2. compute: attention against the held block (backward: then wait for the arriving
//      accumulator and add the partial into it);
//   3. wait: everything posted in 1.
// A dK,dV accumulator computed in step s therefore travels in the post of step s+1 (with
// that step's K,V), and is received there by the next position, which adds to it in the
// same step. Where a result must move before the next step can start (a two-level ring's
// inner cycle ending, its outer accumulator), the step has a second and third phase after
// its waits; both ends of those messages are in the same step, so they agree.
#pragma once

#include <vector>

#include "planner/attention_work.h"
#include "planner/kernel_efficiency.h"
#include "planner/op_emitter.h"
#include "planner/plan.h"

namespace rm {

// Phases per ring step: post at the step's start, post after its waits, post after that.
inline constexpr int kPhasesPerStep = 3;

// Folded ring steps (ScheduleOptions::fold_ring_steps): a pass of S steps (flat: P; bidirectional:
// P/2 + 1; two-level: P/g outer steps) emits steps 0..kFoldHeadSteps, which fill the ring's
// pipeline (step 0 has no transfer to hide behind, step 1 the first accumulator), and the
// last kFoldTailSteps, which drain it (no K,V sent, accumulators going home). Step
// kFoldHeadSteps stands for itself and every step not emitted as one "macro" step: its
// FLOPs, bytes and sync are those of all of them (OpSchedule::step_weights says how many),
// so it lasts as long in simulated time as they do and a collective in flight beside it
// shares links with it for as long as it would with them. With balanced work (zigzag or
// striped causal, or full attention) those steps are alike on every position: the same
// FLOPs, the same bytes on the same links; what the macro step lacks is the per-step
// transfer latency, which the replay adds (simgrid_replay.cc). The agreement tests
// (tests/simulator/fold_agreement_test.cc) bound the folded step time against the full one.
inline constexpr int kFoldHeadSteps = 4;
inline constexpr int kFoldTailSteps = 3;

// Everything one ring pass needs that is the same for every position and layer.
struct RingContext {
  Strategy kind = Strategy::kRing;  // kRing (and flash-fsdp), kAllGatherCp, kUlysses or kUsp
  int P = 1;
  int steps = 1;  // flat ring: steps run (P, or fewer under a sliding window)
  int g = 1;  // two-level ring: positions per node
  Schedule schedule = Schedule::kFlat;
  int subblocks = 1;
  double kv_bytes = 0;
  double dkv_bytes = 0;
  double attention_efficiency = 0;
  double accumulate_efficiency = 0;  // memory-bound add, expressed as a fraction of peak
  double elementwise_efficiency = 0;  // an all-to-all's layout copies (flops = HBM bytes)
  double merge_elements = 0;         // c·h·d: output elements a step's merge moves
  double merge_efficiency[2] = {0, 0};  // forward, backward (0: the kernel merges in place)
  // A forward merge of a later position's block (forward_merge: striped and zigzag causal
  // merge a share of the output into a slice, at sliced_merge_efficiency).
  ForwardMerge later_merge;
  double sliced_merge_efficiency = 0;
  double sync_s = 0;                 // per ring step (CostParams::step_sync_s)
  double backward_factor = 0;        // attention backward FLOPs over forward (CostParams)
  // all_gather and a2a: each GPU's share of the whole sequence's attention, forward FLOPs
  // (executed, useful), and a2a's (and a2a+p2p's) per-peer messages: Q,K,V in (and their
  // gradients out), the output out (and its gradient in).
  double share_executed = 0, share_useful = 0;
  // all_gather: blocks a position gathers, its own included: P, or under a sliding window
  // on contiguous chunks the window_blocks() it attends to (attention_work.h).
  int gather_blocks = 1;
  double a2a_qkv_bytes = 0, a2a_out_bytes = 0;
  const std::vector<int>* ring_gpus = nullptr;  // GPU id of each position
  // a2a+p2p: GPU id of each member of this rank's all-to-all group, and its index there.
  const std::vector<int>* a2a_gpus = nullptr;
  int a2a_index = 0;
  bool fold = false;                 // fold the steps (see kFoldHeadSteps)
  // Tags and phases of pass `unit` start at unit * stride (see ring_pass.cc).
  int tag_stride() const;
  int phase_stride() const { return (P + 2) * kPhasesPerStep; }
  int gpu(int pos) const;
  // Steps (outer steps of a two-level ring) a pass has, and whether step s of them is emitted.
  int pass_steps() const;
  bool emitted(int s) const;
  // How many steps step s stands for (1 unless it is the folded one).
  int stands_for(int s) const;
};

// Buffer ids one rank uses in a ring pass.
struct RingBufferIds {
  int kv_own = -1;                // the position's own K,V (a stored or recomputed activation)
  int kv[4] = {-1, -1, -1, -1};   // ring receive buffers (flat uses 0..1)
  int acc[4] = {-1, -1, -1, -1};  // dK,dV accumulators (flat uses 0..1)
  int dkv_partial = -1;           // all_gather: the dK,dV block a reduce-scatter step receives
  int a2a_send = -1;              // a2a, a2a+p2p: the all-to-all's staging (BufferRole::kA2aSend)
  int a2a_recv = -1;              // and what it receives (kA2aRecv)
  int gathered_kv = -1;           // all_gather: the gathered K,V (BufferRole::kKvGathered)
  int gathered_dkv = -1;          // all_gather: their dK,dV partials (kDkvGathered)
};

// Pass numbers (`unit`) a pass uses: an all_gather backward is two (the gather, then the
// reduce-scatter of dK,dV), an a2a+p2p pass three (all-to-all in, ring, all-to-all out),
// every other pass one.
int ring_pass_units(const RingContext& ctx, bool backward);
// Ring positions `pos` sends K,V blocks to in a pass (the links a ring loads).
std::vector<int> ring_send_positions(const RingContext& ctx, int pos);

// Emits ring pass number `unit` (in emission order, the same on every rank of the ring)
// for position `pos`. `pairs[j]`: forward FLOPs of this position's Q against position j's
// block. `useful_scale`: 0 while recomputing (MFU counts model FLOPs once), else 1.
void emit_ring_pass(const RingContext& ctx, const RingBufferIds& ids,
                    const std::vector<PairFlops>& pairs, int pos, RankEmitter& em,
                    double useful_scale, bool backward, int unit);

}  // namespace rm
