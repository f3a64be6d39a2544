// The model state of `ringmaster train` sharded over data-parallel ranks, as PyTorch FSDP
// (ZeRO-3, Rajbhandari et al. 2020) keeps it: each FSDP unit of the model (transformer.h:
// the embedding, each block, the head) is one flat vector, like FSDP's FlatParameter,
// padded to a multiple of the shard group's size S and split into S equal shards; a rank
// keeps only its shard of the parameters, of the gradients and of AdamW's m and v, in the
// memory of the kernels the pass runs on (train_kernels.h: host for cpu, device for
// cuda), and moves them with the backend's collectives (shard_collectives.h: MPI, or
// NCCL on the device), so a GPU's model state never crosses the host link during a step.
//
// As a ParamAccess (what the transformer reads through): gather(u) all-gathers the unit
// into a temporary unsharded buffer, release(u) frees it (the blocks are resharded after
// forward and gathered again for backward, FSDP's FULL_SHARD, which the planner prices);
// grads(u) hands out a zeroed unsharded gradient buffer, and reduce(u) reduce-scatters it
// (sum) and adds the result into this rank's gradient shard, then frees it. So the
// gradients of a step's micro-steps accumulate in the shard.
//
// Two communicators make the layout: `shard` (the ranks a unit is split over) and
// `replica` (ranks holding the same shard, whose gradient shards finish_gradients()
// all-reduces). FSDP over all ranks is (world, self); "ddp", the replicated layout, is
// (self, world): a shard is then the whole model and the one all-reduce is DDP's; "hsdp"
// (PyTorch's HYBRID_SHARD, FSDP2 with a 2-D mesh) is the pair in between, as the plan's
// groups say (ShardGroups).
//
// Prefetch, as FSDP's forward_prefetch / BACKWARD_PRE: gather(u) also starts the
// all-gather of the unit the pass needs next (u + 1 going forward, u - 1 going backward,
// never the embedding after the last block, whose parameters the optimizer is about to
// change, nor across a pipeline chunk's end, where a stage's next step is another
// micro-batch's), so it moves while u computes, as the planner prices it (hidden behind the
// layer's compute). A guess the caller does not follow is completed and dropped. At most
// two units are held gathered at once. The reduce-scatters block.
// Each collective's exposed time is recorded (measurements.h: kind "all_gather" or
// "reduce_scatter", seconds = time blocked in it, bytes = the unsharded unit as it moves,
// 2 bytes an element in bf16 gathers and reductions, layer = the unit index). Every rank
// of the shard group calls the same units in the same order, so every rank guesses, and
// posts, the same collectives in the same order; finish_gradients() checks that it was so
// (ShardCollectives::check_order) once a step.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/adamw.h"
#include "executor/bf16_kernels.h"
#include "executor/measurements.h"
#include "executor/shard_collectives.h"
#include "executor/train_kernels.h"
#include "executor/transformer.h"
#include "executor/watchdog.h"

namespace rm::exec {

enum class Sharding { kFsdp, kDdp, kHsdp, kZero2, kZero1 };

// The ranks that split this rank's shards (`shard`, in shard order: position = shard rank)
// and those holding the same shard (`replica`), among the ranks of this rank's TP rank
// (all ranks with tp 1; planner/tensor_parallel.h fsdp_groups: each TP rank's model part
// is sharded apart): fsdp, zero2 and zero1 (all of them, itself), ddp (itself, all of
// them), hsdp the plan's groups (planner/data_parallel.h hsdp_shard_groups and
// hsdp_replicate_groups: cp·dp_shard GPUs, then the dp / dp_shard holding one shard). What stays whole between collectives is the level's (`held`):
// zero2 keeps each unit's gathered parameters from the step's first forward to the
// optimizer step (one all-gather per unit and step, as the planner prices zero2 and zero1,
// data_parallel.h), zero1 its whole gradients too, reduce-scattered once, in the last
// micro-step.
enum class Held { kNothing, kParams, kParamsAndGrads };
struct ShardGroups {
  std::vector<int> shard, replica;
  Held held = Held::kNothing;
};
ShardGroups shard_groups(Sharding sharding, const std::vector<int>& order, int tp, int cp, int dp_shard,
                         int world_rank);

// The arrays of the model state, each sharded the same way.
enum class StateArray { kParams, kGrads, kMoment1, kMoment2 };

// The fp32 model state and what the step does with it beside the pass: the shards, the
// collectives, the optimizer, checkpoints' gathering and the records.
class FsdpState {
 public:
  // `full` is the whole model's parameters (the same on every rank); this rank keeps its
  // shard of them, zero gradients and zero AdamW moments, in `kernels`' memory, and moves
  // them with `backend`'s collectives (make_shard_collectives), summing gradients in
  // `reduce_type`. Records' start times count from MPI_Wtime() = `epoch`. With
  // `bf16_moments` both moments are kept in bf16, as Megatron-Core's precision-aware
  // optimizer keeps them (--exp-avg-dtype / --exp-avg-sq-dtype bf16), and updated by
  // TrainKernels::adamw_bf16_moments; the master params stay fp32 (remainders of a bf16
  // param are the same values).
  FsdpState(const Transformer& model, const ShardGroups& groups, ReduceType reduce_type,
            const std::vector<float>& full, TrainKernels<float>& kernels, const std::string& backend,
            Watchdog* watchdog, double epoch, bool bf16_moments);
  virtual ~FsdpState();
  FsdpState(const FsdpState&) = delete;
  FsdpState& operator=(const FsdpState&) = delete;

