// One rank of `ringmaster train`: trains the plan's model on a text file with the plan's
// parallel layout, printing one progress line per optimizer step (rank 0).
//
// A step (global batch S = dp * micro_batch * grad_accum sequences of N tokens, read in
// order from the token stream; every rank reads all S and keeps its own):
//   for each micro-step a and sequence m of the micro-batch: ring r takes sequence
//   (a * dp + r) * micro_batch + m, each of its ranks runs the transformer on its c
//   tokens (TokenLayout) with the plan's ring attention joining them (ring_attention.h),
//   adding the gradient of the mean token loss over the whole batch;
//   then one all-reduce (sum) of the gradients over all ranks (data parallel, and the
//   ring's ranks' shares of the shared weights), clipping and AdamW on every rank.
// So the loss of a step does not depend on cp, dp, micro-batch or grad-accum, only on
// S and N: runs with different rank counts follow the same trajectory up to fp32
// rounding (tests/e2e/train_equivalence.sh).
//
// Not executed as planned (numerically equivalent, reported in the header line): FSDP's
// sharding (every rank holds the whole model and optimizer; the gradient all-reduce is
// the reduce-scatter + all-gather pair it stands for) and activation checkpointing (all
// activations are kept).
#pragma once

#include <cstdint>
#include <string>

#include "executor/adamw.h"

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
  std::string format = "table";   // "table" or "json"
  std::string backend = "cpu";
  double timeout_s = 60;  // watchdog deadline per op (watchdog.h)
  AdamWConfig optimizer;
};

// Everything checked before ranks start: plan (ring strategy, topology for the backend),
// model (transformer.h), data file (token_stream.h) and, with --resume, the latest
// checkpoint. Returns the plan's rank count. Throws InputError naming the file.
int check_train_inputs(const TrainOptions& options);

// Runs this process as one rank: initialises MPI, trains, finalises. Returns the exit
// code: 0, or 2 (bad input).
int train_rank(const TrainOptions& options);

}  // namespace rm::exec
