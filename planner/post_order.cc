// One order of posts across communicators (see post_order.h).
#include "planner/post_order.h"

#include <cstddef>

namespace rm {

void PostOrder::start_rank(int rank) {
  rank_ = rank;
  prev_.clear();
}

void PostOrder::post(const std::vector<int>& step) {
  for (int a : prev_)
    for (int b : step) edges_.push_back({a, b, rank_});
  prev_ = step;
}

std::string PostOrder::violation(const std::function<std::string(int)>& words) const {
  // Kahn's algorithm: what it cannot order lies on a cycle or after one.
  const size_t n = static_cast<size_t>(nodes_);
  std::vector<int> indegree(n, 0);
  std::vector<size_t> first(n + 1, 0);  // node v's out-edges: by_source[first[v] .. first[v + 1])
  for (const Edge& e : edges_) {
    ++indegree[static_cast<size_t>(e.to)];
    ++first[static_cast<size_t>(e.from) + 1];
  }
  for (size_t v = 0; v < n; ++v) first[v + 1] += first[v];
  std::vector<int> by_source(edges_.size());
  {
    std::vector<size_t> fill(first.begin(), first.end() - 1);
    for (size_t e = 0; e < edges_.size(); ++e) by_source[fill[static_cast<size_t>(edges_[e].from)]++] = edges_[e].to;
  }
  std::vector<int> ready;
  for (size_t v = 0; v < n; ++v)
    if (indegree[v] == 0) ready.push_back(static_cast<int>(v));
  size_t ordered = 0;
  while (!ready.empty()) {
    const size_t v = static_cast<size_t>(ready.back());
    ready.pop_back();
    ++ordered;
    for (size_t i = first[v]; i < first[v + 1]; ++i)
      if (--indegree[static_cast<size_t>(by_source[i])] == 0) ready.push_back(by_source[i]);
  }
  if (ordered == n) return "";
  // Walk back along unordered predecessors until a node repeats: that loop is a cycle.
  std::vector<std::vector<int>> in(n);
  for (size_t e = 0; e < edges_.size(); ++e)
    if (indegree[static_cast<size_t>(edges_[e].from)] > 0) in[static_cast<size_t>(edges_[e].to)].push_back(static_cast<int>(e));
  int v = 0;
  while (indegree[static_cast<size_t>(v)] == 0 || in[static_cast<size_t>(v)].empty()) ++v;
  std::vector<int> seen_at(n, -1), path;  // path: edges walked backwards
  while (seen_at[static_cast<size_t>(v)] < 0) {
    seen_at[static_cast<size_t>(v)] = static_cast<int>(path.size());
    const int e = in[static_cast<size_t>(v)].front();
    path.push_back(e);
    v = edges_[static_cast<size_t>(e)].from;
  }
  std::string cycle;
  for (size_t i = path.size(); i-- > static_cast<size_t>(seen_at[static_cast<size_t>(v)]);) {
    const Edge& e = edges_[static_cast<size_t>(path[i])];
    cycle += (cycle.empty() ? "" : "; ") + std::string("rank ") + std::to_string(e.rank) + " posts " + words(e.from) +
             " before " + words(e.to);
  }
  return "no one order of posts across communicators serves every rank (NCCL may hang): " + cycle;
}

}  // namespace rm
