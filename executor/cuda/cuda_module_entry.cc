// The module's entry point (executor/cuda_module.h): the cuda backend's factories.
#include "executor/cuda/cuda_backend.h"
#include "executor/cuda/cuda_train_kernels.h"
#include "executor/cuda/nccl_shard_collectives.h"
#include "executor/cuda_module.h"

extern "C" const rm::exec::CudaModule* ringmaster_cuda_module() {
  static const rm::exec::CudaModule module{&rm::gpu::device_count, &rm::exec::make_cuda_backend,
                                           &rm::gpu::make_cuda_train_kernels,
                                           &rm::gpu::make_nccl_shard_collectives};
  return &module;
}
