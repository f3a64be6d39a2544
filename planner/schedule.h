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
// travels with an fp32 dK,dV accumulator. At step s: post KV send/recv (unless s == P-1);
// compute the block's partial dQ, dK, dV; wait for the held block's accumulator (sent by
// i-1 after its step s-1; at s == 0 the accumulator starts at zero); add the partial;
// send the accumulator to i+1; wait for KV. After step P-1 the accumulator sent to i+1
// is that block's owner's: each position then waits for its own dK,dV to arrive.
//
// Bidirectional: each block is sent both ways; at step s >= 1 position i receives the
// blocks of i-s (clockwise) and i+s (counter-clockwise) and computes both, so ceil((P-1)/2)
// steps after step 0 (the last step has one block when P is even). Backward: each stream
// carries its accumulators as in the flat ring; at the end each position sends the two
// accumulators it holds straight to their owners (one exposed transfer).
//
// Hierarchical (double ring): the ring is g = GPUs-per-node positions per node times
// n = P / g nodes; position i = node k * g + local l. Outer step o = 0..n-1 handles the g
// blocks of node (k - o); at its start each GPU posts the outer send of the block it will
// pass on to GPU (k+1, l) and the outer recv from (k-1, l) (all rails at once), then runs
// g inner steps, rotating copies over the inner ring (l -> l+1) inside the node. The
// outer transfer hides behind g inner steps. Backward: inner accumulators make a full
// inner cycle (g transfers) and return to the GPU that passes the block on; the outer
// accumulator is sent after the inner cycle and is awaited one outer step later.
//
// Load balance decides which tokens a position holds (see TokenLayout): contiguous
// (position i holds [i*c, (i+1)*c)), striped (tokens i, i+P, i+2P, ...), zigzag
// (chunks i and 2P-1-i of 2P chunks of c/2). Attention ops carry the FLOPs the kernel
// executes at tile granularity (fully masked tiles skipped, partly masked ones computed
// whole) and the useful FLOPs (unmasked pairs only, for MFU).
//
// Details the generator fixes (schedule.cc; tests/planner/schedule_test.cc runs every
// variant symbolically and checks them):
// - Buffers. Ring: "kv0".."kv3" (receive buffers; flat uses 2: held + incoming, the own
//   block is the stored "kv_own.L<l>"), "dkv_acc0".."dkv_acc3" (fp32 accumulators),
//   "dkv_partial". Flat: the block held at step s >= 1 is kv[(s-1) % 2]; the accumulator
//   of step s is dkv_acc[s % 2]; the own dK,dV comes back into dkv_acc[P % 2].
//   Bidirectional: clockwise uses kv0/kv1 and dkv_acc0/1, counter-clockwise kv2/kv3 and
//   dkv_acc2/3 (same indexing); the own dK,dV ends in dkv_acc[(P/2 + 1) % 2] after adding
//   the counter-clockwise one into it. Hierarchical: outer blocks kv0/kv1, inner kv2/kv3,
//   inner accumulators dkv_acc0/1, outer dkv_acc2/3.
//   Per layer: "q.L<l>", "kv_own.L<l>", "out.L<l>", "lse.L<l>", "act.L<l>" (the rest of the
//   layer's stored activations); under full checkpointing only "act.L<l>" (the layer
//   input) is stored and "q", "kv_own", "out", "lse", "recompute" live while the layer's
//   forward runs or reruns. Accounting only (an executor need not back them): model_states,
//   layer_buffers, runtime_reserve, activations.other, act.*, recompute, grad_stream,
//   ffn_chunk, logits_chunk, final_hidden, out_acc, score_tiles, dq, dout, delta.
//   Sizes are the memory model's (memory_model.h), so the peak of the alloc/free ops is
//   MemoryBreakdown::total().
// - kAttentionBackward writes (overwrites) the block's partial dK,dV into aux_buffer and
//   adds its dQ into the local dQ; kAccumulate adds aux_buffer into buffer. Where a fresh
//   accumulator starts (step 0, or step 1 of the counter-clockwise stream) the op is
//   emitted even for a fully masked block, with 0 FLOPs, so the accumulator holds zeros.
//   An accumulator is received at the start of the step that adds to it.
// - Tags are unique per (src, dst) pair over the whole schedule and < 2^31 (see the top
//   of schedule.cc). kv_subblocks > 1 splits each K,V and dK,dV transfer into that many
//   messages with consecutive tags, each with its own request.
// - Collectives (FSDP over all cp·dp GPUs, group 0 in plan order): `bytes` is one rank's
//   shard (all-gather: what it contributes; reduce-scatter: what it keeps); `tag` is the
//   collective's sequence number on its group, the same on every member. Each unit (a
//   layer, the embedding, the head) is all-gathered one ahead and reduce-scattered after
//   its backward, one in flight.
// - Ops of the backward pass have backward = true, recompute included (recomputed work
//   has useful_flops = 0). layer = -1: embedding, head (logits), optimizer. useful_flops
//   of a backward is 2x the forward's (model FLOPs, as the cost model's MFU counts them);
//   flops of an attention backward is backward_factor x the forward's (what the kernel
//   runs). kAccumulate and kOptimizer are memory bound: flops = elements / parameters,
//   efficiency chosen so the time is CostParams::accumulate_s / optimizer_s.
// - Workloads: attention = one layer's ring attention forward (+ backward); layer = one
//   layer with its GEMMs and FSDP collectives; step = grad_accum micro-steps of all layers,
//   logits, then the optimizer. Memory allocs stand for the whole model in every workload.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// Which global token indices a ring position holds (per sequence).
struct TokenLayout {
  LoadBalance lb;
  int64_t seq_len;  // N
  int ring;         // P
  int64_t tokens_per_rank() const { return seq_len / ring; }  // c
  // Global index of the `local`-th token (0..c-1) held by ring position `pos`;
  // increasing in `local`.
  int64_t global_index(int pos, int64_t local) const;
  // Throws InputError if N is not divisible as the load balance needs (P, or 2P for zigzag).
  static void check_divisible(LoadBalance lb, int64_t seq_len, int ring, const std::string& where);
};

