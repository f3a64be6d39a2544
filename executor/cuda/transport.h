// How the cuda backend moves byte ranges of device buffers between ranks. Two transports,
// chosen per job by cuda_backend.cc:
//   nccl   one GPU per rank (any number of nodes): NCCL send/recv (nccl_transport.h)
//   local  ranks of one node sharing GPUs (e.g. a whole ring on one GPU): device-to-device
//          copies through CUDA IPC on a copy stream, with MPI messages for the handshake
//          (local_transport.h)
// Both keep MPI's rules for the ring loop: messages between two ranks complete in
// posting order, a send's region must stay untouched until its wait returns, and the
// region a receive fills is ready when its wait returns.
//
// Not thread safe: one transport per backend, driven from the rank's thread.
#pragma once

#include <cstddef>
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
  // Sets up links to `peers` (ranks this rank will exchange messages with, either
  // direction; repeats allowed). Collective among those peers: each of them calls it
  // with this rank.
  virtual void connect(const std::vector<int>& peers) = 0;
  // Post a transfer; returns a request id. The region's producer has finished (the
  // backend's kernels are synchronous), so no stream ordering is needed before it.
  virtual int isend(const DeviceRegion& region, int peer, int tag) = 0;
  virtual int irecv(const DeviceRegion& region, int peer, int tag) = 0;
  // Advances every posted transfer; true once `request` has completed (the id is then
  // released). Throws CudaError on a transfer failure (naming the op, rank and peer).
  virtual bool test(int request) = 0;
  // Advances posted transfers without waiting (called while kernels run, so copies and
  // handshakes overlap compute).
  virtual void progress() = 0;
  // What `request` is, for a timeout message: "send of 1048576 bytes to rank 3 (tag 7)".
  virtual std::string describe(int request) const = 0;
  // Gives up on every transfer in flight after a timeout (NCCL: ncclCommAbort), so that
  // the process can exit instead of hanging on a dead peer.
  virtual void abort() = 0;
};

}  // namespace rm::gpu
