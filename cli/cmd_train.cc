// `ringmaster train --plan plan.yaml --data text.txt --steps S [--seed N]
//  [--checkpoint-dir DIR] [--checkpoint-every K] [--resume] [--measurements m.jsonl]
//  [--format table|json] [--lr LR] [--warmup W] [--timeout-s S] [--sharding fsdp|ddp]
//  [--backend cpu|cuda] [--mixed-precision-param bfloat16|float32]
//  [--mixed-precision-reduce bfloat16|float32]`
//
// Trains the plan's model on a text file (executor/train.h) over the plan's ranks. Like
// `run`, outside an MPI job it checks its inputs (plan, model, data, checkpoint), then
// replaces itself with mpirun starting the plan's GPU count of ranks of this binary;
// under mpirun it runs as one rank.
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "executor/run.h"
#include "executor/train.h"
#include "planner/input_error.h"

namespace rm::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "train", "Train the plan's model on a text file over MPI ranks with the plan's ring attention");
  auto o = std::make_shared<exec::TrainOptions>();
  cmd->add_option("--plan,plan", o->plan_path, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--data", o->data_path,
                  "training text, read as a byte stream ('\\f' separates documents)")
      ->required();
  cmd->add_option("--steps", o->steps, "optimizer steps to reach (counting resumed ones)")
      ->required()
      ->check(CLI::Range(int64_t{1}, kMaxCount));
  cmd->add_option("--seed", o->seed, "initialisation seed")->capture_default_str();
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "write checkpoints here (and read them with --resume)");
  cmd->add_option("--checkpoint-every", o->checkpoint_every,
                  "checkpoint every K steps (0: only after the last step)")
      ->check(CLI::Range(int64_t{0}, kMaxCount))
      ->capture_default_str();
  cmd->add_flag("--resume", o->resume,
                "continue from the latest complete checkpoint in --checkpoint-dir (if any)");
  cmd->add_option("--measurements", o->measurements_path,
                  "write the ring attention's op records as JSON lines (executor/measurements.h)");
  cmd->add_option("--format", o->format, "table or json (one object per step)")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  cmd->add_option("--lr", o->optimizer.lr, "AdamW peak learning rate")
      ->check(finite_positive(10))
      ->capture_default_str();
  cmd->add_option("--warmup", o->optimizer.warmup_steps, "linear learning-rate warm-up steps")
      ->check(CLI::Range(0, static_cast<int>(kMaxCount)))
      ->capture_default_str();
  auto sharding = std::make_shared<std::string>();
  cmd->add_option("--sharding", *sharding,
                  "model state over the ranks: fsdp (sharded over all ranks) or ddp (replicated on every "
                  "rank, one gradient all-reduce); default: the plan's sharding")
      ->check(CLI::IsMember({"fsdp", "ddp"}));
  cmd->add_option("--backend", o->backend,
                  "cpu (MPI + Eigen) or cuda (cuBLAS and CUDA kernels, the ring over NCCL; one GPU per rank)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--mixed-precision-param", o->mixed_precision_param,
                  "the pass's precision, torchtitan's training.mixed_precision_param: bfloat16 (bf16 "
                  "activations and gathered units; fp32 shards and AdamW) or float32; "
                  "default bfloat16 on cuda where the plan's GPUs compute in bf16, float32 on the cpu")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cmd->add_option("--mixed-precision-reduce", o->mixed_precision_reduce,
                  "the type gradients are reduce-scattered in, torchtitan's training.mixed_precision_reduce: "
                  "float32 or bfloat16 (half the bytes); default the plan's: float32 where it says "
                  "grad_reduce_in_fp32, else the pass's precision")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  cmd->add_option("--timeout-s", o->timeout_s,
                  "a rank with no progress for this long aborts the run (a dead or stalled peer, or a set-up "
                  "that never finishes)")
      ->check(finite_in(0.001, 86400))
      ->capture_default_str();
  cmd->callback([o, sharding] {
    if (!sharding->empty()) o->sharding = *sharding == "ddp" ? exec::Sharding::kDdp : exec::Sharding::kFsdp;
    if (o->resume && o->checkpoint_dir.empty())
      fail_input("--resume", "--checkpoint-dir", "--resume needs --checkpoint-dir");
    if (under_mpi()) {
      const int code = exec::train_rank(*o);
      if (code != 0) std::exit(code);
      return;
    }
    check_output_path(o->measurements_path, "--measurements");
    std::string dir = o->checkpoint_dir;  // created when missing: its parent must be writable
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    check_output_path(dir, "--checkpoint-dir");
    relaunch_under_mpirun(exec::check_train_inputs(*o), own_arguments());
  });
}

}  // namespace rm::cli