enum class OpKind {
  kCompute,     // busy the device for flops / (peak * efficiency)
  kSend,        // post a non-blocking send of `bytes` from `buffer` to `peer`; yields `request`
  kRecv,        // post a non-blocking receive of `bytes` into `buffer` from `peer`; yields `request`
  kCollective,  // post a non-blocking collective over `group` (FSDP); yields `request`
  kWait,        // block until `request` completes
  kAlloc,       // allocate `bytes` as `buffer` (memory tracking; executor allocates it)
  kFree,        // free `buffer`
};

enum class ComputeKind {
  kAttentionForward,   // local Q against the K,V in `buffer`; merge into (out, lse)
  kAttentionBackward,  // partial dQ (local), dK, dV (into `aux_buffer`) for the K,V in `buffer`
  kAccumulate,         // add `aux_buffer` into the accumulator `buffer` (dK, dV)
  kGemm,               // linear layers (QKV, output projection, FFN, logits), forward or backward
  kOptimizer,          // optimizer update of this GPU's parameter shard
};

enum class CollectiveKind { kAllGather, kReduceScatter };

struct Op {
  OpKind kind = OpKind::kCompute;
  ComputeKind compute = ComputeKind::kGemm;
  CollectiveKind collective = CollectiveKind::kAllGather;
  int layer = 0;   // layer index (0-based); -1 for embedding/head/optimizer
  int step = 0;    // ring step within the pass (attention ops and their transfers)
  bool backward = false;
  // kCompute
  double flops = 0;          // FLOPs executed (tile granularity for attention)
  double useful_flops = 0;   // FLOPs the model needs (MFU counts these)
  double efficiency = 0;     // fraction of peak the cost model assumes for this op
  int kv_owner = -1;         // attention: ring position whose K,V block is used
  // kSend / kRecv / kCollective
  int peer = -1;             // GPU id (send/recv)
  double bytes = 0;          // per message; for a collective, bytes each rank contributes
  int group = -1;            // collective: index into OpSchedule::groups
  int tag = 0;               // matches a send with its recv between the same two GPUs
  // Buffers (kAlloc/kFree/transfers/compute): ids into OpSchedule::buffers.
  int buffer = -1;
  int aux_buffer = -1;
  // Async ops yield a request id (unique within the rank); kWait names one.
  int request = -1;
  // Fixed seconds the cost model charges before this op starts: the first op of each ring
  // step carries CostParams::step_sync_s (stream event wait, the step's launches). The
  // simulator waits it out; an executor ignores it (it pays the real ones).
  double overhead_s = 0;
};

struct BufferInfo {
  std::string label;  // "kv0", "kv1", "dkv_acc0", "q", "out", ...
  double bytes = 0;
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
  int layer_multiplier = 1;                // identical layers each emitted layer stands for
  std::string note;                        // e.g. "1 of 32 identical layers emitted"
};

struct ScheduleOptions {
  // Emit only this many layers (0 = all) and report the multiplier: lets the simulator
  // replay one layer forward and backward at 1,024 GPUs when all layers are identical.
  int max_layers = 0;
  // Emit only these GPUs' op lists (empty = all): the executor needs its own rank only.
  std::vector<int> only_gpus;
  // Rates for the ops' efficiencies; null = CostParams::from_topology(fabric.topology()).
  // Pass the calibrated one when a profile is in use.
  const CostParams* costs = nullptr;
  // Names the plan in InputError messages ("plan.yaml").
  std::string where = "plan";
};

// Throws InputError when the plan does not match the fabric (GPU count, order not a
// permutation, sequence not divisible, heads not divisible...).
OpSchedule generate_schedule(const Plan& plan, const ModelSpec& model, const Fabric& fabric,
                           const ScheduleOptions& options = {});

}  // namespace rm
