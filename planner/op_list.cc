// Names of op kinds and buffer roles (see op_list.h).
#include "planner/op_list.h"

namespace rm {

const char* op_name(const Op& op) {
  switch (op.kind) {
    case OpKind::kCompute:
      switch (op.compute) {
        case ComputeKind::kAttentionForward: return "attention_forward";
        case ComputeKind::kAttentionBackward: return "attention_backward";
        case ComputeKind::kAccumulate: return "accumulate";
        case ComputeKind::kMerge: return "merge";
        case ComputeKind::kGemm: return "gemm";
        case ComputeKind::kOptimizer: return "optimizer";
        case ComputeKind::kElementwise: return "elementwise";
        case ComputeKind::kA2aPack: return "a2a_pack";
        case ComputeKind::kA2aUnpack: return "a2a_unpack";
      }
      break;
    case OpKind::kSend: return "send";
    case OpKind::kRecv: return "recv";
    case OpKind::kCollective:
      switch (op.collective) {
        case CollectiveKind::kAllGather: return "all_gather";
        case CollectiveKind::kReduceScatter: return "reduce_scatter";
        case CollectiveKind::kAllReduce: return "all_reduce";
      }
      break;
    case OpKind::kWait: return "wait";
    case OpKind::kAlloc: return "alloc";
    case OpKind::kFree: return "free";
    case OpKind::kBeginPass: return "begin_pass";
    case OpKind::kOwnGrad: return "own_grad";
  }
  return "?";
}

const char* to_string(BufferRole role) {
  switch (role) {
    case BufferRole::kAccounting: return "accounting";
    case BufferRole::kKvOwn: return "kv_own";
    case BufferRole::kKvRing: return "kv_ring";
    case BufferRole::kDkvAccumulator: return "dkv_accumulator";
    case BufferRole::kDkvPartial: return "dkv_partial";
    case BufferRole::kKvGathered: return "kv_gathered";
    case BufferRole::kDkvGathered: return "dkv_gathered";
    case BufferRole::kA2aSend: return "a2a_send";
    case BufferRole::kA2aRecv: return "a2a_recv";
  }
  return "?";
}

int a2a_member(const RankSchedule& rank) {
  for (const Op& op : rank.ops)
    if (op.kind == OpKind::kCompute && op.compute == ComputeKind::kA2aPack) return op.kv_owner;
  return -1;
}

const char* to_string(A2aPayload payload) {
  switch (payload) {
    case A2aPayload::kNone: return "";
    case A2aPayload::kQkv: return "qkv";
    case A2aPayload::kOut: return "out";
    case A2aPayload::kDout: return "dout";
    case A2aPayload::kDqkv: return "dqkv";
  }
  return "?";
}

}  // namespace rm
