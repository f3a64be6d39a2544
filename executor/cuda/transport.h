// How the cuda backend moves byte ranges of device buffers between ranks. Two transports,
// chosen per job by cuda_backend.cc:
//   nccl   one GPU per rank (any number of nodes): NCCL send/recv, one communicator per
//          ring (nccl_transport.h)
//   local  ranks of one node sharing GPUs (e.g. a whole ring on one GPU): device-to-device
//          copies through CUDA IPC on a copy stream, with MPI messages for the handshake
//          (local_transport.h)
//
// The message contract (planner/op_list.h). Messages pair by posting order on each
// directed link, never by tag: the n-th isend this rank posts to a peer meets the n-th
// irecv the peer posts from this rank, and both state the schedule's tag and the same
// size. The local transport checks tag and size on every message and throws
// contract_mismatch (planner/message_contract.h); NCCL has no tags and cannot see a
// mismatch on the device (it truncates or hangs), so the nccl transport counts messages
// per link and names the stuck one in describe(), and CI runs the schedules on the
// checking transports (MPI, local). The transfers of one posting phase come between
// begin_phase() and end_phase(), with no test() of them in between.
//
// Both keep MPI's rules for the ring loop: a send's region must stay untouched until its
// request completes, and the region a receive fills is ready when its request completes.
//
// Not thread safe: one transport per backend, driven from the rank's thread.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace rm::gpu {

// A byte range of a device allocation (`base` as cudaMalloc returned it: CUDA IPC
// exports whole allocations).
struct DeviceRegion {
  void* base = nullptr;
  std::size_t offset = 0;
  std::size_t bytes = 0;
  char* ptr() const { return static_cast<char*>(base) + offset; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // The ranks of this rank's ring (its process group) in ring-position order, this rank
  // included. Collective among them: every member calls it with the same list, before
  // its first transfer. Transfers go to members only.
  virtual void connect(const std::vector<int>& group) = 0;
  // Bracket the transfers of one posting phase (nccl: one ncclGroupStart/End). A transfer
  // posted outside them is issued at the next call that is not a post (test, progress,
  // begin_phase), together with the posts just before it.
  virtual void begin_phase() = 0;
  virtual void end_phase() = 0;
  // Post a transfer stating the schedule's `tag`; returns a request id. The region's
  // producer has finished (the backend's kernels are synchronous), so no stream ordering
  // is needed before it.
  virtual int isend(const DeviceRegion& region, int peer, int tag) = 0;
  virtual int irecv(const DeviceRegion& region, int peer, int tag) = 0;
  // Advances every posted transfer; true once `request` has completed (the id is then
  // released). Throws CudaError on a transfer failure (naming the op, rank and peer) and
  // std::runtime_error when a message breaks the contract (local).
  virtual bool test(int request) = 0;
  // Advances posted transfers without waiting (called while kernels run, so copies and
  // handshakes overlap compute).
  virtual void progress() = 0;
  // What `request` is, for a timeout message: "ncclRecv of 1048576 bytes from rank 3
  // (tag 7), message 4 on link 3 -> 2, ...".
  virtual std::string describe(int request) const = 0;
  // Gives up on every transfer in flight after a timeout (NCCL: ncclCommAbort), so that
  // the process can exit instead of hanging on a dead peer.
  virtual void abort() = 0;
};

// Messages posted on each directed link of this rank: the index a message has on its
// link, the n of the contract's "n-th send pairs with the n-th receive".
class LinkCounters {
 public:
  long long next(bool recv, int peer) { return (recv ? received_ : sent_)[peer]++; }

 private:
  std::map<int, long long> sent_, received_;
};

// An id for a new element of `items` (a vector or deque of requests, events, ...): one
// that `free` holds for reuse, else a new default element at the end.
template <typename Items>
int take_slot(Items& items, std::vector<int>& free) {
  if (!free.empty()) {
    const int id = free.back();
    free.pop_back();
    return id;
  }
  items.emplace_back();
  return static_cast<int>(items.size()) - 1;
}

// This rank's position in connect()'s list; throws std::logic_error naming the list when
// the rank is not in it, or some rank is in it twice (a caller's mistake).
int position_in_group(const std::vector<int>& group, int rank);

// Throws CudaError "<op> failed on <context>: <MPI's error string>" unless rc is
// MPI_SUCCESS (the transports and the backend check every MPI call with it).
void check_mpi(int rc, const std::string& op);

}  // namespace rm::gpu