  std::string collectives() const { return coll_->name(); }  // "mpi" or "nccl"

  void zero_grads();
  // The micro-step the pass runs next, of `count` in the step (zero1 reduces in the last).
  void set_micro_step(int index, int count) {
    micro_step_ = index;
    micro_steps_ = count;
  }
  // After the step's last reduce: checks the step's collectives were the same on every
  // rank, then sums the gradient shards over the replica group.
  void finish_gradients();
  // The squared gradient norm over the shard group (collective over it). With
  // `tp_whole_tensors` false, only the tensors tensor parallelism splits (TpSplit): a TP
  // group's members hold the others whole and alike, so only one of them counts them
  // (Megatron's param_is_not_tensor_parallel_duplicate).
  double grad_squared_norm(bool tp_whole_tensors = true);
  // One AdamW update of this rank's shards (adamw.h), from the global gradient norm.
  void optimizer_step(const AdamWConfig& cfg, double grad_norm);
  int64_t optimizer_steps() const { return optimizer_steps_; }
  // The whole array on every rank, gathered in host memory (collective over the shard
  // group), and the reverse: this rank's shards of a whole array (a checkpoint's).
  std::vector<float> unshard(StateArray array);
  void load(StateArray array, const std::vector<float>& full);
  void set_optimizer_steps(int64_t steps) { optimizer_steps_ = steps; }

  // Elements of one array this rank holds (its shards, padding included).
  size_t local_elements() const { return local_; }
  // Bytes of model state this rank holds for good (parameter, gradient and AdamW moment
  // shards), and the most held at once in unsharded unit buffers since the last
  // reset_peak().
  size_t sharded_bytes() const { return local_ * (2 * sizeof(float) + 2 * moment_bytes()); }
  // Bytes of one element of each AdamW moment: 4, or 2 with bf16 moments.
  size_t moment_bytes() const { return bf16_moments_ ? sizeof(Bf16) : sizeof(float); }
  size_t peak_unsharded_bytes() const { return peak_unsharded_; }
  void reset_peak() { peak_unsharded_ = unsharded_; }
  // Seconds spent in collectives since the last take_records(), and their records.
  double comm_s() const { return comm_s_; }
  void set_step(int step) { step_ = step; }
  // Fault injection for tests (RINGMASTER_FAULT=fsdp-unit, watchdog.h): at training step
  // `step` (0-based) this rank's first forward prefetch gathers block 2's chunk where
  // block 1's belongs, a same-size collective NCCL and MPI would both run silently.
  void inject_wrong_unit(int step) { wrong_unit_step_ = step; }
  // Fault injection for tests (RINGMASTER_FAULT=comm-order): at training step `step` this
  // rank posts each prefetch at its next gather or reduce instead of at once, so after the
  // ring transfers of the unit being computed, where the others post it before them: the
  // same collectives in the same order on the shard group, which MPI completes, and an order
  // across communicators NCCL can hang on (post_log.h).
  void inject_late_gathers(int step) { late_gather_step_ = step; }
  // Logs every collective on `log` from now on (post_log.h).
  void log_posts(PostLog* log) { coll_->log_posts(log); }
  std::vector<Measurement> take_records();

