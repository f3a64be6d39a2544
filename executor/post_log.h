// What one rank of `ringmaster train` posts on its communicators, in order, and the check
// that one order of posts across communicators serves every rank (planner/post_order.h):
// the order NCCL needs where a rank drives several communicators (the ring's transfers,
// FSDP's shard and replica groups, the TP group, the pipeline's exchanges), each on its own
// stream, and which neither NCCL nor MPI checks. The generated op lists are checked before
// a run (message_contract.h); this checks what the executor's program order really posted,
// collectives included, on the MPI transport in CI as it would be posted to NCCL.
//
// A rank logs steps: a collective on a named communicator (the name, with its members'
// world ranks, is the same on every member), or the messages it posted together (a ring
// phase or a pipeline exchange: one ncclGroupStart/End). Nodes are a communicator's n-th
// collective and a link's n-th message on a channel (its send and its receive), counted
// since the last check. check() is collective over the world and must come at the same
// point of every rank's program (train: once a step); host-side MPI calls (the loss and
// norm sums, barriers) are not logged, since they queue on no device stream.
#pragma once

#include <mpi.h>

#include <string>

namespace rm::exec {

class PostLog {
 public:
  // A collective on communicator `comm` (comm_name): a step of its own.
  void collective(const std::string& comm);
  // A message to (`send`) or from `peer` on `channel` ("ring", "pipeline"; no spaces), in
  // the step that end_step() closes.
  void message(const char* channel, bool send, int peer);
  // The messages since the last end_step() were posted together.
  void end_step();
  // Gathers every rank's steps since the last check on rank 0 and throws
  // std::runtime_error on every rank when no one order serves them:
  //   "no one order of posts across communicators serves every rank (NCCL may hang): rank 1
  //    posts message 0 of ring link 0 -> 1 before collective 2 of FSDP shard group of ranks
  //    0,1; rank 0 posts ..."
  // Then starts a new window.
  void check(MPI_Comm world);

 private:
  std::string steps_;  // one line a step: "c <communicator>" or "m <channel> s<peer> r<peer> ..."
  std::string open_;   // the open step's messages
};

// `owner` + " " + `group` + " group of ranks " + the world ranks of `comm`'s members, in
// its order, e.g. "FSDP shard group of ranks 0,2": the same text on every member.
std::string comm_name(MPI_Comm comm, const std::string& owner, const std::string& group);

}  // namespace rm::exec
