// The nccl transport: one GPU per rank, NCCL point-to-point transfers.
//
// One communicator per directed link (a 2-rank communicator for "A sends to B"), each
// with its own stream. NCCL runs the operations of one communicator in the order they
// were posted, and a send and a receive that share a communicator can block each other
// unless they are posted together in one ncclGroupStart/End. The ring loop posts sends
// and receives one at a time and keeps several of them in flight (K,V blocks, dK,dV
// accumulators, sub-blocks, two directions in a bidirectional ring), so on one shared
// communicator a receive posted early could queue behind a send that waits for a peer
// that waits for us. With a communicator per direction every queue holds only the
// messages of one link, in the order both ends post them: MPI's non-overtaking rule, and
// no two links can block each other. connect() creates the links (the sending end draws
// the ncclUniqueId and sends it to the receiving end over MPI; all of a rank's links are
// initialised in one ncclGroupStart/End, so their bootstraps run concurrently). Links are
// kept for the life of the process and reused by later backends (calibration makes one
// backend per kernel shape).
//
// Errors: every NCCL call is checked (op, rank, peer, ncclGetErrorString and
// ncclGetLastError); test() polls ncclCommGetAsyncError while a transfer is pending, and
// abort() calls ncclCommAbort on every link after the backend's timeout.
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/cuda/transport.h"

namespace rm::gpu {

// `comm` numbers the ranks (MPI_COMM_WORLD or a duplicate of it).
std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm);

}  // namespace rm::gpu
