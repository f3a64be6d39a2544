// The free-communication walk (see free_walk.h).
#include "simulator/free_walk.h"

#include <algorithm>
#include <array>
#include <deque>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "simulator/collective_ring.h"
#include "simulator/layer_weights.h"
#include "simulator/message_matching.h"

namespace rm::sim {

namespace {

double compute_seconds(const Op& op, const CostParams& costs) {
  return op.flops > 0 ? op.flops / (op.efficiency * costs.peak_flops) : 0;
}

class FreeWalk {
 public:
  FreeWalk(const OpSchedule& sched, const Fabric& fabric, const CostParams& c)
      : s(sched), costs(c), G(static_cast<int>(sched.ranks.size())), weights(sched),
        roles(sched, fabric, GroupRoles::Members::kReplayed), messages(G), ranks(G) {}

  void run() {
    std::deque<int> runnable;
    for (int g = 0; g < G; ++g) runnable.push_back(g);
    while (!runnable.empty()) {
      const int g = runnable.front();
      runnable.pop_front();
      advance(g, runnable);
    }
    for (int g = 0; g < G; ++g) {
      if (ranks[g].pc < s.ranks[g].ops.size()) {
        const Op& op = s.ranks[g].ops[ranks[g].pc];
        throw std::runtime_error("the op lists cannot complete: GPU " + std::to_string(g) +
                                 " waits forever at op " + std::to_string(ranks[g].pc) +
                                 " (request " + std::to_string(op.request) + ", layer " +
                                 std::to_string(op.layer) + ", step " + std::to_string(op.step) +
                                 "): a transfer whose other side is never posted");
      }
    }
  }

  double time_s() const {
    double t = 0;
    for (const Rank& r : ranks) t = std::max(t, r.elapsed.sum);
    return t;
  }

 private:
  const OpSchedule& s;
  const CostParams& costs;
  int G;
  LayerWeights weights;
  GroupRoles roles;
  // Transfers by id. An id is free again once both its ends' requests have been waited
  // for (ends_left), so the tables hold the transfers in flight, not the schedule's.
  MessageTable<int> messages;                         // -> transfer id
  std::vector<double> post_s;                         // first side's post time, then done time
  std::vector<char> done;
  std::vector<char> ends_left;                        // ends whose requests are not waited for
  std::vector<std::vector<int>> waiting;              // ranks blocked on a transfer
  std::vector<int> free_ids;

  struct Rank {
    size_t pc = 0;
    double clock = 0;
    Weighted elapsed;
    std::unordered_map<int, std::vector<int>> reqs;  // transfer ids of each request in flight
    int blocked_on = -1;
  };
  std::vector<Rank> ranks;

  // Posts end `e` at time t; returns its transfer's id.
  int post(const MessageEnd& e, double t, std::deque<int>& runnable) {
    const auto m = messages.post(e, [&] {
      if (free_ids.empty()) {
        free_ids.push_back(static_cast<int>(post_s.size()));
        post_s.push_back(0);
        done.push_back(0);
        ends_left.push_back(0);
        waiting.emplace_back();
      }
      const int id = free_ids.back();
      free_ids.pop_back();
      post_s[id] = t;
      done[id] = 0;
      ends_left[id] = 2;
      return id;
    });
    if (m.first) return m.value;
    const int id = m.value;
    post_s[id] = std::max(post_s[id], t);
    done[id] = 1;
    for (int r : waiting[id]) runnable.push_back(r);
    waiting[id].clear();
    return id;
  }

  // Runs rank g until it blocks or ends.
  void advance(int g, std::deque<int>& runnable) {
    Rank& r = ranks[g];
    const auto& ops = s.ranks[g].ops;
    r.blocked_on = -1;
    while (r.pc < ops.size()) {
      const Op& op = ops[r.pc];
      const double t0 = r.clock;
      switch (op.kind) {
        case OpKind::kCompute: r.clock += compute_seconds(op, costs); break;
        case OpKind::kSend:
        case OpKind::kRecv:
          r.reqs[op.request] = {post(transfer_end(g, op), r.clock, runnable)};
          break;
        case OpKind::kCollective: {
          std::vector<int>& ids = r.reqs[op.request];
          ids.clear();
          for (const MessageEnd& e : collective_flows(roles.at(op.group, g), g, op))
            ids.push_back(post(e, r.clock, runnable));
          break;
        }
        case OpKind::kWait: {
          const auto it = r.reqs.find(op.request);
          if (it == r.reqs.end()) break;
          for (int id : it->second) {
            if (!done[id]) {
              waiting[id].push_back(g);
              r.blocked_on = id;
              return;
            }
            r.clock = std::max(r.clock, post_s[id]);
          }
          for (int id : it->second) {
            if (--ends_left[id] == 0) free_ids.push_back(id);
          }
          r.reqs.erase(it);
          break;
        }
        case OpKind::kAlloc:
        case OpKind::kFree:
        case OpKind::kBeginPass:  // no time, no memory
        case OpKind::kOwnGrad: break;
      }
      r.elapsed.add(weights, op, r.clock - t0);
      ++r.pc;
    }
  }
};

}  // namespace

double free_comm_time(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs) {
  FreeWalk walk(schedule, fabric, costs);
  walk.run();
  return walk.time_s();
}

}  // namespace rm::sim
