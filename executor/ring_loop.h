// The backend-neutral ring loop: walks one rank's op list from generate_schedule() and
// calls a Backend for each op, recording one Measurement per op.
//
// What the loop adds to the op list (the schedule leaves it implicit):
//   - Buffer contents by label: labels starting "kv" hold K,V (BufferRole::kKv), labels
//     starting "acc" or "dkv" hold dK,dV accumulators (kDkv); other labels (activations
//     the memory model tracks) need no backend buffer. A "kv_own.L<layer>" buffer is
//     filled with the rank's own K,V when allocated.
//   - The token indices of the block an attention op reads: TokenLayout of op.kv_owner.
//   - Pass boundaries: the first attention op of a new (layer, pass, kernel) starts a
//     pass: begin_forward() or begin_backward().
//   - The rank's own dK,dV after a backward pass: the accumulator written last in the
//     pass (by a completed receive, an accumulate or a backward kernel); the schedule
//     ends every backward pass by bringing the own accumulator home (schedule.h).
//   - Sub-block transfers: consecutive messages of one buffer cover consecutive byte
//     ranges; the schedule's bytes are scaled to the backend's buffer size (bf16 K,V on
//     GPUs), so both ends of a message compute the same range.
// A watchdog is armed around every op (watchdog.h) and fault injection is applied at the
// first op of the targeted step.
#pragma once

#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/measurements.h"
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
  // `start` relative to `epoch` (a backend.now() reading).
  void run(int iteration, double epoch, std::vector<Measurement>* records);

  // Whether the op list contains a backward pass (dQ, dK, dV are results).
  bool has_backward() const { return has_backward_; }

 private:
  enum class Content { kNone, kKv, kDkv };
  struct Buffer {
    Content content = Content::kNone;
    bool allocated = false;
    bool own_kv = false;     // a "kv_own.L<layer>" buffer
    double sched_bytes = 0;  // size in the schedule
    double send_cursor = 0;  // schedule bytes already covered by consecutive messages
    double recv_cursor = 0;
  };
  struct Posted {
    int op = -1;          // index of the op that posted it
    int buffer = -1;
    bool recv = false;
    double start = 0;
  };

  void ensure_allocated(int buffer);
  // The backend byte range [offset, offset + size) of the next message of `bytes`
  // (schedule bytes) on `buffer`, advancing the buffer's send or receive cursor.
  void region(int buffer, double bytes, bool recv, std::size_t& offset, std::size_t& size);
  void take_own_dkv();
  std::string describe(const Op& op, int index) const;

  Backend& be_;
  const OpSchedule& sched_;
  const RankSchedule& ops_;
  int rank_;
  TokenLayout layout_;
  AttentionShape shape_;
  Watchdog* watchdog_;
  FaultSpec fault_;
  bool has_backward_ = false;
  int iteration_ = 0;
  int last_dkv_written_ = -1;  // backward pass: the accumulator written last
  std::vector<Buffer> buffers_;
  std::vector<std::vector<int64_t>> owner_tokens_;  // per ring position
};

}  // namespace rm::exec
