// The ring loop (see ring_loop.h).
#include "executor/ring_loop.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace rm::exec {

namespace {

const char* kind_name(const Op& op) {
  switch (op.kind) {
    case OpKind::kCompute:
      switch (op.compute) {
        case ComputeKind::kAttentionForward: return "attention_forward";
        case ComputeKind::kAttentionBackward: return "attention_backward";
        case ComputeKind::kAccumulate: return "accumulate";
        case ComputeKind::kGemm: return "gemm";
        case ComputeKind::kOptimizer: return "optimizer";
      }
      break;
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kCollective: return "collective";
    case OpKind::kWait: return "wait";
    case OpKind::kAlloc: return "alloc";
    case OpKind::kFree: return "free";
  }
  return "?";
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

RingLoop::RingLoop(Backend& backend, const OpSchedule& schedule, int rank,
                   const TokenLayout& layout, const AttentionShape& shape, Watchdog* watchdog,
                   FaultSpec fault)
    : be_(backend),
      sched_(schedule),
      ops_(schedule.ranks.at(static_cast<size_t>(rank))),
      rank_(rank),
      layout_(layout),
      shape_(shape),
      watchdog_(watchdog),
      fault_(fault),
      buffers_(schedule.buffers.size()) {
  std::vector<int> peers;
  for (const Op& op : ops_.ops) {
    if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) peers.push_back(op.peer);
    if (op.kind == OpKind::kCompute && op.compute != ComputeKind::kAttentionForward &&
        op.compute != ComputeKind::kAttentionBackward && op.compute != ComputeKind::kAccumulate)
      throw std::runtime_error(std::string("ring loop: the op list has '") + kind_name(op) +
                               "' ops, which the executor does not run (attention only)");
    if (op.kind == OpKind::kCollective)
      throw std::runtime_error("ring loop: the op list has collectives (FSDP), which the "
                               "executor does not run (attention only)");
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kAttentionBackward)
      has_backward_ = true;
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const std::string& label = schedule.buffers[i].label;
    Buffer& b = buffers_[i];
    b.sched_bytes = schedule.buffers[i].bytes;
    if (starts_with(label, "kv")) b.content = Content::kKv;
    if (starts_with(label, "acc") || starts_with(label, "dkv")) b.content = Content::kDkv;
    b.own_kv = starts_with(label, "kv_own");  // "kv_own.L<layer>"
  }
  for (int pos = 0; pos < layout.ring; ++pos) {
    std::vector<int64_t> t(static_cast<size_t>(layout.tokens_per_rank()));
    for (int64_t i = 0; i < layout.tokens_per_rank(); ++i) t[i] = layout.global_index(pos, i);
    owner_tokens_.push_back(std::move(t));
  }
  // Every rank builds its loop at the same point, so the backend can set up its links
  // (NCCL communicators) to exactly the peers of the op list.
  be_.connect(peers);
}

void RingLoop::ensure_allocated(int buffer) {
  Buffer& b = buffers_.at(static_cast<size_t>(buffer));
  if (b.allocated || b.content == Content::kNone) return;
  be_.alloc(buffer, b.content == Content::kKv ? BufferRole::kKv : BufferRole::kDkv);
  b.allocated = true;
  b.send_cursor = b.recv_cursor = 0;
  if (b.own_kv) be_.load_own_kv(buffer);
}

void RingLoop::region(int buffer, double bytes, bool recv, std::size_t& offset,
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
  const std::size_t backend_bytes = be_.bytes_of(buffer);
  const bool last = end >= total * (1 - 1e-9);
  offset = static_cast<std::size_t>(std::floor(cursor / total * backend_bytes));
  const std::size_t stop =
      last ? backend_bytes : static_cast<std::size_t>(std::floor(end / total * backend_bytes));
  size = stop - offset;
  cursor = last ? 0 : end;
}

void RingLoop::take_own_dkv() {
  if (last_dkv_written_ < 0) return;
  be_.take_own_dkv(last_dkv_written_, false);
  last_dkv_written_ = -1;
}

std::string RingLoop::describe(const Op& op, int index) const {
  std::string s = (iteration_ < 0 ? std::string("the warm-up iteration")
                                  : "iteration " + std::to_string(iteration_)) + ", " +
                  (op.backward ? "backward" : "forward") + " pass, layer " +
                  std::to_string(op.layer) + ", step " + std::to_string(op.step) + ", op " +
                  std::to_string(index) + " (" + kind_name(op);
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv)
    s += (op.kind == OpKind::kSend ? " to rank " : " from rank ") + std::to_string(op.peer);
  if (op.kind == OpKind::kWait) {
    // Name the transfer the wait is for.
    for (int i = index - 1; i >= 0; --i) {
      const Op& p = ops_.ops[static_cast<size_t>(i)];
      if ((p.kind == OpKind::kSend || p.kind == OpKind::kRecv) && p.request == op.request) {
        s += std::string(" for ") + (p.kind == OpKind::kSend ? "send to rank " : "recv from rank ") +
             std::to_string(p.peer);
        break;
      }
    }
  }
  return s + ")";
}

