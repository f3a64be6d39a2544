// Checking the message contract on op lists (see message_contract.h).
#include "planner/message_contract.h"

#include "planner/post_order.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rm {

namespace {

struct Message {
  int tag;
  double bytes;
  int phase;
  int op;  // index in its rank's list
};

std::string describe(const Message& m) {
  return "tag " + std::to_string(m.tag) + " (" + std::to_string(static_cast<long long>(m.bytes)) +
         " bytes, phase " + std::to_string(m.phase) + ", op " + std::to_string(m.op) + ")";
}

// A rank posts each phase's transfers back to back, phases non-decreasing.
std::string check_rank_phases(const RankSchedule& rs) {
  int phase = -1;
  bool in_post = false;
  for (size_t i = 0; i < rs.ops.size(); ++i) {
    const Op& op = rs.ops[i];
    const bool transfer = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
    if (!transfer) {
      in_post = false;
      continue;
    }
    const std::string where = "rank " + std::to_string(rs.gpu) + ", op " + std::to_string(i);
    if (op.phase < 0) return where + ": a transfer without a phase";
    if (op.phase < phase) {
      return where + ": phase " + std::to_string(op.phase) + " posted after phase " +
             std::to_string(phase);
    }
    if (op.phase == phase && !in_post) {
      return where + ": phase " + std::to_string(op.phase) +
             " posted in two parts (another op between its transfers)";
    }
    phase = op.phase;
    in_post = true;
  }
  return "";
}

// Every request a rank posts (send, receive, collective) is waited for exactly once, after
// it is posted and before the rank's list ends: a backend completes each (an MPI request,
// a CUDA event on NCCL's stream) and would leak or hang on one never waited, and a wait on
// the wrong request lets an op start before its data is there.
std::string check_rank_requests(const RankSchedule& rs) {
  std::unordered_map<int, int> open;  // request -> the op that posted it
  auto where = [&](size_t i) { return "rank " + std::to_string(rs.gpu) + ", op " + std::to_string(i); };
  for (size_t i = 0; i < rs.ops.size(); ++i) {
    const Op& op = rs.ops[i];
    if (op.kind == OpKind::kWait) {
      if (open.erase(op.request) == 0) {
        return where(i) + ": waits for request " + std::to_string(op.request) + ", which is not in flight";
      }
    } else if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kCollective) {
      if (!open.emplace(op.request, static_cast<int>(i)).second) {
        return where(i) + ": posts request " + std::to_string(op.request) + ", which is still in flight";
      }
    }
  }
  if (!open.empty()) {
    const auto oldest = std::min_element(open.begin(), open.end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
    return where(static_cast<size_t>(oldest->second)) + ": request " + std::to_string(oldest->first) +
           " is never waited for";
  }
  return "";
}

// A group's collective as each member posts it: a communicator matches its members'
// collectives by call order alone (NCCL's, MPI's), so the n-th of every member must agree.
struct Collective {
  const Op* op;
  int index;  // in its rank's list
  bool same(const Op& other) const { return op->collective == other.collective && op->bytes == other.bytes; }
};

std::string describe(const Collective& c, int gpu) {
  return "rank " + std::to_string(gpu) + "'s is " + op_name(*c.op) + " of " +
         std::to_string(static_cast<long long>(c.op->bytes)) + " bytes (op " + std::to_string(c.index) + ")";
}

// Every member of a group posts the same collectives on it, in the same order.
std::string check_collective_order(const OpSchedule& schedule) {
  struct Reference {
    int gpu = -1;
    std::vector<Collective> seq;
  };
  std::map<int, Reference> first;  // group -> its first member's (in rank order), complete
  std::unordered_map<int64_t, size_t> posted;  // group x ranks + gpu -> collectives
  const auto key = [&](int group, int gpu) {
    return static_cast<int64_t>(group) * static_cast<int64_t>(schedule.ranks.size()) + gpu;
  };
  for (const RankSchedule& rs : schedule.ranks) {
    for (size_t i = 0; i < rs.ops.size(); ++i) {
      const Op& op = rs.ops[i];
      if (op.kind != OpKind::kCollective) continue;
      const Collective c{&op, static_cast<int>(i)};
      Reference& ref = first[op.group];
      if (ref.gpu < 0) ref.gpu = rs.gpu;
      size_t& n = posted[key(op.group, rs.gpu)];
      if (ref.gpu == rs.gpu) {
        ref.seq.push_back(c);
      } else if (n >= ref.seq.size() || !ref.seq[n].same(op)) {
        const std::string theirs = n < ref.seq.size() ? describe(ref.seq[n], ref.gpu)
                                                      : "rank " + std::to_string(ref.gpu) + " posts none";
        return "group " + std::to_string(op.group) + ", collective " + std::to_string(n) + ": " +
               describe(c, rs.gpu) + ", " + theirs;
      }
      ++n;
    }
  }
  // (Ranks without an op list, ScheduleOptions::only_gpus, are skipped.)
  for (const auto& [group, ref] : first) {
    for (int gpu : schedule.groups[static_cast<size_t>(group)]) {
      if (gpu >= static_cast<int>(schedule.ranks.size()) || schedule.ranks[static_cast<size_t>(gpu)].ops.empty()) continue;
      const auto it = posted.find(key(group, gpu));
      const size_t n = it == posted.end() ? 0 : it->second;
      if (n != ref.seq.size()) {
        return "group " + std::to_string(group) + ": rank " + std::to_string(gpu) + " posts " + std::to_string(n) +
               " collectives on it, rank " + std::to_string(ref.gpu) + " " + std::to_string(ref.seq.size());
      }
    }
  }
  return "";
}

// One global order of every rank's posts across communicators (post_order.h): each
// collective instance (a group's n-th) and each phase's exchange between two ranks is a node;
// a phase's transfers, posted as one group, are one step.
std::string check_cross_communicator_order(const OpSchedule& schedule) {
  // Nodes: a group's n-th collective, or one phase of a pair of ranks' transfers. Each is
  // found without hashing per op: a group's by its index, a pair's by walking its phases in
  // order (both ends post them in increasing phase, the lower rank's list read first).
  // A node's key, its words only on a violation: a collective's group << 32 | n; a
  // transfer's top bit set over its pair << 31 | phase (groups, pairs, phases and counts
  // stay below 2^31).
  PostOrder order;
  std::vector<int64_t> nodes;  // by node id
  std::vector<std::vector<int>> collectives(schedule.groups.size());  // group -> node of its n-th
  std::vector<std::vector<std::pair<int, int>>> pairs;                // pair -> (phase, node), in order
  std::vector<std::pair<int, int>> pair_ranks;                        // pair -> (lower, higher rank)
  std::unordered_map<int64_t, int> pair_of;                           // lo x ranks + hi -> pair
  const int64_t ranks = static_cast<int64_t>(schedule.ranks.size());
  auto words = [&](int v) {
    const int64_t key = nodes[static_cast<size_t>(v)];
    if (key >= 0) return "collective " + std::to_string(key & 0xffffffff) + " on group " + std::to_string(key >> 32);
    const auto [lo, hi] = pair_ranks[static_cast<size_t>((key & INT64_MAX) >> 31)];
    return "phase " + std::to_string(key & 0x7fffffff) + " between ranks " + std::to_string(lo) + " and " +
           std::to_string(hi);
  };
  struct Peer {
    int peer, pair;
    size_t next;  // the pair's next phase this rank has not reached
  };
  std::vector<Peer> peers;
  std::vector<int> posted(schedule.groups.size());  // group -> collectives the rank posted on it
  std::vector<int> step;
  for (const RankSchedule& rs : schedule.ranks) {
    if (rs.ops.empty()) continue;
    std::fill(posted.begin(), posted.end(), 0);
    peers.clear();
    order.start_rank(rs.gpu);
    step.clear();
    int step_phase = -1;
    auto close_step = [&] {
      order.post(step);
      step.clear();
      step_phase = -1;
    };
    for (const Op& op : rs.ops) {
      if (op.kind == OpKind::kCollective) {
        if (!step.empty()) close_step();
        std::vector<int>& of_group = collectives[static_cast<size_t>(op.group)];
        const int n = posted[static_cast<size_t>(op.group)]++;
        if (static_cast<size_t>(n) == of_group.size()) {
          of_group.push_back(order.add_node());
          nodes.push_back(static_cast<int64_t>(op.group) << 32 | n);
        }
        step.push_back(of_group[static_cast<size_t>(n)]);
        close_step();
      } else if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
        if (op.phase != step_phase && !step.empty()) close_step();
        step_phase = op.phase;
        auto p = std::find_if(peers.begin(), peers.end(), [&](const Peer& x) { return x.peer == op.peer; });
        if (p == peers.end()) {
          const int lo = std::min(rs.gpu, op.peer), hi = std::max(rs.gpu, op.peer);
          const auto [it, added] = pair_of.emplace(lo * ranks + hi, static_cast<int>(pairs.size()));
          if (added) {
            pairs.emplace_back();
            pair_ranks.push_back({lo, hi});
          }
          peers.push_back({op.peer, it->second, 0});
          p = std::prev(peers.end());
        }
        std::vector<std::pair<int, int>>& phases = pairs[static_cast<size_t>(p->pair)];
        while (p->next < phases.size() && phases[p->next].first < op.phase) ++p->next;
        if (p->next == phases.size() || phases[p->next].first != op.phase) {
          // Not reached from the other end yet (or the contract is broken there, which the
          // link check reports first): a new node, in this end's phase order.
          phases.insert(phases.begin() + static_cast<std::ptrdiff_t>(p->next),
                        {op.phase, order.add_node()});
          nodes.push_back(INT64_MIN | static_cast<int64_t>(p->pair) << 31 | op.phase);
        }
        const int v = phases[p->next].second;
        if (std::find(step.begin(), step.end(), v) == step.end()) step.push_back(v);  // a send and its receive
      }
    }
    if (!step.empty()) close_step();
  }
  return order.violation(words);
}

}  // namespace

