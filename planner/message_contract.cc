// Checking the message contract on op lists (see message_contract.h).
#include "planner/message_contract.h"

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
  return "";
}

}  // namespace rm
