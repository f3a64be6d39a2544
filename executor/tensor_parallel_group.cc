// The TP group over MPI (see tensor_parallel_group.h).
#include "executor/tensor_parallel_group.h"

#include <limits>
#include <stdexcept>
#include <type_traits>

#include "executor/mpi_transport.h"

namespace rm::exec {

namespace {

// MPI's datatype and sum for the pass's elements.
template <class T>
MpiSum sum_of() {
  if constexpr (std::is_same_v<T, Bf16>) return mpi_sum(ReduceType::kBfloat16);
  else return mpi_sum(ReduceType::kFloat32);
}

int count_of(size_t n) {
  if (n > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw std::runtime_error("a TP collective above 2^31 elements or bytes: MPI counts are ints");
  return static_cast<int>(n);
}

}  // namespace

MpiTensorParallel::MpiTensorParallel(const std::vector<int>& group, int world_rank, Watchdog* watchdog, double epoch)
    : world_rank_(world_rank), watchdog_(watchdog), epoch_(epoch) {
  comm_ = group_comm(group, world_rank, "TP");
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiTensorParallel::~MpiTensorParallel() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

template <class F>
void MpiTensorParallel::run(const char* kind, char code, size_t bytes, F&& collective) {
  fingerprint_.note(code, 0, bytes);
  const double t0 = MPI_Wtime();
  watchdog_->arm(std::string("a TP collective (") + kind + ") of training step " + std::to_string(step_ + 1));
  collective();
  watchdog_->disarm();
  const double t1 = MPI_Wtime();
  comm_s_ += t1 - t0;
  records_.push_back(collective_record(world_rank_, step_, static_cast<int>(records_.size()), kind, size_,
                                       static_cast<double>(bytes), t0, t1, epoch_));
}

template <class T>
void MpiTensorParallel::gather(ConstView<T> mine, View<T> all) {
  if (all.size() != mine.size() * size_) throw std::logic_error("TP all-gather: all is not size x mine");
  const int n = count_of(static_cast<size_t>(mine.size()) * sizeof(T));
  run("tp_all_gather", 'g', static_cast<size_t>(all.size()) * sizeof(T), [&] {
    check_mpi(MPI_Allgather(mine.data, n, MPI_BYTE, all.data, n, MPI_BYTE, comm_), "MPI_Allgather (TP)");
  });
}

template <class T>
void MpiTensorParallel::scatter(ConstView<T> all, View<T> mine) {
  if (all.size() != mine.size() * size_) throw std::logic_error("TP reduce-scatter: all is not size x mine");
  const MpiSum s = sum_of<T>();
  run("tp_reduce_scatter", std::is_same_v<T, Bf16> ? 'S' : 's', static_cast<size_t>(all.size()) * sizeof(T), [&] {
    check_mpi(MPI_Reduce_scatter_block(all.data, mine.data, count_of(static_cast<size_t>(mine.size())), s.type, s.op,
                                       comm_),
              "MPI_Reduce_scatter_block (TP)");
  });
}

template <class T>
void MpiTensorParallel::exchange(ConstView<T> blocks, View<T> out) {
  if (blocks.size() != out.size() || blocks.size() % size_ != 0)
    throw std::logic_error("TP all-to-all: blocks and out differ or do not split into size blocks");
  const int n = count_of(static_cast<size_t>(blocks.size() / size_) * sizeof(T));
  run("tp_all_to_all", 'a', static_cast<size_t>(blocks.size()) * sizeof(T), [&] {
    check_mpi(MPI_Alltoall(blocks.data, n, MPI_BYTE, out.data, n, MPI_BYTE, comm_), "MPI_Alltoall (TP)");
  });
}

template <class T>
void MpiTensorParallel::reduce(View<T> x) {
  const MpiSum s = sum_of<T>();
  run("tp_all_reduce", std::is_same_v<T, Bf16> ? 'R' : 'r', static_cast<size_t>(x.size()) * sizeof(T), [&] {
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, x.data, count_of(static_cast<size_t>(x.size())), s.type, s.op, comm_),
              "MPI_Allreduce (TP)");
  });
}

std::vector<float> MpiTensorParallel::members(const std::vector<float>& mine) {
  std::vector<float> all(mine.size() * static_cast<size_t>(size_));
  watchdog_->arm("gathering the TP members' model state");
  check_mpi(MPI_Allgather(mine.data(), count_of(mine.size()), MPI_FLOAT, all.data(), count_of(mine.size()),
                          MPI_FLOAT, comm_),
            "MPI_Allgather (TP model state)");
  watchdog_->disarm();
  return all;
}

double MpiTensorParallel::sum(double x) { return sum_over(comm_, x, watchdog_, "summing over the TP group"); }

std::vector<Measurement> MpiTensorParallel::take_records() {
  std::vector<Measurement> r;
  r.swap(records_);
  comm_s_ = 0;
  return r;
}

}  // namespace rm::exec
