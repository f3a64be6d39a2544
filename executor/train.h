// One rank of `ringmaster train`: trains the plan's model on a text file with the plan's
// parallel layout, printing one progress line per optimizer step (rank 0).
//
// A step (global batch S = dp * micro_batch * grad_accum sequences of N tokens, read in
// order from the token stream; every rank reads all S and keeps its own):
//   for each micro-step a: ring r takes sequences (a * dp + r) * micro_batch + m for
//   m < micro_batch, each of its ranks runs the transformer on its c tokens of each
//   (TokenLayout) with the plan's ring attention joining them (ring_attention.h) and the
//   plan's activation checkpointing, adding the gradient of the mean token loss over the
//   whole batch;
//   the model state sharded as the plan says (fsdp.h): FSDP over all ranks gathers each
//   unit before its forward and again before its backward, and reduce-scatters its
//   gradients after it, once per micro-step; then clipping by the global norm and AdamW
//   on each rank's shard (DDP, --sharding ddp: every rank holds everything, one
//   all-reduce of the gradients; hsdp, zero2 and zero1 as fsdp.h's ShardGroups says).
// So the loss of a step does not depend on cp, dp, micro-batch, grad-accum, sharding or
// checkpointing, only on S and N: runs with different rank counts follow the same
// trajectory up to fp32 rounding (tests/e2e/train_equivalence.sh).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "executor/adamw.h"
#include "executor/fsdp.h"
#include "executor/run.h"

namespace rm::exec {

struct TrainOptions {
  std::string plan_path;
  std::string data_path;
  int64_t steps = 0;
  uint64_t seed = 1234;  // initialisation (any value; recorded in checkpoints)
  std::string checkpoint_dir;  // empty = no checkpoints
  int64_t checkpoint_every = 0;  // 0 = only after the last step
  bool resume = false;
  std::string measurements_path;  // the ring attention's op records (measurements.h)
  std::string trace_path;         // the same records as a trace (run only)
  std::string format = "table";   // "table" or "json"
  std::string backend = "cpu";
  // The pass's precision, torchtitan's training.mixed_precision_param: "bfloat16" (mixed
  // precision, bf16_kernels.h: bf16 activations and gathered units, fp32 shards and
  // AdamW), "float32", or "" for the default: bfloat16 on cuda where the plan's GPUs
  // compute in bf16, float32 on the cpu.
  std::string mixed_precision_param;
  // The type gradients are reduce-scattered (and all-reduced) in, torchtitan's
  // training.mixed_precision_reduce: "float32", "bfloat16" (half the bytes, each partial
  // sum rounded to bf16), or "" for the plan's: float32 where it says grad_reduce_in_fp32,
  // else the pass's precision (so a bf16 pass reduces in bf16, as the plan priced it).
  std::string mixed_precision_reduce;
  double timeout_s = 60;  // watchdog deadline per op (watchdog.h)
  AdamWConfig optimizer;
  // How the model state is laid out over the ranks: unset = the plan's sharding (any
  // level: executed_sharding); set = that one whatever the plan says (for comparison).
  std::optional<Sharding> sharding;
  // `run` of a step plan (run_step_options): tokens hashed from the seed instead of a
  // file, the first `untimed_steps` left out of the measured mean, and the mean step time
  // compared with the plan's prediction.
  bool synthetic_data = false;
  int untimed_steps = 0;
  // run --verify: after the first step's all-reduce, rank 0 recomputes that step's loss
  // and gradients on one rank in fp64 (reference attention, whole sequences) and compares
  // every parameter tensor (verify.h's measure and tolerance); exit 1 when one fails.
  bool verify = false;
};

// What `ringmaster run` does with a step plan: 1 untimed warm-up step and `iters` timed
// training steps of the plan's model and layout on synthetic tokens, the ring attention's
// records to --measurements, and the measured mean step time against the prediction;
// --verify checks the first step's gradients against a one-rank fp64 reference.
TrainOptions run_step_options(const RunOptions& run);

// Everything checked before ranks start: plan (ring strategy, topology for the backend),
// model (transformer.h), data file (token_stream.h) and, with --resume, the latest
// checkpoint. Returns the plan's rank count. Throws InputError naming the file.
int check_train_inputs(const TrainOptions& options);

// Runs this process as one rank: initialises MPI, trains, finalises. Returns the exit
// code: 0, 1 (--verify failed) or 2 (bad input).
int train_rank(const TrainOptions& options);

}  // namespace rm::exec
