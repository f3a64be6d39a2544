// What the NCCL users of the cuda backend share (the ring transport, nccl_transport.h;
// FSDP's collectives, nccl_shard_collectives.h): the error check of every NCCL call and
// the making of a communicator over the ranks of an MPI communicator.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <string>

namespace rm::gpu {

// Throws CudaError "<op> failed on <context>: <ncclGetErrorString> (<ncclGetLastError>)"
// unless r is ncclSuccess or ncclInProgress.
void check_nccl(ncclResult_t r, ncclComm_t comm, const std::string& op, const char* file, int line);
// "<ncclGetErrorString> (<ncclGetLastError>)": check_nccl's reason, for a caller that must
// read it before it aborts `comm`.
std::string nccl_error_reason(ncclResult_t r, ncclComm_t comm);
#define RM_NCCL_CHECK(expr, comm, op) ::rm::gpu::check_nccl((expr), (comm), (op), __FILE__, __LINE__)

// Throws CudaError naming `what` when `comm` reports an asynchronous error: how NCCL's user
// guide waits ("Error handling": ncclCommGetAsyncError while the stream is busy).
void check_nccl_async(ncclComm_t comm, const std::string& what);

// The NCCL communicator of the ranks of `mpi`, NCCL rank = MPI rank: its rank 0 draws the
// ncclUniqueId and broadcasts it, then every rank joins (ncclCommInitRank, on the current
// device). Collective over `mpi`; `what` names the group in errors. Throws CudaError on every
// rank when two ranks of `mpi` share a GPU (NCCL runs one rank per GPU: FSDP's groups of
// ranks that share a GPU, whose ring takes the local transport, would otherwise hang).
ncclComm_t nccl_comm_of(MPI_Comm mpi, const std::string& what);

}  // namespace rm::gpu
