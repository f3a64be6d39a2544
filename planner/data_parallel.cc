#include "planner/data_parallel.h"

#include <algorithm>

namespace rm {

bool regathers_weights(Sharding s, int data_gpus) {
  return data_gpus > 1 && (s == Sharding::kFsdp || s == Sharding::kHsdp);
}

bool regathers_weights(const PlanChoice& ch) {
  return regathers_weights(ch.sharding, std::max(1, ch.cp) * std::max(1, ch.dp));
}

bool pays_gemm_size_curve(const Job& job, const PlanChoice& ch) {
  switch (job.framework) {
    case Framework::kMegatron: return false;
    case Framework::kPytorch: return true;
    case Framework::kAny: break;
  }
  return regathers_weights(ch);
}

Sharding sharding_as_run(const Job& job, const PlanChoice& ch) {
  const bool pytorch_pipeline = job.framework == Framework::kPytorch && ch.pp > 1;
  if (pytorch_pipeline && (ch.sharding == Sharding::kFsdp || ch.sharding == Sharding::kZero2)) return Sharding::kZero1;
  return ch.sharding;
}

PlanChoice as_run(const Job& job, const PlanChoice& ch) {
  PlanChoice run = ch;
  run.sharding = sharding_as_run(job, ch);
  return run;
}

bool framework_grad_reduce_in_fp32(Framework f) { return f != Framework::kAny; }

int grad_reduce_element_bytes(const Job& job, int element_bytes) {
  constexpr int kFp32 = 4;
  return job.grad_reduce_in_fp32 ? kFp32 : element_bytes;
}

int grad_element_bytes(const Job& job, const PlanChoice& ch, int element_bytes) {
  if (job.framework != Framework::kPytorch) return grad_reduce_element_bytes(job, element_bytes);
  // A PyTorch pipeline's fsdp or zero2, or the zero1 it runs as.
  const bool pipeline_zero1 = ch.pp > 1 && sharding_as_run(job, ch) == Sharding::kZero1;
  return pipeline_zero1 ? grad_reduce_element_bytes(job, element_bytes) : element_bytes;
}

MicroStepCollectives micro_step_collectives(Sharding s, int micro, int micro_steps, int data_gpus) {
  MicroStepCollectives c;
  if (data_gpus <= 1) return c;
  const bool first = micro == 0, last = micro == micro_steps - 1;
  switch (s) {
    case Sharding::kFsdp:
      c.forward_gather = c.backward_gather = c.reduce_scatter = true;
      break;
    case Sharding::kHsdp:
      c.forward_gather = c.backward_gather = c.reduce_scatter = true;
      c.all_reduce = last;
      break;
    case Sharding::kZero2:
      c.forward_gather = first;
      c.reduce_scatter = true;
      break;
    case Sharding::kZero1:
      c.forward_gather = first;
      c.reduce_scatter = last;
      break;
    case Sharding::kNone:
    case Sharding::kDdp:
      c.all_reduce = last;
      break;
  }
  return c;
}

std::vector<std::vector<int>> hsdp_shard_groups(const std::vector<int>& order, int tp, int cp, int dp_shard) {
  const int dp = static_cast<int>(order.size()) / (tp * cp);
  std::vector<std::vector<int>> groups;
  for (int k = 0; k < dp / dp_shard; ++k)
    for (int t = 0; t < tp; ++t) {
      std::vector<int> g;
      for (int j = 0; j < dp_shard; ++j)
        for (int i = 0; i < cp; ++i) g.push_back(order[static_cast<size_t>(((k * dp_shard + j) * tp + t) * cp + i)]);
      groups.push_back(std::move(g));
    }
  return groups;
}

std::vector<std::vector<int>> hsdp_replicate_groups(const std::vector<int>& order, int tp, int cp, int dp_shard) {
  const int dp = static_cast<int>(order.size()) / (tp * cp);
  std::vector<std::vector<int>> groups;
  for (int t = 0; t < tp; ++t)
    for (int j = 0; j < dp_shard; ++j)
      for (int i = 0; i < cp; ++i) {
        std::vector<int> g;
        for (int k = 0; k < dp / dp_shard; ++k) g.push_back(order[static_cast<size_t>(((k * dp_shard + j) * tp + t) * cp + i)]);
        groups.push_back(std::move(g));
      }
  return groups;
}

int hsdp_dp_shard(int tp, int cp, int dp, int gpus_per_node) {
  const int ds = std::max(1, gpus_per_node / std::max(1, tp * cp));
  return dp % ds == 0 && dp / ds >= 2 ? ds : 0;
}

std::string hsdp_why_not(const PlanChoice& ch) {
  if (ch.strategy == Strategy::kUsp)
    return "hsdp with a2a+p2p is not generated yet (its replica groups would cross the a2a groups): use fsdp "
           "(or another cp_comm_type)";
  if (ch.pp > 1) return "hsdp with pipeline stages is not priced yet (its groups are one stage's): use fsdp";
  return "";
}

}  // namespace rm
