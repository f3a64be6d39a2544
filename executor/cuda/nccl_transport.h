// The nccl transport: one GPU per rank, NCCL point-to-point transfers.
//
// One communicator per ring. connect(group) creates it among the group's members: an MPI
// communicator of exactly those ranks (MPI_Comm_create_group, collective over the group
// only, so rings set up independently), whose rank 0 draws the ncclUniqueId and
// broadcasts it, then ncclCommInitRank with NCCL rank = ring position (world rank ->
// NCCL rank by the group's order). Each communicator has one communication stream, of the
// device's greatest priority, so NCCL's kernels get SMs ahead of the attention kernels.
// A process keeps its communicators, keyed by the group, for later transports that
// connect the same group (calibration makes one backend per kernel shape).
//
// Posting. The transfers between begin_phase() and end_phase() are issued at end_phase()
// as ONE ncclGroupStart/ncclGroupEnd on the communication stream, followed by one event
// that completes all of them. Transfers posted outside a phase are collected and issued
// the same way as one group at the next call that is not a post (test, progress,
// begin_phase): NCCL's send/recv block the GPU until their peer's matching call runs, so
// a receive and a send that must progress together (a ring exchange) have to share a
// group ("Point-to-point communication", NCCL user guide), and on one stream a receive
// issued alone would sit ahead of the send its peer waits for.
//
// Why this cannot deadlock when the op lists keep the message contract (op_list.h):
//   - every rank posts its phases in increasing order, each phase's transfers back to
//     back, and both ends of a message put it in the same phase (checked by
//     message_contract_violation on every schedule); so each rank's stream holds its
//     groups in phase order, and group k of a rank meets only groups k of its peers;
//   - calls inside a group progress independently and never block each other; calls to
//     the same peer run in posting order (NCCL user guide, "Point-to-point
//     communication"), which is the contract's pairing;
//   - by induction on k: once every group below k has completed everywhere, every rank
//     gets to post group k (its waits are on groups below k), all groups k are on their
//     streams, and they complete. A rank never waits on a phase it has not yet issued
//     (the ring loop waits only after a phase's end_phase). Where ncclGroupEnd blocks
//     the host (first use of a connection, set up with the peer), it waits for a peer
//     that reaches its own group k by the same argument.
//   - one stream and one kernel per phase: at most one NCCL kernel per rank waits on
//     peers at any time, whatever the number of peers and messages (per-peer
//     communicators on separate streams need a hardware queue each,
//     CUDA_DEVICE_MAX_CONNECTIONS, and deadlock when they run out).
//
// What NCCL cannot check. NCCL has no tags and does not compare sizes: a receive smaller
// than its send is truncated, a larger one never completes. The transport counts the
// messages of each link and describe() names the message a stuck request is (link, index,
// tag, size), which is what to compare with the schedule (`ringmaster schedule`); the
// MPI and local transports check every message's tag and size at run time, and CI runs
// every schedule on them.
//
// Lifetime and errors: every NCCL and CUDA call is checked (op, rank, peer,
// ncclGetErrorString and ncclGetLastError); test() polls ncclCommGetAsyncError while a
// transfer is pending. abort() calls ncclCommAbort on every communicator of the process
// and destroys their streams (after a timeout); a transport destroyed with transfers
// still on the device aborts the same way (its buffers are about to be freed). Otherwise
// communicators and streams live until MPI_Finalize, which destroys them
// (ncclCommFinalize, ncclCommDestroy; see nccl_transport.cc); a transport's events go
// with it.
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/cuda/transport.h"

namespace rm::gpu {

// `comm` numbers the ranks (MPI_COMM_WORLD); connect()'s groups are ranks of it.
std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm);

}  // namespace rm::gpu
