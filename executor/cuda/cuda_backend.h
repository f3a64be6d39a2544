// The `cuda` backend: one GPU per rank, bf16 tensors with fp32 accumulation, the
// tensor-core kernels of attention_kernels.cuh, and one of two transports
// (transport.h): `nccl` when every rank of a node has its own GPU, `local` (CUDA IPC
// copies) when ranks share GPUs, e.g. a whole ring on one GPU for verification.
//
// Device and transport (at setup, every rank):
//   device     = local rank (MPI_COMM_TYPE_SHARED) % visible devices
//   transport  = RINGMASTER_CUDA_TRANSPORT (nccl | local) when set; otherwise local when
//                the job is one node whose ranks outnumber its GPUs, else nccl (which
//                refuses ranks sharing a GPU: NCCL needs one GPU per rank)
// connect() hands the ring's ranks to the transport (nccl: the ring's communicator), and
// begin_phase()/end_phase() bracket each posting phase (nccl: one ncclGroupStart/End on
// the communication stream; the compute stream never joins a group).
// Kernels run on the rank's compute stream and the calls return when they finish
// (backend.h); while waiting, the backend keeps the transport progressing, so local
// copies overlap the kernels. A transfer that makes no progress for the timeout
// (RINGMASTER_CUDA_TIMEOUT seconds, default 300: longer than the ring loop's watchdog,
// which normally fires first) aborts the transport (ncclCommAbort) and throws, naming the
// transfer, the rank and the peer.
//
// Schedule buffers are never returned to the device while the backend lives: free()
// keeps them for the next alloc() of the same role, so the IPC handles of the local
// transport stay valid and the ring does not pay cudaMalloc per step.
#pragma once

#include <memory>
#include <string>

#include "executor/backend.h"
#include "executor/cuda/attention_kernels.cuh"

namespace rm::exec {

std::unique_ptr<Backend> make_cuda_backend();

}  // namespace rm::exec

namespace rm::gpu {

// CUDA devices this process sees; 0 when there is none or no usable driver (never
// throws: tests use it to decide whether to skip).
int device_count();

// Dense bf16 tensor-core peak of a device by its name (cudaDeviceProp::name): H100 and
// H200 989 TFLOP/s, A100 312 TFLOP/s (NVIDIA datasheets; DESIGN.md reference numbers);
// 0 for other devices.
double peak_bf16_flops(const std::string& device_name);

// Kernel timing for calibration and scripts/gpu-check: one block of c queries against c
// keys (all heads), the diagonal block when causal, on the current device, timed with
// CUDA events: one warm-up launch, then the median of `repeats`.
struct KernelTiming {
  double forward_s = 0;
  double backward_s = 0;
  // Model FLOPs: 4·c²·d·h forward (half when causal), backward kBackwardFlopsFactor (2.5)
  // x forward (planner/kernel_efficiency.h),
  // the convention FlashAttention's figures use.
  double forward_flops = 0;
  double backward_flops = 0;
};
KernelTiming time_attention_kernels(const AttentionDims& dims, Tiles tiles, int repeats);

}  // namespace rm::gpu
