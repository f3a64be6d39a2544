// The ring loop (see ring_loop.h).
#include "executor/ring_loop.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace rm::exec {

RingLoop::RingLoop(Backend& backend, const OpSchedule& schedule, int rank,
                   const TokenLayout& layout, const AttentionShape& shape, Watchdog* watchdog,
                   FaultSpec fault)
    : be_(backend),
      sched_(schedule),
      ops_(schedule.ranks.at(static_cast<size_t>(rank))),
      rank_(rank),
      ring_size_(layout.ring),
      shape_(shape),
      watchdog_(watchdog),
      fault_(fault),
      buffers_(schedule.buffers.size()) {
  for (const Op& op : ops_.ops) {
    if (op.kind == OpKind::kCompute && op.compute != ComputeKind::kAttentionForward &&
        op.compute != ComputeKind::kAttentionBackward && op.compute != ComputeKind::kAccumulate &&
        op.compute != ComputeKind::kMerge && op.compute != ComputeKind::kA2aPack &&
        op.compute != ComputeKind::kA2aUnpack)
      throw std::runtime_error(std::string("ring loop: the op list has '") + op_name(op) +
                               "' ops, which the executor does not run (attention only)");
    if (op.kind == OpKind::kCollective)
      throw std::runtime_error("ring loop: the op list has collectives (FSDP), which the "
                               "executor does not run (attention only)");
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttentionBackward)
      has_backward_ = true;
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const rm::BufferRole role = schedule.buffers[i].role;
    Buffer& b = buffers_[i];
    b.blocks = rm::gathered(role) || a2a_staging(role) ? schedule.buffers[i].blocks : 1;
    if (b.blocks < 1 || (!a2a_staging(role) && b.blocks > layout.ring))
      throw std::runtime_error("ring loop: buffer '" + schedule.buffers[i].label + "' has " +
                               std::to_string(b.blocks) + " blocks, for a ring of " + std::to_string(layout.ring));
    b.sched_bytes = schedule.buffers[i].bytes / b.blocks;
    if (holds_kv(role)) b.content = Content::kKv;
    if (holds_dkv(role)) b.content = Content::kDkv;
    if (a2a_staging(role)) {
      b.content = Content::kA2a;
      a2a_members_ = b.blocks;
    }
    b.own_kv = role == rm::BufferRole::kKvOwn || role == rm::BufferRole::kKvGathered;
  }
  // A gathered buffer's ops name their block; an attention op on gathered K,V writes its
  // dK,dV into as many gathered blocks; an all-to-all's transfer names the member it goes
  // to or comes from and what it moves.
  const int me = a2a_member(ops_);
  for (const Op& op : ops_.ops) {
    const bool names_block = op.kind == OpKind::kSend || op.kind == OpKind::kRecv ||
                             op.kind == OpKind::kOwnGrad ||
                             (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAccumulate);
    if (names_block && op.buffer >= 0 && buffers_.at(static_cast<size_t>(op.buffer)).blocks > 1 &&
        buffers_.at(static_cast<size_t>(op.buffer)).content != Content::kA2a &&
        (op.kv_owner < 0 || op.kv_owner >= layout.ring))
      throw std::runtime_error(std::string("ring loop: a '") + op_name(op) + "' op on gathered buffer '" +
                               schedule.buffers[static_cast<size_t>(op.buffer)].label +
                               "' names no ring position (kv_owner " + std::to_string(op.kv_owner) + ")");
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttentionBackward && op.buffer >= 0 &&
        op.aux_buffer >= 0 &&
        buffers_.at(static_cast<size_t>(op.buffer)).content != Content::kA2a &&
        buffers_.at(static_cast<size_t>(op.buffer)).blocks != buffers_.at(static_cast<size_t>(op.aux_buffer)).blocks)
      throw std::runtime_error("ring loop: attention backward on '" +
                               schedule.buffers[static_cast<size_t>(op.buffer)].label + "' writes dK,dV into '" +
                               schedule.buffers[static_cast<size_t>(op.aux_buffer)].label +
                               "', which has another number of blocks");
    const bool xfer = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
    if (xfer && op.buffer >= 0 && buffers_.at(static_cast<size_t>(op.buffer)).content == Content::kA2a &&
        (op.kv_owner < 0 || op.kv_owner >= a2a_members_ || op.kv_owner == me || op.a2a == rm::A2aPayload::kNone))
      throw std::runtime_error(std::string("ring loop: an all-to-all '") + op_name(op) + "' names member " +
                               std::to_string(op.kv_owner) + " and payload '" + to_string(op.a2a) +
                               "' (expected another member of its group of " + std::to_string(a2a_members_) +
                               " and what it moves)");
  }
  for (int pos = 0; pos < layout.ring; ++pos) {
    std::vector<int64_t> t(static_cast<size_t>(layout.tokens_per_rank()));
    for (int64_t i = 0; i < layout.tokens_per_rank(); ++i) t[i] = layout.global_index(pos, i);
    owner_tokens_.push_back(std::move(t));
  }
  // Every rank builds its loop at the same point, so the backend can set up its ring's
  // communication (one NCCL communicator per ring) collectively.
  std::vector<int> ring(static_cast<size_t>(layout.ring), -1);
  for (const RankSchedule& rs : schedule.ranks)
    if (rs.ring == ops_.ring) ring.at(static_cast<size_t>(rs.position)) = rs.gpu;
  be_.connect(ring);
  if (a2a_members_ > 0) {
    // a2a: the group is the ring (its attention op works on the all-to-all's view), each
    // member holding its position's tokens; a2a+p2p: the group holds the slices of this
    // ring position's block (member_slice), and the ring works on the view.
    bool group_is_ring = false;
    for (const Op& op : ops_.ops)
      if (op.kind == OpKind::kCompute && op.buffer >= 0 &&
          (op.compute == ComputeKind::kAttentionForward || op.compute == ComputeKind::kAttentionBackward))
        group_is_ring = buffers_.at(static_cast<size_t>(op.buffer)).content == Content::kA2a;
    std::vector<std::vector<int64_t>> members;
    for (int j = 0; j < a2a_members_; ++j)
      members.push_back(group_is_ring ? owner_tokens_.at(static_cast<size_t>(j))
                                      : member_slice(owner_tokens_.at(static_cast<size_t>(ops_.position)), a2a_members_, j));
    be_.a2a_connect(me, members);
  }
}

