// The collectives of FSDP's model state (fsdp.h), over buffers in the memory of the
// kernels the pass runs on (train_kernels.h): MPI over host memory for the cpu backend,
// NCCL over device memory for cuda (executor/cuda/nccl_shard_collectives.h), so a GPU's
// shards, gathered units and gradients never cross the host link.
//
// Two groups, as FsdpParams lays the state out: `shard` (the ranks a unit is split over)
// and `replica` (the ranks holding the same shard, whose gradient shards are summed).
//
// The contract both implementations keep, because NCCL needs it and cannot check it (a
// mismatch hangs or corrupts on the device, with no error):
//   - layout: a unit is count * size elements, rank r's chunk at [r * count, (r + 1) *
//     count) (equal chunks, the unit padded): ncclAllGather's in-place form (sendbuff =
//     recvbuff + rank * count) and ncclReduceScatter's, MPI_IN_PLACE Allgather and
//     Reduce_scatter_block; all-gathers move bytes, reduce-scatters and all-reduces sum
//     fp32 or bf16 (FSDP2's reduce_dtype: bf16 halves the bytes, each partial sum rounded
//     to bf16 as ncclBfloat16's is), the same type on every rank;
//   - order: every rank of a group issues the same collectives, for the same units, with
//     the same counts, in the same order (NCCL matches collectives by issue order on a
//     communicator, and neither it nor MPI knows units: two blocks' all-gathers have the
//     same count, so a rank gathering the wrong one corrupts the others' parameters
//     silently). Each collective states its unit, as a message states its tag; both
//     implementations fold (kind, type, unit, count) of every collective into a fingerprint,
//     and check_order() compares the ranks' fingerprints (FsdpParams calls it once a
//     step), so a rank that diverged is named, on the MPI transport in CI as on NCCL;
//   - one all-gather in flight at a time (FSDP's one-unit prefetch), completed by
//     wait_all_gather() before its buffer is read or another is started.
// The cuda backend's ring-attention transfers use other communicators (one per ring,
// nccl_transport.h); both are issued in the program order of the pass, which is the same
// on every rank, so kernels of the two never wait on each other in opposite orders; train
// checks that once a step on what every rank posted (post_log.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "executor/post_log.h"

namespace rm::exec {

// The element type gradients are summed in (torchtitan's training.mixed_precision_reduce).
enum class ReduceType { kFloat32, kBfloat16 };
size_t element_bytes(ReduceType type);

// MPI's datatype and sum for a reduction in `type` (bf16: 16-bit elements summed by a
// user operation that widens each pair, adds in fp32 and rounds to nearest even, as
// ncclBfloat16's sum does at each hop).
struct MpiSum {
  MPI_Datatype type;
  MPI_Op op;
};
MpiSum mpi_sum(ReduceType type);

// The communicator of `group` (world ranks, in rank order), which holds `rank`: every rank
// calls it with its own group, the groups partitioning the world (MPI_Comm_split, colour
// = the group's smallest rank, key = the position). `what` names the groups in errors.
MPI_Comm group_comm(const std::vector<int>& group, int rank, const char* what);

class Watchdog;
// x summed over the ranks of `comm`, blocking, under `watchdog` armed with `what`.
double sum_over(MPI_Comm comm, double x, Watchdog* watchdog, const std::string& what);

// The order half of the contract below, for one group: each collective a rank issues is
// folded into a fingerprint (FNV-1a over kind, unit, count), and check() compares the
// members' since the last check, throwing std::runtime_error "<owner> collectives out of
// order: rank R of the <group> group ..." naming the first member of `comm` whose
// collectives differ from its member 0's.
// With a PostLog attached, each collective is also logged on it under the communicator's
// name (comm_name), for the order across communicators (post_log.h).
class CollectiveFingerprint {
 public:
  void note(char kind, int unit, size_t count);
  void check(MPI_Comm comm, const std::string& owner, const std::string& group);
  void log_to(PostLog* log, std::string comm) {
    log_ = log;
    comm_ = std::move(comm);
  }

 private:
  static constexpr uint64_t kFnvBasis = 1469598103934665603ull;
  uint64_t hash_ = kFnvBasis;
  PostLog* log_ = nullptr;
  std::string comm_;
};

class ShardCollectives {
 public:
  virtual ~ShardCollectives() = default;
  virtual std::string name() const = 0;  // "mpi" or "nccl"
  // Starts gathering `full` [bytes * shard size], whose chunk of this rank (`bytes` at
  // rank * bytes) is in place: a byte movement, whatever the elements (fp32, or bf16 under
  // mixed precision). `unit` names what is gathered (fsdp.h's unit index).
  virtual void start_all_gather(void* full, size_t bytes, int unit) = 0;
  // Waits for the started all-gather; its buffer is then ready for the kernels.
  virtual void wait_all_gather() = 0;
  // out [count] = the sum over the shard group of their `full` [count * size]'s chunk of
  // this rank, elements of `type` (float or Bf16); blocking (out is ready when it returns).
  virtual void reduce_scatter(const void* full, void* out, size_t count, ReduceType type, int unit) = 0;
  // x [count] (elements of `type`) = its sum over the replica group, in place; blocking.
  virtual void all_reduce_replicas(void* x, size_t count, ReduceType type, int unit) = 0;
  // Throws std::runtime_error naming the first rank of the shard or replica group whose
  // collectives since the last call differ from rank 0's (kinds, types, units, counts, order).
  void check_order();
  // Logs every collective on `log` from now on, for the order across communicators.
  void log_posts(PostLog* log);

 protected:
  ShardCollectives(MPI_Comm shard, MPI_Comm replica) : shard_(shard), replica_(replica) {}
  // Folds one collective into the fingerprint of its group (FNV-1a over kind, unit, count;
  // a reduction's type too).
  void note(bool replica_group, char kind, int unit, size_t count);
  void note(bool replica_group, char kind, ReduceType type, int unit, size_t count);
  MPI_Comm shard_, replica_;  // not owned: FsdpParams keeps them

 private:
  CollectiveFingerprint fingerprint_[2];  // shard, replica
};

// The collectives of `backend` ("cpu": MPI; "cuda": NCCL, device buffers) over the two
// groups, which stay owned by the caller and must outlive it.
std::unique_ptr<ShardCollectives> make_shard_collectives(const std::string& backend, MPI_Comm shard,
                                                         MPI_Comm replica);

}  // namespace rm::exec
