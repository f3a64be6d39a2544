// The cuda backend as a module loaded at its first use: executor/cuda/ is built, where the
// top level found nvcc and NCCL, as libringmaster_cuda.so beside the binaries. Loading
// cuBLAS, cuBLASLt and NCCL costs a process about 0.4 s of start-up (their initialisers),
// which every plan, cpu run and rank, and the test suite's hundreds of processes, would pay
// if the binary linked them; and a host without the CUDA libraries runs everything else.
// The module needs symbols of the binary that loads it (the executor's, the planner's):
// binaries that load it are linked with their symbols exported (ENABLE_EXPORTS).
#pragma once

#include <mpi.h>

#include <memory>

#include "executor/backend.h"
#include "executor/shard_collectives.h"
#include "executor/train_kernels.h"

namespace rm::exec {

// What the rest of the executor reaches the cuda backend through.
struct CudaModule {
  int (*device_count)();  // 0 when no device or no usable driver
  std::unique_ptr<Backend> (*make_backend)();
  std::unique_ptr<TrainKernels<float>> (*make_train_kernels)(bool bf16_gemms);
  std::unique_ptr<ShardCollectives> (*make_shard_collectives)(MPI_Comm shard, MPI_Comm replica);
};

// The module, loaded once (thread-safe). Throws InputError saying why when this build has
// none or it cannot be loaded (a missing CUDA library names itself).
const CudaModule& cuda_module();

}  // namespace rm::exec

// The module's one entry point (executor/cuda/cuda_module_entry.cc).
extern "C" const rm::exec::CudaModule* ringmaster_cuda_module();