void RingLoop::allocate(int buffer) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.content == Content::kNone) return;
  const BufferRole role = b.content == Content::kKv    ? BufferRole::kKv
                          : b.content == Content::kDkv ? BufferRole::kDkv
                                                       : BufferRole::kA2a;
  for (int k = 0; k < b.blocks; ++k) be_.alloc(backend_id(buffer, k), role);
  b.allocated = true;
  b.send_cursor = b.recv_cursor = 0;
  b.own_pending = b.own_kv;
}

void RingLoop::release(int buffer) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.allocated)
    for (int k = 0; k < b.blocks; ++k) be_.free(backend_id(buffer, k));
  b.allocated = false;
}

void RingLoop::ensure_allocated(int buffer) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.content == Content::kNone) return;
  if (!b.allocated) allocate(buffer);
  if (b.own_pending) {
    be_.load_own_kv(buffer);  // block 0: backend_id(buffer, 0) == buffer
    b.own_pending = false;
  }
}

int RingLoop::backend_id(int buffer, int block) const {
  return buffer + block * static_cast<int>(buffers_.size());
}

int RingLoop::ring_distance(int from) const {
  return ((ops_.position - from) % ring_size_ + ring_size_) % ring_size_;
}

int RingLoop::block_of(int buffer, int owner) const {
  const Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.blocks == 1) return 0;
  return b.content == Content::kA2a ? owner : ring_distance(owner);
}

std::vector<int> RingLoop::a2a_blocks(int buffer) {
  ensure_allocated(buffer);
  std::vector<int> ids;
  for (int k = 0; k < buffers_.at(static_cast<size_t>(buffer)).blocks; ++k) ids.push_back(backend_id(buffer, k));
  return ids;
}

int RingLoop::region(int buffer, int block, double bytes, bool recv, std::size_t& offset,
                     std::size_t& size) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.content == Content::kNone)
    throw std::runtime_error("ring loop: transfer on buffer '" +
                             sched_.buffers[static_cast<size_t>(buffer)].label +
                             "', which holds neither K,V nor dK,dV");
  ensure_allocated(buffer);
  double& cursor = recv ? b.recv_cursor : b.send_cursor;
  const double total = b.sched_bytes;
  const double end = cursor + bytes;
  if (end > total * (1 + 1e-9))
    throw std::runtime_error("ring loop: message of " + std::to_string(bytes) +
                             " bytes overruns buffer '" +
                             sched_.buffers[static_cast<size_t>(buffer)].label + "'");
  if (block >= b.blocks)
    throw std::runtime_error("ring loop: message for block " + std::to_string(block) + " of buffer '" +
                             sched_.buffers[static_cast<size_t>(buffer)].label + "', which has " +
                             std::to_string(b.blocks));
  const int id = backend_id(buffer, block);
  const std::size_t backend_bytes = be_.bytes_of(id);
  const bool last = end >= total * (1 - 1e-9);
  offset = static_cast<std::size_t>(std::floor(cursor / total * backend_bytes));
  const std::size_t stop =
      last ? backend_bytes : static_cast<std::size_t>(std::floor(end / total * backend_bytes));
  size = stop - offset;
  cursor = last ? 0 : end;
  return id;
}

