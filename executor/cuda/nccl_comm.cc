// NCCL's error check and communicators over MPI groups (see nccl_comm.h).
#include "executor/cuda/nccl_comm.h"

#include <cstring>
#include <vector>

#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/transport.h"

namespace rm::gpu {

namespace {

// NCCL takes one rank per GPU in a communicator ("Using the same CUDA device multiple times
// as different ranks of the same NCCL communicator is not supported and may lead to hangs",
// NCCL user guide, Communicators): every rank of `mpi` learns which ranks share a GPU (host
// name and PCI bus id) and all throw the same error before any of them calls NCCL.
void require_one_rank_per_gpu(MPI_Comm mpi, int size, const std::string& what) {
  constexpr int kKey = MPI_MAX_PROCESSOR_NAME + 32;
  std::vector<char> mine(kKey, '\0'), all(static_cast<size_t>(kKey) * size, '\0');
  int len = 0, device = 0;
  check_mpi(MPI_Get_processor_name(mine.data(), &len), "MPI_Get_processor_name");
  RM_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  mine[static_cast<size_t>(len)] = '/';
  RM_CUDA_CHECK(cudaDeviceGetPCIBusId(mine.data() + len + 1, kKey - len - 2, device), "cudaDeviceGetPCIBusId");
  check_mpi(MPI_Allgather(mine.data(), kKey, MPI_CHAR, all.data(), kKey, MPI_CHAR, mpi),
            "MPI_Allgather of the GPUs (" + what + ")");
  for (int a = 0; a < size; ++a)
    for (int b = a + 1; b < size; ++b)
      if (std::strncmp(&all[static_cast<size_t>(a) * kKey], &all[static_cast<size_t>(b) * kKey], kKey) == 0)
        throw CudaError("cuda backend: ranks " + std::to_string(a) + " and " + std::to_string(b) + " of the " + what +
                        " share one GPU (" + std::string(&all[static_cast<size_t>(a) * kKey]) +
                        "), which NCCL does not run: start one rank per GPU, or use the cpu backend");
}

}  // namespace

std::string nccl_error_reason(ncclResult_t r, ncclComm_t comm) {
  std::string reason = ncclGetErrorString(r);
  if (const char* last = ncclGetLastError(comm); last != nullptr && *last != '\0')
    reason += std::string(" (") + last + ")";
  return reason;
}

void check_nccl(ncclResult_t r, ncclComm_t comm, const std::string& op, const char* file, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  throw_cuda_error(op.c_str(), nccl_error_reason(r, comm), file, line);
}

void check_nccl_async(ncclComm_t comm, const std::string& what) {
  ncclResult_t async = ncclSuccess;
  RM_NCCL_CHECK(ncclCommGetAsyncError(comm, &async), comm, "ncclCommGetAsyncError");
  RM_NCCL_CHECK(async, comm, what);
}

ncclComm_t nccl_comm_of(MPI_Comm mpi, const std::string& what) {
  int size = 1, rank = 0;
  check_mpi(MPI_Comm_size(mpi, &size), "MPI_Comm_size (" + what + ")");
  check_mpi(MPI_Comm_rank(mpi, &rank), "MPI_Comm_rank (" + what + ")");
  require_one_rank_per_gpu(mpi, size, what);
  ncclUniqueId id{};
  if (rank == 0) RM_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, "ncclGetUniqueId");
  check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi), "MPI_Bcast of the NCCL id (" + what + ")");
  ncclComm_t comm = nullptr;
  RM_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), nullptr,
                "ncclCommInitRank (" + what + ", rank " + std::to_string(rank) + ")");
  return comm;
}

}  // namespace rm::gpu