void RingLoop::run(int iteration, double epoch, std::vector<Measurement>* records) {
  iteration_ = iteration;
  std::map<int, int> backend_request;  // schedule request id -> backend request
  std::map<int, Posted> posted;        // schedule request id -> what posted it
  std::map<int, size_t> posted_record; // schedule request id -> index in records
  // (layer, pass, kernel) of the last attention op: a change starts a pass.
  std::tuple<int, bool, ComputeKind> pass{-1, false, ComputeKind::kGemm};
  bool in_backward = false;
  last_dkv_written_ = -1;

  const auto& ops = ops_.ops;
  for (size_t idx = 0; idx < ops.size(); ++idx) {
    const Op& op = ops[idx];
    const int index = static_cast<int>(idx);
    if (watchdog_) watchdog_->arm(describe(op, index));
    maybe_inject_fault(fault_, rank_, op.step);
    const double t0 = be_.now();
    switch (op.kind) {
      case OpKind::kAlloc:
        buffers_.at(static_cast<size_t>(op.buffer)).allocated = false;  // a fresh buffer
        ensure_allocated(op.buffer);
        break;
      case OpKind::kFree: {
        Buffer& b = buffers_.at(static_cast<size_t>(op.buffer));
        if (op.buffer == last_dkv_written_) take_own_dkv();
        if (b.allocated) be_.free(op.buffer);
        b.allocated = false;
        break;
      }
      case OpKind::kSend:
      case OpKind::kRecv: {
        std::size_t offset = 0, size = 0;
        const bool recv = op.kind == OpKind::kRecv;
        region(op.buffer, op.bytes, recv, offset, size);
        backend_request[op.request] = recv ? be_.irecv(op.buffer, offset, size, op.peer, op.tag)
                                           : be_.isend(op.buffer, offset, size, op.peer, op.tag);
        posted[op.request] = {index, op.buffer, recv, t0};
        break;
      }
      case OpKind::kWait: {
        auto it = backend_request.find(op.request);
        if (it == backend_request.end())
          throw std::runtime_error("ring loop: rank " + std::to_string(rank_) + " waits on request " +
                                   std::to_string(op.request) + " that was never posted");
        be_.wait(it->second);
        backend_request.erase(it);
        const Posted& p = posted.at(op.request);
        if (p.recv && buffers_[static_cast<size_t>(p.buffer)].content == Content::kDkv &&
            in_backward)
          last_dkv_written_ = p.buffer;
        break;
      }
      case OpKind::kCompute: {
        if (op.compute == ComputeKind::kAccumulate) {
          ensure_allocated(op.buffer);
          ensure_allocated(op.aux_buffer);
          be_.accumulate(op.buffer, op.aux_buffer);
          last_dkv_written_ = op.buffer;
          break;
        }
        const std::tuple<int, bool, ComputeKind> key{op.layer, op.backward, op.compute};
        if (key != pass) {
          if (in_backward) take_own_dkv();
          in_backward = op.compute == ComputeKind::kAttentionBackward;
          if (in_backward) be_.begin_backward();
          else be_.begin_forward();
          pass = key;
        }
        ensure_allocated(op.buffer);
        const auto& tokens = owner_tokens_.at(static_cast<size_t>(op.kv_owner));
        if (op.compute == ComputeKind::kAttentionForward) {
          be_.attention_forward(op.buffer, tokens);
        } else {
          ensure_allocated(op.aux_buffer);
          be_.attention_backward(op.buffer, tokens, op.aux_buffer);
          last_dkv_written_ = op.aux_buffer;
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
      m.kind = kind_name(op);
      if (op.kind == OpKind::kCompute) {
        m.flops = op.flops;
        m.useful_flops = op.useful_flops;
        if (op.compute != ComputeKind::kAccumulate) {
          m.block_q = shape_.block_q;
          m.block_kv = shape_.block_kv;
          m.head_dim = shape_.d;  // calibrate --from needs the tile's d (measurements.h)
        }
      }
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kAlloc)
        m.bytes = op.bytes;
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
  if (in_backward) take_own_dkv();
  if (watchdog_) watchdog_->disarm();
}

}  // namespace rm::exec
