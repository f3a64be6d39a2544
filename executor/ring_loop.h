// The backend-neutral ring loop: walks one rank's op list from generate_schedule() and
// calls a Backend for each op, recording one Measurement per op.
//
// The op list states every fact the loop needs (planner/op_list.h): a buffer's role says
// whether the backend backs it (K,V or dK,dV) and whether it starts with the rank's own
// K,V; kBeginPass and kOwnGrad ops start passes and hand over the own dK,dV. The loop
// adds only:
//   - The token indices of the block an attention op reads: TokenLayout of op.kv_owner.
//   - Sub-block transfers: consecutive messages of one buffer cover consecutive byte
//     ranges; the schedule's bytes are scaled to the backend's buffer size (bf16 K,V on
//     GPUs), so both ends of a message compute the same range.
//   - Gathered buffers (all-gather CP, BufferRole::kKvGathered / kDkvGathered): one backend
//     buffer per block, block k holding ring position (own - k)'s; an op names its block by
//     kv_owner (a message's sub-blocks cover that block's bytes in order), and an attention
//     op on one runs the kernel against every block in turn, merging as a ring does.
//   - All-to-alls (a2a, a2a+p2p; BufferRole::kA2aSend / kA2aRecv): one backend buffer per
//     member of the group, a message the whole payload (Backend::a2a_bytes of the op's
//     `a2a`) of the member's block; pack and unpack ops lay it out (Backend::a2a_pack /
//     a2a_unpack). a2a's attention op, on the receive staging, runs over the head-sharded
//     view; a2a+p2p's ring runs on it (the backend's ring kernels switch to the view). The
//     kOwnGrad after the dQ,dK,dV all-to-all takes nothing: its unpack set the rank's dK,dV.
// Transfers go to the backend in the op list's order; the backend's transport pairs them
// by posting order per link and checks tag and size (the message contract, op_list.h).
// A watchdog is armed around every op (watchdog.h) and fault injection is applied at the
// first op of the targeted step.
#pragma once

#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/measurements.h"
#include "executor/post_log.h"
#include "executor/watchdog.h"
#include "planner/schedule.h"

namespace rm::exec {

class RingLoop {
 public:
  // `rank` indexes schedule.ranks (its op list must be present); `layout` and `shape`
  // describe the rank's ring. The backend must be set up already.
  RingLoop(Backend& backend, const OpSchedule& schedule, int rank, const TokenLayout& layout,
           const AttentionShape& shape, Watchdog* watchdog, FaultSpec fault);

  // Runs the op list once. Appends a record per op to `records` when non-null, with
  // `start` relative to `epoch` (a backend.now() reading). Leaves no backend buffer
  // allocated: a part of an op list (train's forward and backward parts, two loops on one
  // backend) frees what its later part frees, which allocates its own again.
  void run(int iteration, double epoch, std::vector<Measurement>* records);

  // Whether the op list contains a backward pass (dQ, dK, dV are results).
  bool has_backward() const { return has_backward_; }
  // Logs each phase's transfers on `log` from now on, as one step (post_log.h).
  void log_posts(PostLog* log) { log_ = log; }

 private:
  enum class Content { kNone, kKv, kDkv, kA2a };
  struct Buffer {
    Content content = Content::kNone;
    bool allocated = false;
    bool own_kv = false;     // kKvOwn, kKvGathered: block 0 holds the rank's own K,V
    bool own_pending = false;  // own_kv, allocated, and not yet filled (ensure_allocated fills it)
    int blocks = 1;          // gathered buffers: one backend buffer per ring position gathered
    double sched_bytes = 0;  // size in the schedule (of one block)
    double send_cursor = 0;  // schedule bytes of the block already covered by consecutive messages
    double recv_cursor = 0;
  };
  // A kAlloc op: backs `buffer` with fresh backend buffers (one per block).
  void allocate(int buffer);
  // A kFree op: returns `buffer`'s backend buffers, if it holds any.
  void release(int buffer);
  // Before every use of `buffer`: allocated (if no kAlloc op did), and an own block filled
  // with the rank's K,V at its first use after allocation, so it holds them as they are
  // when read (a2a+p2p's ring takes the view's, which exist only after the Q,K,V unpack).
  void ensure_allocated(int buffer);
  // The backend buffer holding block `block` of schedule buffer `buffer` (block 0 is the
  // buffer's own id, so plain buffers keep theirs).
  int backend_id(int buffer, int block) const;
  // (own position - from) mod ring size: the block of position `from`, and the position
  // whose block is block `from` (the map is its own inverse).
  int ring_distance(int from) const;
  // Which block of `buffer` holds ring position `owner`'s data (0 for a plain buffer; an
  // all-to-all's staging: block `owner`, the member's own).
  int block_of(int buffer, int owner) const;
  // An all-to-all staging buffer's backend buffers, one per member (allocated if need be).
  std::vector<int> a2a_blocks(int buffer);
  // The backend buffer and byte range [offset, offset + size) of the next message of
  // `bytes` (schedule bytes) on block `block` of `buffer`, advancing the buffer's send or
  // receive cursor.
  int region(int buffer, int block, double bytes, bool recv, std::size_t& offset, std::size_t& size);
  // The op in words, and whom it waits for (a peer rank or Watchdog::kOwnWork).
  std::string describe(const Op& op, int index, int& waits_on) const;

  Backend& be_;
  const OpSchedule& sched_;
  const RankSchedule& ops_;
  int rank_;
  int ring_size_;
  AttentionShape shape_;
  Watchdog* watchdog_;
  FaultSpec fault_;
  PostLog* log_ = nullptr;
  bool has_backward_ = false;
  int a2a_members_ = 0;  // members of the all-to-all's group (0: none)
  int iteration_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<std::vector<int64_t>> owner_tokens_;  // per ring position
};

}  // namespace rm::exec
