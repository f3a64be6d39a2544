// One rank's pipeline stage in `ringmaster train` (planner/pipeline_parallel.h: Megatron-LM's
// 1F1B, forward_backward_pipelining_without_interleaving, and its interleaved 1F1B with v
// chunks a stage): the stage's program (planner/pipeline_schedule.h pp_1f1b_program, the
// one the planner prices and the simulator replays) run over one step's micro-batches,
// each a Transformer::pass of one of the stage's chunks suspended between its forward and
// its backward, and its blocking exchanges with the same rank of the neighbouring stages
// (GPU g of stage s and g + G/pp; the last stage's activations go to the first, for its
// next chunk), as Megatron's p2p_communication runs them: all of an exchange's sends and
// receives posted, then waited for. A message is a micro-batch's activation going down or
// its input gradient going up, this TP member's rows of it (c·micro_batch/tp tokens x
// hidden, the pass's type), tagged micro-batch·v + the sender's chunk: each direction of a
// link carries one kind, paired
// by posting order as NCCL pairs its sends and receives, and the MPI transport checks
// each receive's tag and size (mpi_transport.h, the message contract of
// planner/op_list.h), so an exchange out of order fails here, naming the link, instead of
// corrupting a pass. With pp 1 the program is each micro-batch's forward, then its
// backward, as without a pipeline.
//
// Each exchange's time is recorded (measurements.h: kind "pp_exchange", bytes sent and
// received, seconds = the time blocked in it; all exposed).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "executor/measurements.h"
#include "executor/mpi_transport.h"
#include "executor/post_log.h"
#include "executor/shard_collectives.h"
#include "executor/transformer.h"
#include "executor/watchdog.h"
#include "planner/pipeline_schedule.h"

namespace rm::exec {

// What a stage shares with its pass's type: this rank's peers in the other stages (the
// sums over them), the step, the records and the fault.
class PipelinePeers {
 public:
  // This rank's stage of `pp` (stages of `stage_ranks` consecutive ranks). Records' start
  // times count from MPI_Wtime() = `epoch`.
  PipelinePeers(int world_rank, int pp, int stage_ranks, Watchdog* watchdog, double epoch);
  virtual ~PipelinePeers();
  PipelinePeers(const PipelinePeers&) = delete;
  PipelinePeers& operator=(const PipelinePeers&) = delete;

  int stage() const { return stage_; }
  // x summed over the pipeline's stages (this rank's peers in them).
  double sum(double x);
  // The whole model's vector from the stages' parts (each zero outside its part), in place.
  void sum(std::vector<float>& x);
  void set_step(int step) { step_ = step; }
  // Fault injection for tests (RINGMASTER_FAULT=pp-order, watchdog.h): at training step
  // `step` (0-based) this rank's first send carries the next micro-batch's tag, as a stage
  // sending micro-batch 1's activation where micro-batch 0's belongs would: a same-size
  // message NCCL would deliver without complaint.
  void inject_wrong_tag(int step) { wrong_tag_step_ = step; }
  // Logs every exchange on `log` from now on (post_log.h).
  void log_posts(PostLog* log) { log_ = log; }
  // Seconds blocked in exchanges since the last take_records(), and their records.
  double comm_s() const { return comm_s_; }
  std::vector<Measurement> take_records();

 protected:
  MPI_Comm comm_ = MPI_COMM_NULL;  // this rank's peers in every stage, by stage (sums)
  int world_rank_, stage_ = 0, stage_ranks_, pp_;
  Watchdog* watchdog_;
  double epoch_;
  int step_ = 0;
  int wrong_tag_step_ = -1;
  PostLog* log_ = nullptr;
  double comm_s_ = 0;
  std::vector<Measurement> records_;
};

template <class T>
class PipelineStage final : public PipelinePeers {
 public:
  // This rank's stage of `pp` of `virtual_stages` chunks each, its program over
  // `microbatches` micro-batches (`warmup`: whose interleaved warm-up, the plan's
  // framework's); exchanged activations hold `rows` x `hidden` elements.
  PipelineStage(TrainKernels<T>& kernels, int world_rank, int pp, int virtual_stages, int stage_ranks,
                int64_t microbatches, InterleavedWarmup warmup, int64_t rows, int hidden, Watchdog* watchdog,
                double epoch);

  // One step: runs the program, calling `start(micro, chunk, io)` for the pass of each
  // micro-batch through each of the stage's chunks (before its forward; `io` holds the
  // received activation where the chunk is not the model's first) and `before(micro)`
  // before each forward and backward. Returns the sum of the passes' losses; `held`, when
  // given, gets the most activation bytes the live passes stored at once (each pass
  // reports its own through `held_of(micro, chunk)`).
  double run_step(const std::function<PassTask(int micro, int chunk, StageIo<T>* io)>& start,
                  const std::function<void(int micro)>& before,
                  const std::function<size_t(int micro, int chunk)>& held_of, size_t* held);

 private:
  // What a micro-batch holds between its actions: its pass, what arrived for it (the
  // previous stage's output, the next one's gradient), and what it leaves to send (io).
  struct MicroBatch {
    StageIo<T> io;
    Tensor<T> activation, gradient;
    std::optional<PassTask> pass;
    bool backward_done = false;
  };
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  // The micro-batch and the chunk of this stage a message of tag `tag` is for: a sent one's
  // own; a received one's, the next chunk's where the activation came round from the last
  // stage, the previous chunk's where the gradient came round from the first.
  Key key(const PipelineMessage& msg) const;
  void exchange(const PipelineAction& a, std::map<Key, MicroBatch>& live);
  TrainKernels<T>& k_;
  MpiTransport transport_;  // the exchanges, on world ranks
  int v_;
  int64_t rows_;
  int hidden_;
  std::vector<PipelineAction> program_;
};

}  // namespace rm::exec
