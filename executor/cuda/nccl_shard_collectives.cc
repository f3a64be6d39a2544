// FSDP's collectives over NCCL (see nccl_shard_collectives.h).
#include "executor/cuda/nccl_shard_collectives.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "executor/cuda/attention_kernels.cuh"
#include "executor/cuda/nccl_comm.h"
#include "executor/cuda/transport.h"

namespace rm::gpu {

namespace {

// The NCCL communicator of the ranks of `mpi` (null for a group of one).
ncclComm_t comm_of(MPI_Comm mpi, const char* what) {
  int size = 1;
  check_mpi(MPI_Comm_size(mpi, &size), "MPI_Comm_size");
  return size == 1 ? nullptr : nccl_comm_of(mpi, std::string("FSDP ") + what + " group");
}

class NcclShardCollectives final : public exec::ShardCollectives {
 public:
  NcclShardCollectives(MPI_Comm shard, MPI_Comm replica) : ShardCollectives(shard, replica) {
    check_mpi(MPI_Comm_rank(shard, &shard_rank_), "MPI_Comm_rank");
    int least = 0, greatest = 0;
    RM_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    RM_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest),
                  "cudaStreamCreate (FSDP stream)");
    RM_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming), "cudaEventCreate");
    RM_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    RM_CUDA_CHECK(cudaEventCreateWithFlags(&gathered_, cudaEventDisableTiming), "cudaEventCreate");
    shard_comm_ = comm_of(shard, "shard");
    replica_comm_ = comm_of(replica, "replica");
  }
  ~NcclShardCollectives() override {
    const bool failing = std::uncaught_exceptions() > 0;
    for (ncclComm_t c : {shard_comm_, replica_comm_}) {
      if (c == nullptr) continue;
      if (failing) {
        ncclCommAbort(c);
      } else {
        ncclCommFinalize(c);
        ncclCommDestroy(c);
      }
    }
    cudaEventDestroy(produced_);
    cudaEventDestroy(done_);
    cudaEventDestroy(gathered_);
    cudaStreamDestroy(stream_);
  }
  std::string name() const override { return "nccl"; }

  void start_all_gather(void* full, size_t bytes, int unit) override {
    if (gathering_) throw std::logic_error("an FSDP all-gather is already in flight");
    note(false, 'g', unit, bytes);
    after_kernels();
    char* all = static_cast<char*>(full);
    RM_NCCL_CHECK(ncclAllGather(all + bytes * static_cast<size_t>(shard_rank_), all, bytes, ncclUint8,
                                shard_comm_, stream_),
                  shard_comm_, "ncclAllGather (FSDP unit)");
    RM_CUDA_CHECK(cudaEventRecord(gathered_, stream_), "cudaEventRecord");
    gathering_ = true;
  }
  void wait_all_gather() override {
    gathering_ = false;
    wait(gathered_, shard_comm_, "FSDP all-gather");
  }
  void reduce_scatter(const void* full, void* out, size_t count, exec::ReduceType type, int unit) override {
    const bool bf16 = type == exec::ReduceType::kBfloat16;
    note(false, 's', type, unit, count);
    after_kernels();
    RM_NCCL_CHECK(ncclReduceScatter(full, out, count, bf16 ? ncclBfloat16 : ncclFloat, ncclSum, shard_comm_, stream_),
                  shard_comm_, "ncclReduceScatter (FSDP gradients)");
    finish(shard_comm_, "FSDP reduce-scatter");
  }
  void all_reduce_replicas(void* x, size_t count, exec::ReduceType type, int unit) override {
    const bool bf16 = type == exec::ReduceType::kBfloat16;
    note(true, 'r', type, unit, count);
    after_kernels();
    RM_NCCL_CHECK(ncclAllReduce(x, x, count, bf16 ? ncclBfloat16 : ncclFloat, ncclSum, replica_comm_, stream_),
                  replica_comm_, "ncclAllReduce (gradient replicas)");
    finish(replica_comm_, "gradient all-reduce");
  }

 private:
  // The collective's stream waits for what the kernels' stream has posted so far.
  void after_kernels() {
    RM_CUDA_CHECK(cudaEventRecord(produced_, 0), "cudaEventRecord");
    RM_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0), "cudaStreamWaitEvent");
  }
  void finish(ncclComm_t comm, const char* what) {
    RM_CUDA_CHECK(cudaEventRecord(done_, stream_), "cudaEventRecord");
    wait(done_, comm, what);
  }
  // Until `event` has passed, polling NCCL's asynchronous error as the ring's transport does
  // (check_nccl_async), so a failed collective throws here (and the destructor aborts the
  // communicators) instead of blocking until the watchdog ends the process.
  static void wait(cudaEvent_t event, ncclComm_t comm, const char* what) {
    for (;;) {
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda(e, what, __FILE__, __LINE__);
      check_nccl_async(comm, what);
      std::this_thread::yield();
    }
  }
  int shard_rank_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t produced_ = nullptr, done_ = nullptr, gathered_ = nullptr;
  ncclComm_t shard_comm_ = nullptr, replica_comm_ = nullptr;
  bool gathering_ = false;
};

}  // namespace

std::unique_ptr<exec::ShardCollectives> make_nccl_shard_collectives(MPI_Comm shard, MPI_Comm replica) {
  return std::make_unique<NcclShardCollectives>(shard, replica);
}

}  // namespace rm::gpu
