// BufferTable and RankEmitter (see op_emitter.h).
#include "planner/op_emitter.h"

namespace rm {

int BufferTable::id(const std::string& label, double bytes, BufferRole role, int blocks) {
  auto [it, added] = ids_.emplace(label, static_cast<int>(list_.size()));
  if (added) list_.push_back({label, bytes, role, blocks});
  return it->second;
}

Op RankEmitter::base(OpKind kind) {
  Op op;
  op.overhead_s = pending_sync_;
  pending_sync_ = 0;
  op.kind = kind;
  op.layer = layer;
  op.step = step;
  op.backward = backward;
  op.micro_stand_in = micro_stand_in;
  op.sequence_stand_in = sequence_stand_in;
  op.a2a = a2a;
  return op;
}

// Appends a non-blocking op; returns the request id that wait() takes.
int RankEmitter::post(Op op, double bytes, int buffer, int tag) {
  op.bytes = bytes;
  op.buffer = buffer;
  op.tag = tag;
  op.request = next_request_++;
  rs_.ops.push_back(op);
  return op.request;
}

int RankEmitter::transfer(OpKind kind, int peer, double bytes, int buffer, int tag, int phase, int kv_owner) {
  Op op = base(kind);
  op.peer = peer;
  op.kv_owner = kv_owner;
  op.phase = phase_base + phase;
  return post(op, bytes, buffer, tag);
}

int RankEmitter::collective(CollectiveKind kind, int group, double bytes, int buffer, int tag) {
  Op op = base(OpKind::kCollective);
  op.collective = kind;
  op.group = group;
  return post(op, bytes, buffer, tag);
}

void RankEmitter::wait(int request) {
  Op op = base(OpKind::kWait);
  op.request = request;
  rs_.ops.push_back(op);
}

void RankEmitter::wait_all(std::vector<int>& requests) {
  for (int r : requests) wait(r);
  requests.clear();
}

void RankEmitter::compute(ComputeKind kind, double flops, double useful, double efficiency,
                          int buffer, int aux_buffer, int kv_owner) {
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

void RankEmitter::alloc(int buffer, double bytes) {
  Op op = base(OpKind::kAlloc);
  op.buffer = buffer;
  op.bytes = bytes;
  rs_.ops.push_back(op);
}

void RankEmitter::free(int buffer) {
  Op op = base(OpKind::kFree);
  op.buffer = buffer;
  rs_.ops.push_back(op);
}

void RankEmitter::begin_pass(bool backward_pass) {
  Op op = base(OpKind::kBeginPass);
  op.compute = backward_pass ? ComputeKind::kAttentionBackward : ComputeKind::kAttentionForward;
  rs_.ops.push_back(op);
}

void RankEmitter::own_grad(int buffer, int kv_owner) {
  Op op = base(OpKind::kOwnGrad);
  op.buffer = buffer;
  op.kv_owner = kv_owner;
  rs_.ops.push_back(op);
}

}  // namespace rm
