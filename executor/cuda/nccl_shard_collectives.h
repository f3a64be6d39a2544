// FSDP's collectives over NCCL (shard_collectives.h), buffers in device memory: one
// communicator per group of more than one rank (the shard group, the replica group), made
// from the MPI communicator of the same ranks (its rank 0 draws the ncclUniqueId), with
// NCCL rank = MPI rank, and one communication stream of the device's greatest priority.
//
// Ordering with the kernels (cuda_train_kernels.h: the legacy default stream): a
// collective first makes its stream wait for an event recorded on the kernels' stream
// (the buffer's producers, its in-place chunk copy among them, come before it), then
// runs; wait_all_gather() and the blocking collectives wait on the host for an event
// after it, so the kernels posted next see the result, and the time a rank spends blocked
// is what FsdpParams records, as on MPI. The all-gather is ncclAllGather in place
// (sendbuff = recvbuff + rank * count), the reduce-scatter ncclReduceScatter (sum) into a
// separate shard, the replicas' all-reduce ncclAllReduce in place.
//
// Teardown: ncclCommFinalize and ncclCommDestroy when it goes normally; ncclCommAbort
// when it goes during an exception (a peer may never reach its own finalize).
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/shard_collectives.h"

namespace rm::gpu {

// On the current device; collective over both MPI communicators (which must outlive it).
std::unique_ptr<exec::ShardCollectives> make_nccl_shard_collectives(MPI_Comm shard, MPI_Comm replica);

}  // namespace rm::gpu
