// NCCL's error check and communicators over MPI groups (see nccl_comm.h).
#include "executor/cuda/nccl_comm.h"

#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/transport.h"

namespace rm::gpu {

void check_nccl(ncclResult_t r, ncclComm_t comm, const std::string& op, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  std::string reason = ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    reason += std::string(" (") + last + ")";
  throw_cuda_error(op.c_str(), reason, file, line);
}

ncclComm_t nccl_comm_of(MPI_Comm mpi, const std::string& what) {
  int size = 1, rank = 0;
  check_mpi(MPI_Comm_size(mpi, &size), "MPI_Comm_size (" + what + ")");
  check_mpi(MPI_Comm_rank(mpi, &rank), "MPI_Comm_rank (" + what + ")");
  ncclUniqueId id{};
  if (rank == 0) RM_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
  check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi), "MPI_Bcast of the NCCL id (" + what + ")");
  ncclComm_t comm = nullptr;
  RM_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), nullptr,
                "ncclCommInitRank (" + what + ", rank " + std::to_string(rank) + ")");
  return comm;
}

}  // namespace rm::gpu
