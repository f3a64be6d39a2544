// FSDP's collectives over MPI, the contract's check, and the choice of transport (see
// shard_collectives.h).
#include "executor/shard_collectives.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include <Eigen/Core>

#include "executor/mpi_transport.h"
#include "executor/watchdog.h"

#include "executor/cuda_module.h"

namespace rm::exec {

size_t element_bytes(ReduceType type) { return type == ReduceType::kBfloat16 ? 2 : 4; }

void CollectiveFingerprint::note(char kind, int unit, size_t count) {
  auto fold = [this](uint64_t word) {
    for (int i = 0; i < 8; ++i) hash_ = (hash_ ^ ((word >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  fold(static_cast<unsigned char>(kind));
  fold(static_cast<uint64_t>(static_cast<int64_t>(unit)));
  fold(count);
  if (log_) log_->collective(comm_);
}

void CollectiveFingerprint::check(MPI_Comm comm, const std::string& owner, const std::string& group) {
  int size = 1, rank = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size == 1) return;
  // Member 0's fingerprint to everyone; each compares, and the lowest differing member is
  // found with one MIN reduction.
  uint64_t root = hash_;
  MPI_Bcast(&root, 1, MPI_UINT64_T, 0, comm);
  int first = root == hash_ ? size : rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first < size)
    throw std::runtime_error(owner + " collectives out of order: rank " + std::to_string(first) + " of the " + group +
                             " group issued other collectives (kinds, types, units, counts or order) than "
                             "its rank 0 since the last step; NCCL would hang or corrupt on it");
  hash_ = kFnvBasis;
}

void ShardCollectives::note(bool replica_group, char kind, int unit, size_t count) {
  fingerprint_[replica_group ? 1 : 0].note(kind, unit, count);
}

void ShardCollectives::note(bool replica_group, char kind, ReduceType type, int unit, size_t count) {
  note(replica_group, type == ReduceType::kBfloat16 ? static_cast<char>(kind - 'a' + 'A') : kind, unit, count);
}

void ShardCollectives::log_posts(PostLog* log) {
  fingerprint_[0].log_to(log, comm_name(shard_, "FSDP", "shard"));
  fingerprint_[1].log_to(log, comm_name(replica_, "FSDP", "replica"));
}

void ShardCollectives::check_order() {
  fingerprint_[0].check(shard_, "FSDP", "shard");
  fingerprint_[1].check(replica_, "FSDP", "replica");
}

double sum_over(MPI_Comm comm, double x, Watchdog* watchdog, const std::string& what) {
  watchdog->arm(what);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, comm), ("MPI_Allreduce (" + what + ")").c_str());
  watchdog->disarm();
  return x;
}

MPI_Comm group_comm(const std::vector<int>& group, int rank, const char* what) {
  const auto at = std::find(group.begin(), group.end(), rank);
  if (at == group.end()) throw std::logic_error(std::string("a rank outside its own ") + what + " group");
  MPI_Comm comm = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, *std::min_element(group.begin(), group.end()),
                           static_cast<int>(at - group.begin()), &comm),
            (std::string("MPI_Comm_split (") + what + " group)").c_str());
  return comm;
}

namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float sum = static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(a[i])) +
                      static_cast<float>(Eigen::numext::bit_cast<Eigen::bfloat16>(b[i]));
    b[i] = Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(sum));
  }
}

}  // namespace

// Created once, after MPI_Init; MPI_Finalize frees them.
MpiSum mpi_sum(ReduceType type) {
  if (type == ReduceType::kFloat32) return {MPI_FLOAT, MPI_SUM};
  static const MpiSum bf16 = [] {
    MpiSum t{};
    check_mpi(MPI_Type_contiguous(1, MPI_UINT16_T, &t.type), "MPI_Type_contiguous (bf16)");
    check_mpi(MPI_Type_commit(&t.type), "MPI_Type_commit (bf16)");
    check_mpi(MPI_Op_create(&bf16_sum, 1, &t.op), "MPI_Op_create (bf16 sum)");
    return t;
  }();
  return bf16;
}

namespace {

// Host buffers, MPI's collectives; the all-gather is non-blocking, so a prefetch moves
// while the previous unit computes.
class MpiShardCollectives final : public ShardCollectives {
 public:
  MpiShardCollectives(MPI_Comm shard, MPI_Comm replica) : ShardCollectives(shard, replica) {}
  ~MpiShardCollectives() override {
    if (pending_ != MPI_REQUEST_NULL) MPI_Wait(&pending_, MPI_STATUS_IGNORE);
  }
  std::string name() const override { return "mpi"; }
  void start_all_gather(void* full, size_t bytes, int unit) override {
    if (pending_ != MPI_REQUEST_NULL) throw std::logic_error("an FSDP all-gather is already in flight");
    if (bytes > static_cast<size_t>(std::numeric_limits<int>::max()))
      throw std::runtime_error("an FSDP unit's shard above 2 GiB: MPI counts are ints");
    note(false, 'g', unit, bytes);
    check_mpi(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full, static_cast<int>(bytes), MPI_BYTE,
                             shard_, &pending_),
              "MPI_Iallgather");
  }
  void wait_all_gather() override { check_mpi(MPI_Wait(&pending_, MPI_STATUS_IGNORE), "MPI_Wait"); }
  void reduce_scatter(const void* full, void* out, size_t count, ReduceType type, int unit) override {
    note(false, 's', type, unit, count);
    const MpiSum t = mpi_sum(type);
    check_mpi(MPI_Reduce_scatter_block(full, out, static_cast<int>(count), t.type, t.op, shard_),
              "MPI_Reduce_scatter_block");
  }
  void all_reduce_replicas(void* x, size_t count, ReduceType type, int unit) override {
    note(true, 'r', type, unit, count);
    const MpiSum t = mpi_sum(type);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, x, static_cast<int>(count), t.type, t.op, replica_), "MPI_Allreduce");
  }

 private:
  MPI_Request pending_ = MPI_REQUEST_NULL;
};

}  // namespace

std::unique_ptr<ShardCollectives> make_shard_collectives(const std::string& backend, MPI_Comm shard,
                                                         MPI_Comm replica) {
  if (backend == "cuda") return cuda_module().make_shard_collectives(shard, replica);
  return std::make_unique<MpiShardCollectives>(shard, replica);
}

}  // namespace rm::exec
