// Checking the message contract on op lists (see message_contract.h).
#include "planner/message_contract.h"

#include <map>
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
  std::map<int, int> open;  // request -> the op that posted it
  for (size_t i = 0; i < rs.ops.size(); ++i) {
    const Op& op = rs.ops[i];
    const std::string where = "rank " + std::to_string(rs.gpu) + ", op " + std::to_string(i);
    if (op.kind == OpKind::kWait) {
      if (open.erase(op.request) == 0) {
        return where + ": waits for request " + std::to_string(op.request) + ", which is not in flight";
      }
    } else if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kCollective) {
      if (!open.emplace(op.request, static_cast<int>(i)).second) {
        return where + ": posts request " + std::to_string(op.request) + ", which is still in flight";
      }
    }
  }
  if (!open.empty()) {
    return "rank " + std::to_string(rs.gpu) + ", op " + std::to_string(open.begin()->second) + ": request " +
           std::to_string(open.begin()->first) + " is never waited for";
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
