// Point-to-point transfers over MPI_COMM_WORLD that keep the message contract
// (planner/op_list.h) the way NCCL does, and check it, so CI on CPU catches what a GPU
// run would hang on:
//   - Pairing by posting order. Every payload travels on one MPI tag, so MPI's
//     non-overtaking rule pairs the n-th send on a link with the n-th receive, exactly as
//     NCCL (which has no tags) pairs them. The schedule's tag never steers the pairing.
//   - Checked. Before each payload the sender sends a small header {schedule tag, bytes,
//     message index on the link} on a second MPI tag (ordered the same way); a receive's
//     wait() reads the header first and throws, naming link, message, tags and sizes
//     (contract_mismatch in planner/message_contract.h), when it is not the message the
//     receiver expects, before any payload of the wrong size can be taken in.
//   - Posting phases. begin_phase() / end_phase() keep the nccl transport's rules
//     (posting_phases.h): no phase inside a phase, no end without a begin, no wait on a
//     transfer of the phase still open (NCCL would hang there; MPI would not).
// One transport per rank, driven from one thread (the backend's).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <deque>
#include <map>
#include <vector>

#include "executor/posting_phases.h"

namespace rm::exec {

// This process's rank in MPI_COMM_WORLD.
int world_rank();

// Throws std::runtime_error "<what> (peer P): <MPI's message>" unless `rc` is
// MPI_SUCCESS (no peer part when `peer` < 0).
void check_mpi(int rc, const char* what, int peer = -1);

class MpiTransport {
 public:
  // Post a non-blocking send / receive of `bytes` at `data` to / from `peer`; `tag` is the
  // schedule's. Returns a request handle (>= 0) for wait().
  int isend(const void* data, std::size_t bytes, int peer, int tag);
  int irecv(void* data, std::size_t bytes, int peer, int tag);
  // A posting phase's bounds (backend.h), checked as the nccl transport needs them
  // (posting_phases.h): MPI itself posts at once.
  void begin_phase() { phases_.begin(); }
  void end_phase() { phases_.end(); }
  // Block until the request completes (the handle is then invalid). Throws
  // std::runtime_error when a receive's message breaks the contract.
  void wait(int request);
  // Lets posted transfers move (between compute tiles); completes nothing visible.
  void progress();

 private:
  struct Header {
    long long tag = 0;
    long long bytes = 0;
    long long index = 0;  // message number on the link (0, 1, ...)
  };
  struct Request {
    bool in_use = false;
    bool recv = false;
    int peer = -1;
    Header mine;     // what this end posted (a send's header, a receive's expectation)
    Header theirs;   // a receive: the header that arrived
    long long phase = -1;  // PostingPhases::posted() when it was posted
  };

  int post(bool recv, void* data, std::size_t bytes, int peer, int tag);
  int slot();

  std::deque<Request> requests_;  // a deque: MPI holds pointers to the headers in flight
  // MPI requests, two per slot: [2i] header, [2i+1] payload (MPI_REQUEST_NULL when done).
  std::vector<MPI_Request> mpi_;
  std::vector<int> free_;
  std::map<int, long long> sent_, received_;  // messages posted per peer, each direction
  std::vector<int> done_;                     // MPI_Testsome's index output
  PostingPhases phases_{"MPI"};
};

}  // namespace rm::exec