std::string contract_mismatch(int src, int dst, long long index, long long sent_tag,
                              long long sent_bytes, long long expected_tag,
                              long long expected_bytes) {
  return "message contract broken on link " + std::to_string(src) + " -> " +
         std::to_string(dst) + ", message " + std::to_string(index) + ": the sender posted tag " +
         std::to_string(sent_tag) + " (" + std::to_string(sent_bytes) +
         " bytes), the receiver expects tag " + std::to_string(expected_tag) + " (" +
         std::to_string(expected_bytes) + " bytes)";
}

std::string message_contract_violation(const OpSchedule& schedule) {
  // (src, dst) -> messages in posting order, from each end.
  std::map<std::pair<int, int>, std::vector<Message>> sent, received;
  for (const RankSchedule& rs : schedule.ranks) {
    if (rs.ops.empty()) continue;
    if (std::string e = check_rank_phases(rs); !e.empty()) return e;
    if (std::string e = check_rank_requests(rs); !e.empty()) return e;
    for (size_t i = 0; i < rs.ops.size(); ++i) {
      const Op& op = rs.ops[i];
      const Message m{op.tag, op.bytes, op.phase, static_cast<int>(i)};
      if (op.kind == OpKind::kSend) sent[{rs.gpu, op.peer}].push_back(m);
      if (op.kind == OpKind::kRecv) received[{op.peer, rs.gpu}].push_back(m);
    }
  }
  if (std::string e = check_collective_order(schedule); !e.empty()) return e;
  auto present = [&](int gpu) {
    return gpu >= 0 && gpu < static_cast<int>(schedule.ranks.size()) &&
           !schedule.ranks[static_cast<size_t>(gpu)].ops.empty();
  };
  auto link_name = [](std::pair<int, int> link) {
    return "link " + std::to_string(link.first) + " -> " + std::to_string(link.second);
  };
  std::map<std::pair<int, int>, bool> links;
  for (const auto& [link, v] : sent) links[link] = true;
  for (const auto& [link, v] : received) links[link] = true;
  const std::vector<Message> none;
  for (const auto& [link, unused] : links) {
    if (!present(link.first) || !present(link.second)) continue;
    auto s = sent.find(link);
    auto r = received.find(link);
    const std::vector<Message>& out = s == sent.end() ? none : s->second;
    const std::vector<Message>& in = r == received.end() ? none : r->second;
    for (size_t n = 0; n < out.size() && n < in.size(); ++n) {
      const Message& a = out[n];
      const Message& b = in[n];
      if (a.tag != b.tag || a.bytes != b.bytes || a.phase != b.phase) {
        return link_name(link) + ", message " + std::to_string(n) + ": the sender posts " +
               describe(a) + ", the receiver " + describe(b);
      }
    }
    if (out.size() != in.size()) {
      return link_name(link) + ": " + std::to_string(out.size()) + " sends, " +
             std::to_string(in.size()) + " receives";
    }
  }
  return check_cross_communicator_order(schedule);
}

}  // namespace rm
