#include "planner/tensor_parallel.h"

namespace rm {

ModelSpec tp_shard(const ModelSpec& m, int tp) {
  if (tp <= 1) return m;
  ModelSpec s = m;
  s.heads = m.heads / tp;
  s.kv_heads = m.kv_heads / tp;
  s.ffn_hidden = m.ffn_hidden / tp;
  s.vocab = m.vocab / tp;
  return s;
}

std::string tp_why_invalid(const ModelSpec& m, int tp, int gpus_per_node) {
  auto str = [](auto v) { return std::to_string(v); };
  if (tp < 1) return "tp must be >= 1 (got " + str(tp) + ")";
  if (tp == 1) return "";
  if (gpus_per_node % tp != 0)
    return "tp " + str(tp) + " must divide the " + str(gpus_per_node) +
           " GPUs per node (tensor parallelism stays on NVLink)";
  if (m.heads % tp != 0 || m.kv_heads % tp != 0)
    return "tp " + str(tp) + " must divide the " + str(m.heads) + " query heads and the " +
           str(m.kv_heads) + " kv heads (Megatron: num_query_groups % tensor_model_parallel_size == 0)";
  if (m.ffn_hidden % tp != 0 || m.vocab % tp != 0)
    return "tp " + str(tp) + " must divide the FFN hidden size " + str(m.ffn_hidden) +
           " and the vocabulary " + str(m.vocab);
  return "";
}

double tp_collective_bytes(const ModelSpec& m, int64_t c, int element_bytes, int tp) {
  return static_cast<double>(c) * m.hidden * element_bytes / tp;
}

double tp_overlapped_s(double gemm_s, double chunk_s, int tp, const CostParams& cost) {
  const double g = gemm_s / tp;
  // One chunk exposed at an end (the first transfer, or the last), one GEMM chunk at the
  // other, tp - 1 steps of a GEMM chunk beside a transfer between them.
  return chunk_s + (tp - 1) * (g + cost.collective_exposed_s(chunk_s, g)) + g;
}

std::vector<int> tp_order(int tp, int cp, int dp) {
  std::vector<int> order;
  order.reserve(static_cast<size_t>(tp) * cp * dp);
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t)
      for (int i = 0; i < cp; ++i) order.push_back(t + tp * (i + cp * d));
  return order;
}

std::vector<std::vector<int>> tp_groups(const std::vector<int>& order, int tp, int cp) {
  const int dp = static_cast<int>(order.size()) / (tp * cp);
  std::vector<std::vector<int>> groups;
  for (int d = 0; d < dp; ++d) {
    for (int i = 0; i < cp; ++i) {
      std::vector<int> g;
      for (int t = 0; t < tp; ++t) g.push_back(order[static_cast<size_t>((d * tp + t) * cp + i)]);
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

std::vector<std::vector<int>> fsdp_groups(const std::vector<int>& order, int tp, int cp) {
  const int dp = static_cast<int>(order.size()) / (tp * cp);
  std::vector<std::vector<int>> groups(static_cast<size_t>(tp));
  for (int d = 0; d < dp; ++d)
    for (int t = 0; t < tp; ++t)
      for (int i = 0; i < cp; ++i)
        groups[static_cast<size_t>(t)].push_back(order[static_cast<size_t>((d * tp + t) * cp + i)]);
  return groups;
}

}  // namespace rm
