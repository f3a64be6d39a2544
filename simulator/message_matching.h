// Pairing the two ends of every transfer, by the rule every transport follows (the message
// contract of op_list.h): a point-to-point message is the n-th send its source posts on
// the directed link src -> dst and the n-th receive its destination posts on it, whatever
// their tags say. NCCL has no tags, so a schedule that paired by (src, dst, tag) in the
// simulator could hang on GPUs; pairing by posting order here makes the simulator see
// what NCCL sees. Both ends must then agree on tag and bytes; a disagreement is a
// generator bug, thrown as std::runtime_error with contract_mismatch's text
// (message_contract.h), the words the MPI and local transports use.
//
// A collective's flow between two members of its group (collective_ring.h) is keyed by
// the collective's tag, its sequence number on the group, and both ends must agree on its
// size.
//
// Both replays post the ends of each rank in the order of its op list, so the numbering
// is the ranks' posting order whatever order the ranks run in.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "planner/op_list.h"

namespace rm::sim {

// One end of a transfer, as its poster states it.
struct MessageEnd {
  int src = 0, dst = 0;
  bool sender = false;      // posted by src (a send; a collective member's outgoing flow)
  bool collective = false;  // a collective's flow: `tag` is its sequence on the group
  int tag = 0;
  double bytes = 0;
};

// The end of the send or receive `op` that GPU `self` posts.
MessageEnd transfer_end(int self, const Op& op);

// Which message an end belongs to: the link, and the message's index on it (2n for the
// n-th point-to-point message, 2·tag + 1 for a collective's flow).
struct MessageKey {
  int64_t link = 0;
  int64_t index = 0;
  bool operator==(const MessageKey& o) const { return link == o.link && index == o.index; }
};
struct MessageKeyHash {
  size_t operator()(const MessageKey& k) const {
    return std::hash<int64_t>()(k.link * 0x9E3779B97F4A7C15LL ^ k.index);
  }
};

// Numbers the point-to-point ends of each link in posting order, separately for sends
// and receives, so the n-th of each meet under one key.
class MessageNumbering {
 public:
  explicit MessageNumbering(int gpus) : gpus_(gpus) {}
  MessageKey key(const MessageEnd& e);

 private:
  int64_t gpus_;
  std::unordered_map<int64_t, int64_t> sent_, received_;  // link -> ends posted so far
};

// Throws std::runtime_error when two ends that met under key `k` disagree (see above).
void check_ends_agree(const MessageEnd& first, const MessageEnd& second, const MessageKey& k);

// Messages with one end posted, each holding a T for the replay (a transfer id, a SimGrid
// transfer). T is default-constructible and copyable.
template <class T>
class MessageTable {
 public:
  explicit MessageTable(int gpus) : numbering_(gpus) {}

  struct Posted {
    T value;
    bool first;  // this end came first: `value` is make()'s, now stored
  };

  // Posts end `e`. The first end of a message stores make()'s value; the second gets the
  // stored value after checking that the ends agree, and the message leaves the table.
  template <class Make>
  Posted post(const MessageEnd& e, Make&& make) {
    const MessageKey k = numbering_.key(e);
    auto [it, added] = open_.try_emplace(k);
    if (added) {
      it->second = {e, make()};
      return {it->second.value, true};
    }
    Open o = std::move(it->second);
    open_.erase(it);
    check_ends_agree(o.end, e, k);
    return {std::move(o.value), false};
  }

 private:
  struct Open {
    MessageEnd end;
    T value;
  };
  MessageNumbering numbering_;
  std::unordered_map<MessageKey, Open, MessageKeyHash> open_;
};

}  // namespace rm::sim