std::string RingLoop::describe(const Op& op, int index, int& waits_on) const {
  waits_on = Watchdog::kOwnWork;
  std::string s = (iteration_ < 0 ? std::string("the warm-up iteration")
                                  : "iteration " + std::to_string(iteration_)) + ", " +
                  (op.backward ? "backward" : "forward") + " pass, layer " +
                  std::to_string(op.layer) + ", step " + std::to_string(op.step) + ", op " +
                  std::to_string(index) + " (" + op_name(op);
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    s += (op.kind == OpKind::kSend ? " to rank " : " from rank ") + std::to_string(op.peer);
    waits_on = op.peer;
  }
  if (op.kind == OpKind::kWait) {
    // Name the transfer the wait is for.
    for (int i = index - 1; i >= 0; --i) {
      const Op& p = ops_.ops[static_cast<size_t>(i)];
      if ((p.kind == OpKind::kSend || p.kind == OpKind::kRecv) && p.request == op.request) {
        s += std::string(" for ") + (p.kind == OpKind::kSend ? "send to rank " : "recv from rank ") +
             std::to_string(p.peer);
        waits_on = p.peer;
        break;
      }
    }
  }
  return s + ")";
}

void RingLoop::run(int iteration, double epoch, std::vector<Measurement>* records) {
  iteration_ = iteration;
  std::map<int, int> backend_request;  // schedule request id -> backend request
  std::map<int, size_t> posted_record; // schedule request id -> index in records

  const auto& ops = ops_.ops;
  // Whether op `i` (possibly out of range) is a transfer of `phase`.
  auto same_phase = [&](size_t i, int phase) {
    if (i >= ops.size()) return false;
    const Op& o = ops[i];
    return (o.kind == OpKind::kSend || o.kind == OpKind::kRecv) && o.phase == phase;
  };
  for (size_t idx = 0; idx < ops.size(); ++idx) {
    const Op& op = ops[idx];
    const int index = static_cast<int>(idx);
    if (watchdog_) {
      int waits_on = Watchdog::kOwnWork;
      const std::string what = describe(op, index, waits_on);
      watchdog_->arm(what, waits_on);
    }
    maybe_inject_fault(fault_, rank_, op.step, watchdog_);
    const double t0 = be_.now();
    switch (op.kind) {
      case OpKind::kAlloc:
        allocate(op.buffer);  // a fresh buffer
        break;
      case OpKind::kFree:
        release(op.buffer);
        break;
      case OpKind::kSend:
      case OpKind::kRecv: {
        std::size_t offset = 0, size = 0;
        const bool recv = op.kind == OpKind::kRecv;
        int id = 0;
        if (buffers_.at(static_cast<size_t>(op.buffer)).content == Content::kA2a) {
          // An all-to-all's message: the whole payload of the member's block.
          ensure_allocated(op.buffer);
          id = backend_id(op.buffer, block_of(op.buffer, op.kv_owner));
          size = be_.a2a_bytes(op.a2a);
          if (size > be_.bytes_of(id))
            throw std::runtime_error("ring loop: an all-to-all's " + std::string(to_string(op.a2a)) +
                                     " message overruns its staging block");
        } else {
          id = region(op.buffer, block_of(op.buffer, op.kv_owner), op.bytes, recv, offset, size);
        }
        // A phase's transfers are consecutive ops (planner/message_contract.h checks it).
        if (!same_phase(idx - 1, op.phase)) be_.begin_phase();
        backend_request[op.request] = recv ? be_.irecv(id, offset, size, op.peer, op.tag)
                                           : be_.isend(id, offset, size, op.peer, op.tag);
        if (log_) log_->message("ring", !recv, op.peer);
        if (!same_phase(idx + 1, op.phase)) {
          be_.end_phase();
          if (log_) log_->end_step();
        }
        break;
      }
      case OpKind::kWait: {
        auto it = backend_request.find(op.request);
        if (it == backend_request.end())
          throw std::runtime_error("ring loop: rank " + std::to_string(rank_) + " waits on request " +
                                   std::to_string(op.request) + " that was never posted");
        be_.wait(it->second);
        backend_request.erase(it);
        break;
      }
      case OpKind::kBeginPass:
        if (op.compute == ComputeKind::kAttentionBackward) be_.begin_backward();
        else be_.begin_forward();
        break;
      case OpKind::kOwnGrad:
        // After an all-to-all the dqkv unpack has set the rank's dK,dV already.
        if (buffers_.at(static_cast<size_t>(op.buffer)).content == Content::kA2a) break;
        ensure_allocated(op.buffer);
        be_.take_own_dkv(backend_id(op.buffer, block_of(op.buffer, op.kv_owner)), false);
        break;
      case OpKind::kCompute: {
        // The backends' kernels merge each block into (out, lse) and dQ in place.
        if (op.compute == ComputeKind::kMerge) break;
        if (op.compute == ComputeKind::kA2aPack) {
          be_.a2a_pack(op.a2a, a2a_blocks(op.buffer));
          break;
        }
        if (op.compute == ComputeKind::kA2aUnpack) {
          be_.a2a_unpack(op.a2a, a2a_blocks(op.buffer));
          break;
        }
        if (buffers_.at(static_cast<size_t>(op.buffer)).content == Content::kA2a) {
          // a2a's attention: over the head-sharded view the unpack laid out.
          if (op.compute == ComputeKind::kAttentionForward) be_.a2a_attention_forward();
          else be_.a2a_attention_backward();
          break;
        }
        if (op.compute == ComputeKind::kAccumulate) {
          ensure_allocated(op.buffer);
          ensure_allocated(op.aux_buffer);
          be_.accumulate(backend_id(op.buffer, block_of(op.buffer, op.kv_owner)), op.aux_buffer);
          break;
        }
        ensure_allocated(op.buffer);
        if (op.compute == ComputeKind::kAttentionBackward) ensure_allocated(op.aux_buffer);
        // A gathered buffer: the kernel against each block in turn (block k is position
        // own - k's), as the ring computes them; a ring buffer: the one block of kv_owner.
        const Buffer& kv = buffers_.at(static_cast<size_t>(op.buffer));
        for (int k = 0; k < kv.blocks; ++k) {
          const int owner = kv.blocks > 1 ? ring_distance(k) : op.kv_owner;
          const auto& tokens = owner_tokens_.at(static_cast<size_t>(owner));
          if (op.compute == ComputeKind::kAttentionForward)
            be_.attention_forward(backend_id(op.buffer, k), tokens);
          else
            be_.attention_backward(backend_id(op.buffer, k), tokens, backend_id(op.aux_buffer, k));
        }
        break;
      }
      case OpKind::kCollective:
        break;  // refused in the constructor
    }
    const double t1 = be_.now();
    if (records) {
      Measurement m;
      m.rank = rank_;
      m.ring = ops_.ring;
      m.position = ops_.position;
      m.iteration = iteration;
      m.op = index;
      m.backward = op.backward;
      m.layer = op.layer;
      m.step = op.step;
      m.kind = op_name(op);
      if (op.kind == OpKind::kCompute) {
        m.flops = op.flops;
        m.useful_flops = op.useful_flops;
        if (op.compute == ComputeKind::kAttentionForward ||
            op.compute == ComputeKind::kAttentionBackward) {
          // The tiles the backend's kernel ran, which may differ from the plan's request
          // (calibrate --from fits the kernel curve on these; measurements.h).
          const AttentionTiles ran = be_.tiles_run(op.compute == ComputeKind::kAttentionBackward);
          m.block_q = ran.block_q;
          m.block_kv = ran.block_kv;
          m.head_dim = shape_.d;
        }
      }
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kAlloc)
        m.bytes = op.bytes;
      // An all-to-all's layout copies are memory bound: their HBM bytes, for calibrate's
      // elementwise rate (profile_fit.cc), as train's elementwise records carry them.
      if (op.kind == OpKind::kCompute &&
          (op.compute == ComputeKind::kA2aPack || op.compute == ComputeKind::kA2aUnpack))
        m.bytes = op.flops;
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
        m.peer = op.peer;
        posted_record[op.request] = records->size();
      }
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kWait)
        m.request = op.request;
      m.start = t0 - epoch;
      m.seconds = t1 - t0;
      if (op.kind == OpKind::kWait) {
        // The transfer's record spans from its post to this wait's end.
        auto it = posted_record.find(op.request);
        if (it != posted_record.end()) {
          Measurement& xfer = (*records)[it->second];
          xfer.seconds = (t1 - epoch) - xfer.start;
          posted_record.erase(it);
        }
      }
      records->push_back(m);
    }
  }
  for (size_t b = 0; b < buffers_.size(); ++b) release(static_cast<int>(b));
  if (watchdog_) watchdog_->disarm();
}

}  // namespace rm::exec
