// The local transport: ranks of one node that share GPUs (a whole ring on one GPU, for
// running and verifying every schedule on a single device). Each rank is its own MPI
// process, exactly as with NCCL, so the ring loop, the watchdog, the measurement gather
// and --verify run unchanged; only the bytes move differently: device to device,
// through CUDA IPC, on a copy stream of the receiving rank.
//
// Protocol per message (MPI carries only small control messages, on duplicates of the
// world communicator so they never meet the ring loop's own traffic):
//   sender   isend: sends a descriptor {IPC handle of the buffer's allocation, offset,
//            bytes, schedule tag, message index on the link, sequence number} to the
//            receiver, on ONE MPI tag for every descriptor.
//   receiver irecv: posts the receive of the next descriptor from that peer (same MPI
//            tag); once it arrives (any later progress call), checks it against the
//            receive (the message contract, below), opens the handle (cached per
//            allocation), starts the copy peer -> own buffer on its copy stream; when the
//            copy has finished it sends "done <sequence>" back.
//   sender   the send completes when its "done" arrives (until then the region must not
//            change, as for MPI).
// Pairing by posting order: descriptors between two ranks all travel on one MPI tag, so
// MPI's non-overtaking rule pairs the n-th send posted on a link with the n-th receive,
// as NCCL pairs them; the schedule's tag never steers the pairing. The receiver then
// checks that the descriptor states the tag and size it expects and otherwise throws
// std::runtime_error(contract_mismatch(...)) (planner/message_contract.h), before
// copying anything: never a silent pairing. Progress happens in test() and progress(),
// which the backend calls while its kernels run, so copies overlap compute. Phases need
// nothing here (MPI requests progress independently).
//
// The device work (IPC handles, copies) goes through a CopyEngine, so the protocol runs
// in tests without a device (tests/cuda/local_transport_test.cc).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "executor/cuda/transport.h"

namespace rm::gpu {

// What the local transport asks of the device.
class CopyEngine {
 public:
  // An allocation exported for other processes of the node (a cudaIpcMemHandle_t).
  struct Handle {
    char bytes[64];
  };
  virtual ~CopyEngine() = default;
  // A handle for the allocation that starts at `base`.
  virtual Handle export_allocation(void* base) = 0;
  // The local address of an allocation another process exported (opened once, cached).
  virtual char* open_allocation(const Handle& handle) = 0;
  // Starts copying `bytes` from `src` to `dst`; returns a ticket for copy_done().
  virtual int start_copy(void* dst, const void* src, std::size_t bytes) = 0;
  // Whether the copy has finished (the ticket is then released). Throws CudaError when it
  // failed.
  virtual bool copy_done(int ticket) = 0;
};

// CUDA IPC and one copy stream on the current device.
std::unique_ptr<CopyEngine> make_cuda_copy_engine();

// `comm` numbers the ranks; the transport duplicates it for its control messages
// (collective over `comm`). Without an engine, the CUDA one.
std::unique_ptr<Transport> make_local_transport(MPI_Comm comm,
                                                std::unique_ptr<CopyEngine> engine = nullptr);

}  // namespace rm::gpu
