// Message matching by posting order (see message_matching.h).
#include "simulator/message_matching.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "planner/message_contract.h"

namespace rm::sim {

MessageEnd transfer_end(int self, const Op& op) {
  const bool send = op.kind == OpKind::kSend;
  MessageEnd e;
  e.src = send ? self : op.peer;
  e.dst = send ? op.peer : self;
  e.sender = send;
  e.tag = op.tag;
  e.bytes = op.bytes;
  return e;
}

MessageKey MessageNumbering::key(const MessageEnd& e) {
  const int64_t link = int64_t{e.src} * gpus_ + e.dst;
  if (e.collective) return {link, int64_t{e.tag} * 2 + 1};
  int64_t& n = (e.sender ? sent_ : received_)[link];
  return {link, 2 * n++};
}

void check_ends_agree(const MessageEnd& first, const MessageEnd& second, const MessageKey& k) {
  // Sizes as the transports carry them: whole bytes.
  const long long a = std::llround(first.bytes), b = std::llround(second.bytes);
  if (first.collective) {
    if (a == b) return;
    throw std::runtime_error("GPU " + std::to_string(first.src) + " -> " + std::to_string(first.dst) +
                             ": the two members of collective " + std::to_string(first.tag) +
                             " disagree on its size (" + std::to_string(a) + " and " +
                             std::to_string(b) + " bytes)");
  }
  if (first.tag == second.tag && a == b) return;
  const MessageEnd& sent = first.sender ? first : second;
  const MessageEnd& expected = first.sender ? second : first;
  throw std::runtime_error(contract_mismatch(sent.src, sent.dst, k.index / 2, sent.tag,
                                             std::llround(sent.bytes), expected.tag,
                                             std::llround(expected.bytes)));
}

}  // namespace rm::sim
