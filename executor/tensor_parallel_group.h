// The TP group of `ringmaster train` (transformer.h's TensorParallel: Megatron-LM's tensor +
// sequence parallelism) over MPI, on host memory: the cpu backend's. Its members are the
// plan's TP group of this rank (planner/tensor_parallel.h tp_groups: one per ring position
// and data-parallel replica, TP rank = the position in it). One object serves the fp32
// pass and the bf16 one (mixed precision: sums in bf16, the pass's type).
//
// The contract NCCL would need, kept and checked here as on FSDP's collectives
// (shard_collectives.h): every member issues the same collectives with the same counts in
// the same order; each is folded into a fingerprint that check_order() compares once a
// step, naming the member that diverged.
//
// Each collective's time is recorded (measurements.h: kind "tp_all_gather",
// "tp_reduce_scatter", "tp_all_to_all" or "tp_all_reduce", bytes = the group's whole
// buffer as it moves: the gathered rows, the partial sums, the exchanged blocks; seconds =
// the time blocked in it, all of it exposed: the pass waits for each at once, Megatron's
// default without --tp-comm-overlap).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "executor/measurements.h"
#include "executor/shard_collectives.h"
#include "executor/transformer.h"
#include "executor/watchdog.h"

namespace rm::exec {

class MpiTensorParallel final : public TensorParallel<float>, public TensorParallel<Bf16> {
 public:
  // `group`: the world ranks of this rank's TP group, in TP-rank order. Records' start
  // times count from MPI_Wtime() = `epoch`.
  MpiTensorParallel(const std::vector<int>& group, int world_rank, Watchdog* watchdog, double epoch);
  ~MpiTensorParallel() override;
  MpiTensorParallel(const MpiTensorParallel&) = delete;
  MpiTensorParallel& operator=(const MpiTensorParallel&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_gather(ConstView<float> mine, View<float> all) override { gather(mine, all); }
  void reduce_scatter(ConstView<float> all, View<float> mine) override { scatter(all, mine); }
  void all_to_all(ConstView<float> blocks, View<float> out) override { exchange(blocks, out); }
  void all_reduce(View<float> x) override { reduce(x); }
  void all_gather(ConstView<Bf16> mine, View<Bf16> all) override { gather(mine, all); }
  void reduce_scatter(ConstView<Bf16> all, View<Bf16> mine) override { scatter(all, mine); }
  void all_to_all(ConstView<Bf16> blocks, View<Bf16> out) override { exchange(blocks, out); }
  void all_reduce(View<Bf16> x) override { reduce(x); }

  // Every member's `mine` (host memory, the same size on each), member after member: a
  // model state's parts for checkpoints and run --verify (not recorded).
  std::vector<float> members(const std::vector<float>& mine);
  // The sum over the members (not recorded).
  double sum(double x);
  // Throws std::runtime_error naming the first member whose collectives since the last
  // call differ from member 0's.
  void check_order() { fingerprint_.check(comm_, "TP", "tensor-parallel"); }
  // Logs every collective on `log` from now on, for the order across communicators.
  void log_posts(PostLog* log) { fingerprint_.log_to(log, comm_name(comm_, "TP", "tensor-parallel")); }
  void set_step(int step) { step_ = step; }
  // Seconds blocked in the group's collectives since the last take_records(), and their records.
  double comm_s() const { return comm_s_; }
  std::vector<Measurement> take_records();

 private:
  template <class T>
  void gather(ConstView<T> mine, View<T> all);
  template <class T>
  void scatter(ConstView<T> all, View<T> mine);
  template <class T>
  void exchange(ConstView<T> blocks, View<T> out);
  template <class T>
  void reduce(View<T> x);
  // Runs `collective` (kind: the record's) under the watchdog, records it (`bytes` moved)
  // and folds it into the fingerprint.
  template <class F>
  void run(const char* kind, char code, size_t bytes, F&& collective);
  MPI_Comm comm_ = MPI_COMM_NULL;
  int size_ = 1, rank_ = 0, world_rank_ = 0;
  Watchdog* watchdog_;
  double epoch_;
  int step_ = 0;
  double comm_s_ = 0;
  CollectiveFingerprint fingerprint_;
  std::vector<Measurement> records_;
};

}  // namespace rm::exec
