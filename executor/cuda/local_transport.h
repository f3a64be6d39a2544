// The local transport: ranks of one node that share GPUs (a whole ring on one GPU, for
// running and verifying every schedule on a single device). Each rank is its own MPI
// process, exactly as with NCCL, so the ring loop, the watchdog, the measurement gather
// and --verify run unchanged; only the bytes move differently: device to device,
// through CUDA IPC, on a copy stream of the receiving rank.
//
// Protocol per message (MPI carries only 96-byte control messages, on duplicates of the
// world communicator so they never meet the ring loop's own traffic):
//   sender   isend: posts a descriptor {IPC handle of the buffer's allocation, offset,
//            bytes, sequence number} to the receiver with the message's tag.
//   receiver irecv: posts the matching receive of the descriptor; once it arrives (any
//            later progress call), opens the handle (cached per allocation), enqueues
//            cudaMemcpyAsync peer -> own buffer on its copy stream and records an event;
//            when the event has fired it sends "done <sequence>" back.
//   sender   the send completes when its "done" arrives (until then the region must not
//            change, as for MPI).
// Descriptors between two ranks with one tag match in posting order (MPI's
// non-overtaking rule), so sub-blocks and repeated blocks pair up as the ring loop
// expects. Progress happens in test() and progress(), which the backend calls while its
// kernels run, so copies overlap compute.
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/cuda/transport.h"

namespace rm::gpu {

// `comm` numbers the ranks; the transport duplicates it for its control messages
// (collective over `comm`).
std::unique_ptr<Transport> make_local_transport(MPI_Comm comm);

}  // namespace rm::gpu
