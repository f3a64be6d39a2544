// The schedule generator: from a plan, each rank's list of operations for one run of
// the plan's workload. One schedule, three consumers: the planner's closed-form cost model
// follows the same step structure, the simulator replays these ops on SimGrid, and the
// executor runs them with real buffers. There is exactly one generator.
//
// Ring semantics (per layer; P = ring size, positions 0..P-1 along the plan's order):
//
// Forward, flat ring. Position i starts holding its own K,V block. At step s = 0..P-1 it
// holds the block of position (i - s) mod P; unless s == P-1 it posts recv of the next
// block (from position i-1) into the other buffer and send of the held block to i+1
// (double buffer); computes attention of its Q against the held block (skipped when fully
// masked), merging into (out, lse); then waits for both transfers.
//
// Backward, flat ring. K,V travel as in the forward pass; dQ stays local; each block
// travels with an fp32 dK,dV accumulator. At step s the post (one phase, see op_list.h)
// holds the K,V send/recv (unless s == P-1) and, for s >= 1, the send of the accumulator
// this position finished in step s-1 and the receive of the one i-1 finished; then the
// block's partial dQ, dK, dV; wait for the arriving accumulator (at s == 0 it starts at
// zero); add the partial; wait for the step's transfers. A last post (step P) sends the
// accumulator of step P-1 to its owner i+1 and receives this position's own dK,dV.
//
// Sliding window (ModelSpec::sliding_window shorter than the sequence, causal): the flat
// ring runs only the S <= P steps whose blocks hold a pair in the window
// (RingAttentionWork::steps) and the last accumulator goes straight home, S-1 positions
// back; bidirectional and two-level rings refuse a window (they carry every block).
//
// Bidirectional: each block is sent both ways; at step s >= 1 position i receives the
// blocks of i-s (clockwise) and i+s (counter-clockwise) and computes both, so ceil((P-1)/2)
// steps after step 0 (the last step has one block when P is even). Backward: each stream
// carries its accumulators as in the flat ring; a last post sends the two accumulators
// each position holds straight to their owners (one exposed transfer).
//
// Two-level ("double ring", first spelled "hierarchical"): the ring is g = GPUs-per-node positions per
// node times n = P / g nodes; position i = node k * g + local l. Outer step o = 0..n-1
// handles the g blocks of node (k - o); its first inner step also posts the outer send of
// the block it will pass on to GPU (k+1, l) and the outer recv from (k-1, l) (all rails at
// once), then g inner steps rotate copies over the inner ring (l -> l+1) inside the node.
// The outer transfer hides behind g inner steps. Backward: inner accumulators make a full
// inner cycle (g transfers) and return to the GPU that passes the block on; the outer
// accumulator is sent after the inner cycle and is added to one outer step later.
// a2a+p2p (usp_plan.h): GPUs attend as positions of the tp·dp·cp_a2a rings of
// usp_ring_choice (P = cp / cp_a2a, h / (tp·cp_a2a) heads per ring, ring % tp the TP rank);
// each pass is a2a's all-to-all over the rank's cp_a2a group, the flat or bidirectional ring,
// the all-to-all back (three pass numbers); the rest of the layer works on N / cp tokens.
// ring_pass.h gives the step pattern all three follow, which makes the message contract
// (op_list.h) hold by construction; message_contract.h checks it.
//
// Load balance decides which tokens a position holds (see TokenLayout): contiguous
// (position i holds [i*c, (i+1)*c)), striped (tokens i, i+P, i+2P, ...), zigzag
// (chunks i and 2P-1-i of 2P chunks of c/2). Attention ops carry the FLOPs the kernel
// executes at tile granularity (fully masked tiles skipped, partly masked ones computed
// whole) and the useful FLOPs (unmasked pairs only, for MFU).
//
// Details the generator fixes (schedule.cc, ring_pass.cc; tests/planner/schedule_test.cc runs every
// variant symbolically and checks them):
// - Buffers. Ring: "kv0".."kv3" (receive buffers; flat uses 2: held + incoming, the own
//   block is the stored "kv_own.L<l>"), "dkv_acc0".."dkv_acc3" (fp32 accumulators),
//   "dkv_partial". Flat: the block held at step s >= 1 is kv[(s-1) % 2]; the accumulator
//   of step s is dkv_acc[s % 2]; the own dK,dV comes back into dkv_acc[P % 2].
//   Bidirectional: clockwise uses kv0/kv1 and dkv_acc0/1, counter-clockwise kv2/kv3 and
//   dkv_acc2/3 (same indexing); the own dK,dV ends in dkv_acc[(P/2 + 1) % 2] after adding
//   the counter-clockwise one into it. Two-level: outer blocks kv0/kv1, inner kv2/kv3,
//   inner accumulators dkv_acc0/1, outer dkv_acc2/3.
//   Per layer: "q.L<l>", "kv_own.L<l>", "out.L<l>", "lse.L<l>", "act.L<l>" (the rest of the
//   layer's stored activations); under full checkpointing only "act.L<l>" (the layer
//   input) is stored and "q", "kv_own", "out", "lse", "recompute" live while the layer's
//   forward runs or reruns. Accounting only (an executor need not back them): model_states,
//   layer_buffers, runtime_reserve, activations.other, act.*, recompute, batch_transients,
//   grad_stream, ffn_chunk, logits_chunk, final_hidden, out_acc, score_tiles, dq, dout, delta.
//   Sizes are the memory model's (memory_model.h), so the peak of the alloc/free ops is
//   MemoryBreakdown::total().
// - kAttentionBackward writes (overwrites) the block's partial dK,dV into aux_buffer and
//   adds its dQ into the local dQ; kAccumulate adds aux_buffer into buffer. Where a fresh
//   accumulator starts (step 0, or step 1 of the counter-clockwise stream) the op is
//   emitted even for a fully masked block, with 0 FLOPs, so the accumulator holds zeros.
//   An accumulator is received at the start of the step that adds to it. Each buffer's
//   BufferRole says what it holds; each pass starts with kBeginPass, and each backward
//   pass ends with kOwnGrad naming the buffer that holds the rank's own dK,dV.
// - Tags are unique per (src, dst) pair over the whole schedule and < 2^31 (see the top
//   of ring_pass.cc); phases likewise. kv_subblocks > 1 splits each K,V and dK,dV
//   transfer into that many messages with consecutive tags, each with its own request.
// - Collectives (FSDP over all cp·dp GPUs, group 0 in plan order): `bytes` is one rank's
//   shard (all-gather: what it contributes; reduce-scatter: what it keeps); `tag` is the
//   collective's sequence number on its group, the same on every member. Each unit (a
//   layer, the embedding, the head) is all-gathered one ahead and reduce-scattered after
//   its backward, one in flight.
// - Tensor parallelism (tp > 1, tensor_parallel.h): every GPU runs one TP member's share
//   (h/tp heads in its own ring of TP rank t, ring d·tp + t; f/tp FFN columns; V/tp
//   vocabulary). Groups 0..tp-1 are the FSDP groups of each TP rank, tp + d·cp + i the TP
//   group of replica d's ring position i. Per layer and sequence: an all-gather before the
//   QKV GEMM and before the FFN, a reduce-scatter after the output projection and after
//   the FFN (bytes c·hidden·e/tp, tag = the collective's number on its TP group), each
//   waited for at once; the backward the same around its GEMMs; recompute reruns them
//   (selective: one all-gather for the FFN's up/gate GEMMs).
// - Ops of the backward pass have backward = true, recompute included (recomputed work
//   has useful_flops = 0). layer = -1: embedding, head (logits), optimizer. useful_flops
//   of a backward is 2x the forward's (model FLOPs, as the cost model's MFU counts them);
//   flops of an attention backward is backward_factor x the forward's (what the kernel
//   runs). kAccumulate and kOptimizer are memory bound: flops = elements / parameters,
//   efficiency chosen so the time is CostParams::accumulate_s / optimizer_s.
// - Workloads: attention = one layer's ring attention forward (+ backward); layer = one
//   layer alone with its GEMMs and FSDP collectives (its all-gather waited for before it,
//   its gradients' reduce-scatter and all-reduce after it); step = grad_accum micro-steps of
//   all layers, logits, then the optimizer. Memory allocs stand for the whole model in every
//   workload: the other layers' activations, and the head's logits chunk and (attention)
//   the FFN's held for a moment where a step would hold them.
// - Pipeline stages (pp > 1, step workload; pipeline_parallel.h): the rings, TP groups and
//   all-to-alls are those of the stages seen as one block (pp_flattened); stage s's GPUs
//   run its layers only (interleaved: its chunks c, virtual stages c·pp + s), grad_accum
//   micro-batches in the 1F1B or interleaved 1F1B order of pipeline_schedule.h (the
//   embedding on the model's first chunk, the head and loss at the start of the backward of
//   its last), each chunk with its micro-batch's collectives over the stage's FSDP group
//   (groups s·tp + t, pp_fsdp_groups; the TP groups follow). Between chunks, blocking
//   exchanges with the neighbouring stages' GPU of the same offset ("final_hidden",
//   micro_batch·c·hidden·e/tp bytes, tag = micro-batch·v + chunk, phase (the message's
//   pairing order + 1)·stride; the ring passes between two exchanges take the phases in
//   between). Stored activations are labelled "<name>.L<layer>.m<micro>" (several
//   micro-batches in flight), model states "model_states.S<stage>" (each stage's own).
//   Every layer and ring is emitted (max_layers and fold_replicas do not apply).
//   Interleaved plans with pp 2 are refused (Megatron runs the interleaved schedule with
//   pp > 2: with one neighbour both ways a link would carry activations and gradients).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/input_error.h"
#include "planner/model_spec.h"
#include "planner/op_list.h"
#include "planner/plan.h"
#include "planner/token_layout.h"
#include "planner/topology.h"

