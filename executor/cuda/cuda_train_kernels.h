// The transformer's and the optimizer's kernels on a GPU (train_kernels.h), fp32 tensors:
// cuBLAS GEMMs for the linear layers and the head (fp32 arithmetic, or with `bf16_gemms` bf16 tensor-core
// products of the fp32 operands with fp32 accumulation, CUBLAS_COMPUTE_32F_FAST_16BF, as
// a plan for bf16 GPUs prices them), one small kernel per elementwise primitive, AdamW
// and the gradient norm's sum of squares (cuda_train_kernels.cu),
// everything on the legacy default stream of the current device, in order; tensors from
// the stream-ordered allocator (cudaMallocAsync), so the pass's many short-lived
// activations cost no device-wide synchronisation. Summation orders differ from Eigen's
// (block reductions, atomics in the embedding and RMSNorm gain gradients), so results
// match the cpu kernels to fp32 rounding, not bit for bit.
#pragma once

#include <memory>

#include "executor/train_kernels.h"

namespace rm::gpu {

// On the current device (the ring attention's backend chose it: local rank % devices).
// Throws CudaError when there is no usable device or cuBLAS cannot start.
std::unique_ptr<exec::TrainKernels<float>> make_cuda_train_kernels(bool bf16_gemms = false);

}  // namespace rm::gpu