 protected:
  struct Unit {
    size_t begin = 0, size = 0;  // in the full vector
    size_t shard = 0;            // elements per shard (size padded / shard group size)
    size_t local = 0;            // where this rank's shard starts in the local arrays
    ParamUnit::Kind kind = ParamUnit::kBlock;
    int chunk = 0;
  };
  // The fp32 storage of an array (empty for moments kept in bf16), and the bf16 storage of a
  // moment kept so (null otherwise).
  Tensor<float>& array(StateArray a);
  Tensor<Bf16>* bf16_moment(StateArray a);
  // The array's elements in host memory (fp32, widened from bf16 moments), and back.
  std::vector<float> download(StateArray a);
  void upload(StateArray a, const std::vector<float>& local);
  // Records a collective that began at t0 and ended now (kind: "all_gather", ...), of
  // the unit's (or, unit -1, the shards') elements at `element_bytes` each.
  void record(const char* kind, int unit, double t0, size_t element_bytes = sizeof(float));
  // The unit the pass gathers after `unit` (see above), or -1.
  int next_unit(int unit) const;
  // Counts `bytes` of unsharded buffers held (negative: released) for the peak.
  void count_unsharded(double bytes);
  // Waits for the started all-gather of `unit` (elements of `element_bytes`), recording it.
  void wait_gather(int unit, size_t element_bytes);
  // Reduce-scatters `unit`'s unsharded gradients `full` (elements of reduce_type_) into
  // `out` (its shard's), recording it.
  void reduce_scatter(const void* full, void* out, int unit);
  bool holds_params() const { return held_ != Held::kNothing; }
  Held held_ = Held::kNothing;
  // Per unit: its gathered parameters are held and current (gathered since the last
  // optimizer step; holds_params() only).
  std::vector<char> current_;
  int micro_step_ = 0, micro_steps_ = 1;
  std::vector<Unit> units_;
  size_t local_ = 0;
  TrainKernels<float>& k_;
  Bf16Kernels half_;  // bf16 buffers in k_'s memory: gradients reduced in bf16
  ReduceType reduce_type_;
  MPI_Comm shard_comm_ = MPI_COMM_NULL, replica_comm_ = MPI_COMM_NULL;
  std::unique_ptr<ShardCollectives> coll_;
  int shard_size_ = 1, shard_rank_ = 0, world_rank_ = 0;
  Tensor<float> params_, grads_, m_, v_;  // [1][local_]; m_, v_ empty with bf16 moments
  Tensor<Bf16> m16_, v16_;                // [1][local_] with bf16 moments
  int prefetched_ = -1, last_gathered_ = -1;  // units
  int step_ = 0;
  int wrong_unit_step_ = -1, late_gather_step_ = -1;
  Watchdog* watchdog_;

 private:
  std::vector<AdamWSegment> segments_;  // where weight decay applies (padding excluded)
  std::vector<AdamWSegment> tp_split_;  // the segments of tensors TP splits
  size_t unsharded_ = 0, peak_unsharded_ = 0;  // bytes
  int64_t optimizer_steps_ = 0;
  bool bf16_moments_;
  double epoch_;
  double comm_s_ = 0;
  std::vector<Measurement> records_;
};

// The state as the pass reads it (ParamAccess), in the pass's type C: float, or Bf16 for
// mixed precision (bf16_kernels.h) as FSDP2's MixedPrecisionPolicy(param_dtype=bf16,
// reduce_dtype) runs it: a unit's shard is rounded to bf16 and all-gathered in bf16 (half
// the bytes, what the planner prices for a bf16 GPU), its unsharded gradients come back
// in bf16 and are reduce-scattered in the reduce type, widened to fp32 first (reduce_dtype
// fp32, the plan's grad_reduce_in_fp32) or as they are (bf16: half the bytes), and the
// summed chunk is added into the fp32 shard. A float pass reducing in bf16 narrows first.
// `pass` makes the unit buffers (the same kernels for float, Bf16Kernels over them for bf16).
template <class C>
class FsdpParams final : public FsdpState, public ParamAccess<C> {
 public:
  FsdpParams(const Transformer& model, const ShardGroups& groups, ReduceType reduce_type,
             const std::vector<float>& full, TrainKernels<float>& kernels, TrainKernels<C>& pass,
             const std::string& backend, Watchdog* watchdog, double epoch, bool bf16_moments);
  ~FsdpParams() override;

  const C* gather(int unit) override;
  void release(int unit) override;
  C* grads(int unit) override;
  void reduce(int unit) override;

 private:
  // Whether the pass reads and adds into the shards themselves (fp32, one shard = the
  // whole unit): no buffers, no collectives.
  bool direct() const;
  // Starts the all-gather of `unit` into gathered_[unit] (with one rank: converts it).
  void post_gather(int unit);
  // Completes a pending prefetch; `keep` false drops its buffer (a wrong guess).
  void wait_prefetch(bool keep);
  // The fault's prefetch, held back since the last gather(), posted now (before this call's
  // collectives, so the shard group's order stays the same).
  void post_late_gather();
  int late_gather_ = -1;
  Tensor<C> hold(size_t n);
  void drop(Tensor<C>& buffer);
  TrainKernels<C>& pass_;
  std::vector<Tensor<C>> gathered_, unsharded_grads_;  // per unit, while held
};

}  // namespace rm::exec