namespace rm {

inline constexpr int kFoldedMicroSteps = 5;  // emitted when micro-steps are folded
inline constexpr int kMicroStepStandIn = 2;  // the emitted one that stands for those not emitted
inline constexpr int kFoldedSequences = 5;   // of a micro-step's, emitted when they are folded
inline constexpr int kSequenceStandIn = 3;   // after the first sequences, which the layer's
                                             // collectives share links with

struct ScheduleOptions {
  // Emit only this many layers (0 = all) and report the multiplier: lets the simulator
  // replay one layer forward and backward at 1,024 GPUs when all layers are identical.
  int max_layers = 0;
  // Emit only the first and last ring steps of each pass and one that stands for the
  // others (ring_pass.h, kFoldHeadSteps), where the plan's work per step is balanced:
  // the simulator's fast mode at thousands of GPUs. Sets OpSchedule::step_weights.
  bool fold_ring_steps = false;
  // Emit only the rings on the nodes of ring 0 (ring 0 and every ring sharing a node
  // with those, until closed) when other rings exist beside them: the data-parallel
  // copies, identical by symmetry on other nodes. Sets OpSchedule::emitted_gpus and
  // ring_flows (the simulator keeps the copies' load on the links they share).
  bool fold_replicas = false;
  // A step of more than kFoldedMicroSteps micro-steps (pp 1): emit the first four and the
  // last, the third standing for the middle ones not emitted (they run the same ops and
  // collectives, micro_step_collectives): sets OpSchedule::micro_stand_in_weight. Likewise
  // a micro-step's sequences, one after another through each layer, where there are more
  // than kFoldedSequences, the fourth standing in: OpSchedule::sequence_stand_in_weight.
  bool fold_micro_steps = false;
  // Emit only these GPUs' op lists (empty = all): the executor needs its own rank only.
  std::vector<int> only_gpus;
  // Refuse (ScheduleTooLarge) a schedule of more ops than this, 0 = no limit: checked after
  // each emitted rank against the ops so far extrapolated to every rank to emit, so a
  // schedule too large for memory is refused after its first op list, not built.
  int64_t max_ops = 0;
  // Rates for the ops' efficiencies; null = CostParams::from_topology(fabric.topology()).
  // Pass the calibrated one when a profile is in use.
  const CostParams* costs = nullptr;
  // Names the plan in InputError messages ("plan.yaml").
  std::string where = "plan";
};

// Thrown when the op lists would exceed ScheduleOptions::max_ops.
class ScheduleTooLarge : public InputError {
 public:
  ScheduleTooLarge(const std::string& what, int64_t projected_ops)
      : InputError(what), projected_ops(projected_ops) {}
  int64_t projected_ops;  // the ops emitted so far, extrapolated to every rank to emit
};

// Throws InputError when the plan does not match the fabric (GPU count, order not a
// permutation, sequence not divisible, heads not divisible...).
OpSchedule generate_schedule(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                           const ScheduleOptions& options = {});

}  // namespace rm
