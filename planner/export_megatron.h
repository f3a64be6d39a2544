// A plan as Megatron-LM / Megatron-Core arguments (pretrain_gpt.py), checked against
// Megatron's own argument rules before it is printed.
//
//   parallelism   --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1
//                 [--num-virtual-stages-per-pipeline-rank V] [--account-for-embedding-in-
//                 pipeline-split] [--account-for-loss-in-pipeline-split]
//                 --context-parallel-size P --cp-comm-type p2p|all_gather|a2a|a2a+p2p
//                 [--hierarchical-context-parallel-sizes A B]   (a2a+p2p only)
//   data parallel --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params
//                 --use-distributed-optimizer --no-gradient-accumulation-fusion
//                 --ckpt-format fsdp_dtensor (what Megatron-FSDP requires): parameters,
//                 gradients and optimizer states sharded over the dp x cp ranks, as the
//                 memory model prices them (ZeRO-3)
//   recompute     selective: --recompute-granularity selective --recompute-modules mlp
//                 (the FFN activations, what our `selective` drops); full: granularity
//                 full, method uniform, 1 layer per checkpoint
//   batch         --micro-batch-size (sequences per data-parallel replica per micro-step)
//                 --global-batch-size (sequences per optimizer step) --seq-length
//   model         --num-layers --hidden-size --ffn-hidden-size --num-attention-heads
//                 [--group-query-attention --num-query-groups] [--kv-channels] [--swiglu]
//                 [--window-size W-1,0] [--disable-bias-linear [--add-qkv-bias]] --attention-dropout P
//                 --hidden-dropout P [--untie-embeddings-and-output-weights]
//                 --normalization RMSNorm|LayerNorm --position-embedding-type
//                 rope|learned_absolute: the blocks the model file describes (`sliding_window`, `bias`: none,
//                 qkv or all; `attention_dropout`, `hidden_dropout`; embeddings tied or not;
//                 `norm`, `position_embedding`; ALiBi has no spelling: a violation), always
//                 stated, since Megatron-LM's defaults are GPT's (arguments.py:
//                 add_bias_linear on, both dropouts 0.1, embeddings tied)
//   attention     --attention-backend flash (the job's flash_attn_2 or flash_attn_3:
//                 Transformer Engine's FlashAttention, the version installed) or fused
//                 (cudnn: TE's cuDNN attention); Megatron's default, auto, lets TE choose,
//                 which on Hopper is often cuDNN's, another kernel than the one priced
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm {

struct MegatronArgs {
  int world_size = 1;
  int tp = 1, pp = 1, cp = 1, dp = 1;
  int virtual_stages = 1;           // --num-virtual-stages-per-pipeline-rank (> 1: interleaved)
  bool account_for_embedding_in_pipeline_split = false;  // the flags of the same names
  bool account_for_loss_in_pipeline_split = false;
  std::string cp_comm_type;         // "" when cp == 1
  std::vector<int> hierarchical_cp_sizes;
  bool sequence_parallel = false;   // needs tp > 1
  bool tp_comm_overlap = false;     // --tp-comm-overlap (TE userbuffers); needs sequence_parallel
  std::string recompute_granularity;  // "", "selective", "full"
  std::string recompute_method;       // "uniform" with full
  int recompute_num_layers = 0;
  std::vector<std::string> recompute_modules;
  // The plan's sharding (data_parallel.h): Megatron-FSDP's --data-parallel-sharding-strategy
  // ("optim_grads" zero2, "optim_grads_params" fsdp; "" none), the distributed optimizer
  // (zero1, and under Megatron-FSDP), and "hsdp", which has no spelling here (a violation).
  std::string fsdp_strategy;
  bool distributed_optimizer = false;
  std::string sharding = "fsdp";
  int micro_batch_size = 1;
  int64_t global_batch_size = 1;
  int64_t seq_length = 0;
  // The model.
  int num_layers = 0, hidden_size = 0, ffn_hidden_size = 0, num_attention_heads = 0;
  int num_query_groups = 0, kv_channels = 0;
  bool swiglu = false;
  bool untie_embeddings = true;  // --untie-embeddings-and-output-weights (Megatron ties by default)
  LinearBias bias = LinearBias::kNone;  // none: --disable-bias-linear; qkv: and --add-qkv-bias
  // The causal sliding window in tokens (effective_window; 0 = none): --window-size W-1,0,
  // Transformer Engine's (left, right) window, query i attending keys i-W+1..i.
  int64_t sliding_window = 0;
  double attention_dropout = 0, hidden_dropout = 0;
  std::string normalization;            // --normalization: "RMSNorm" or "LayerNorm" (Megatron's default)
  std::string position_embedding_type;  // "rope", "learned_absolute" (Megatron's default); "" for ALiBi
  // The job's attention kernel (kernel_efficiency.h) and Megatron's --attention-backend for
  // it ("" where Megatron has none: a violation).
  std::string attention_kernel, attention_backend;
  // --grad-reduce-in-bf16: the plan priced bf16 gradients (Job::grad_reduce_in_fp32 false),
  // where Megatron-LM keeps a --bf16 run's in fp32 by default.
  bool grad_reduce_in_bf16 = false;
  // Float8 linear layers: Transformer Engine's recipe as Megatron-LM's --fp8-recipe names it
  // (delayed; tensorwise = TE's current scaling), with --fp8-format hybrid (E4M3 forward,
  // E5M2 gradients, TE's default recipe format). kNone: --bf16 alone.
  Fp8Recipe fp8 = Fp8Recipe::kNone;
  // Adam's states (Job::optimizer): other than fp32 all, --use-precision-aware-optimizer with
  // --main-params-dtype, --exp-avg-dtype, --exp-avg-sq-dtype where not fp32 and
  // --no-store-param-remainders where an fp32 master is kept whole (the remainders are
  // Megatron-Core's default under it, OptimizerConfig store_param_remainders).
  OptimizerStates optimizer;
};

// The arguments for `plan` (one export_refusal(kMegatron) accepts; strategy, degrees,
// checkpointing and batch are taken as they are).
MegatronArgs megatron_args(const Plan& plan, const ModelSpec& model);

// Megatron's own argument rules that these arguments break, one message each (empty: none):
//  - world size = TP x PP x CP x DP (megatron/training/arguments.py, validate_args: "world
//    size is not divisible by tensor parallel size times pipeline parallel size times
//    context parallel size")
//  - --hierarchical-context-parallel-sizes set when cp_comm_type is a2a+p2p, with product CP
//    (arguments.py: "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used")
//  - sequence divisible by 2 x CP: get_batch_on_this_cp_rank views the sequence as 2 x CP
//    chunks and gives rank r chunks r and 2CP-1-r (megatron/training/utils.py)
//  - a2a: heads and query groups divisible by CP (Transformer Engine's all-to-all over heads)
//  - global batch divisible by micro batch x DP (megatron/core/num_microbatches_calculator.py)
//  - sequence parallel only with TP > 1; virtual pipeline stages only with PP > 1
//  - an attention kernel --attention-backend names (flash, fused), and a position embedding
//    --position-embedding-type names (not ALiBi)
//  - the precision-aware optimizer only with the distributed optimizer (OptimizerConfig
//    __post_init__: "--use-precision-aware-optimizer only supported with distributed
//    optimizer"; Megatron-FSDP sets it too)
std::vector<std::string> megatron_rule_violations(const MegatronArgs& a);

// "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 ...": one line.
std::string megatron_command_line(const MegatronArgs& a);

// The export: header, rank placement (CUDA_VISIBLE_DEVICES per node when the order is not
// node-major), then the argument line.
std::string megatron_export(const Plan& plan, const ModelSpec& model, int gpus_per_node,
                            const std::string& plan_path);

}  // namespace rm
