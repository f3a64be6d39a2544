// The message contract of op_list.h, checked on generated op lists: on every directed
// link src -> dst the n-th send of src and the n-th receive of dst agree on tag, bytes and
// phase, both ends post the same number of messages, each rank posts a phase's
// transfers back to back with phases never decreasing, and waits for each request it
// posts exactly once; every member of a group posts the same collectives on it (kind,
// bytes) in the same order, as NCCL's and MPI's communicators match them by call order; and
// one order of posts across communicators serves every rank (each group's n-th collective
// and each phase's exchange between two ranks, ordered by every rank's posting order, form
// no cycle), since NCCL can hang where two ranks post two communicators' operations the other
// way round. The schedule tests run it on every schedule; the simulator runs it before a
// replay; transports enforce the same rules at run time (each message carries its tag and
// size, and a mismatch is an error; shard_collectives.h fingerprints the collectives; train
// checks the order across communicators on what every rank posted, executor/post_log.h).
#pragma once

#include <string>

#include "planner/op_list.h"

namespace rm {

// "" when the contract holds; otherwise the first violation in one line, naming the link,
// the message's index on it and both ends' tag, bytes and phase (or, for the order across
// communicators, the cycle: which rank posts what before what). Ranks without an op list
// (ScheduleOptions::only_gpus) are skipped with their links.
std::string message_contract_violation(const OpSchedule& schedule);

// A transport's words for a pairing that broke the contract at run time (the MPI and the
// local transport use it, so the text is the same everywhere):
//   "message contract broken on link 0 -> 1, message 3: the sender posted tag 12 (262144
//    bytes), the receiver expects tag 13 (131072 bytes)"
std::string contract_mismatch(int src, int dst, long long index, long long sent_tag,
                              long long sent_bytes, long long expected_tag,
                              long long expected_bytes);

}  // namespace rm
