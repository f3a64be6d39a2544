#include "planner/export_megatron.h"

#include <cstdio>

#include "planner/attention_work.h"
#include "planner/cost_model.h"
#include "planner/export_target.h"
#include "planner/memory_model.h"

namespace rm {

MegatronArgs megatron_args(const Plan& plan, const ModelSpec& model) {
  const PlanChoice& c = plan.choice;
  MegatronArgs a;
  a.world_size = plan.job.gpus;
  // Tensor parallelism always with sequence parallelism, as the plan priced it
  // (tensor_parallel.h).
  a.tp = c.tp;
  a.sequence_parallel = c.tp > 1;
  a.tp_comm_overlap = c.tp_comm_overlap;
  a.cp = c.cp;
  a.dp = c.dp;
  a.pp = c.pp;
  // Interleaved 1F1B: each pipeline rank holds virtual_stages chunks; the split as
  // pipeline_parallel.h cuts it, which is Megatron's wherever Megatron accepts it.
  a.virtual_stages = c.virtual_stages;
  a.account_for_embedding_in_pipeline_split = c.account_for_embedding_in_pipeline_split;
  a.account_for_loss_in_pipeline_split = c.account_for_loss_in_pipeline_split;
  if (c.cp > 1) a.cp_comm_type = cp_comm_type(c.strategy);  // plan.h: Megatron's names
  if (c.strategy == Strategy::kUsp) a.hierarchical_cp_sizes = {c.cp_a2a, c.cp / c.cp_a2a};
  switch (c.checkpointing) {
    case Checkpointing::kNone: break;
    case Checkpointing::kSelective:
      // Our selective keeps attention and norm inputs and recomputes the FFN intermediate
      // (planner/memory_model.cc): Megatron-Core's "mlp" recompute module.
      a.recompute_granularity = "selective";
      a.recompute_modules = {"mlp"};
      break;
    case Checkpointing::kFull:
      // Every layer's input stored, the layer recomputed: uniform over 1-layer groups.
      a.recompute_granularity = "full";
      a.recompute_method = "uniform";
      a.recompute_num_layers = 1;
      break;
  }
  a.sharding = to_string(c.sharding);
  if (plan.job.gpus / c.tp > 1) {  // some GPUs hold the same weights: a data-parallel layout
    if (c.sharding == Sharding::kFsdp) a.fsdp_strategy = "optim_grads_params";
    if (c.sharding == Sharding::kZero2) a.fsdp_strategy = "optim_grads";
    a.distributed_optimizer = !a.fsdp_strategy.empty() || c.sharding == Sharding::kZero1;
  }
  a.micro_batch_size = c.micro_batch;
  a.global_batch_size = sequences_per_step(plan.job);
  a.seq_length = plan.job.seq_len;
  a.num_layers = model.layers;
  a.hidden_size = model.hidden;
  a.ffn_hidden_size = model.ffn_hidden;
  a.num_attention_heads = model.heads;
  a.num_query_groups = model.kv_heads;
  a.kv_channels = model.head_dim;
  a.swiglu = model.gated_ffn;
  a.untie_embeddings = !model.tied_embeddings;
  a.sliding_window = effective_window(model, plan.job);
  a.bias = model.bias;
  a.attention_dropout = model.attention_dropout;
  a.hidden_dropout = model.hidden_dropout;
  a.normalization = model.norm == Norm::kRmsNorm ? "RMSNorm" : "LayerNorm";
  if (model.position_embedding == PositionEmbedding::kRope) a.position_embedding_type = "rope";
  if (model.position_embedding == PositionEmbedding::kLearned) a.position_embedding_type = "learned_absolute";
  a.attention_kernel = plan.job.attention_kernel;
  if (a.attention_kernel == "flash_attn_2" || a.attention_kernel == "flash_attn_3")
    a.attention_backend = "flash";
  else if (a.attention_kernel == "cudnn")
    a.attention_backend = "fused";
  a.grad_reduce_in_bf16 = !plan.job.grad_reduce_in_fp32;
  a.fp8 = plan.job.fp8_recipe;
  a.optimizer = plan.job.optimizer;
  return a;
}

std::vector<std::string> megatron_rule_violations(const MegatronArgs& a) {
  std::vector<std::string> v;
  if (a.tp * a.pp * a.cp * a.dp != a.world_size)
    v.push_back("world size " + std::to_string(a.world_size) + " != TP x PP x CP x DP = " + std::to_string(a.tp) +
                " x " + std::to_string(a.pp) + " x " + std::to_string(a.cp) + " x " + std::to_string(a.dp) +
                " (Megatron-LM arguments.py: world size divisible by "
                "TP x PP x CP, DP the quotient)");
  if (a.cp_comm_type == "a2a+p2p") {
    int64_t prod = 1;
    for (int s : a.hierarchical_cp_sizes) prod *= s;
    if (a.hierarchical_cp_sizes.empty() || prod != a.cp)
      v.push_back("cp_comm_type a2a+p2p needs --hierarchical-context-parallel-sizes with product CP = " +
                  std::to_string(a.cp) + " (Megatron-LM arguments.py)");
  }
  if (a.cp > 1 && a.seq_length % (2 * a.cp) != 0)
    v.push_back("seq_len: Megatron-LM splits the sequence into 2 x CP = " + std::to_string(2 * a.cp) +
                " chunks "
                "(get_batch_on_this_cp_rank); " +
                std::to_string(a.seq_length) + " tokens do not divide");
  if (a.cp_comm_type == "a2a" || a.cp_comm_type == "a2a+p2p") {
    const int a2a = a.cp_comm_type == "a2a" ? a.cp : (a.hierarchical_cp_sizes.empty() ? a.cp : a.hierarchical_cp_sizes.front());
    if (a.num_attention_heads % (a2a * a.tp) != 0 || a.num_query_groups % (a2a * a.tp) != 0)
      v.push_back("plan.cp: the all-to-all over heads needs the " + std::to_string(a.num_attention_heads) +
                  " heads and " + std::to_string(a.num_query_groups) + " query groups divisible by its size " +
                  std::to_string(a2a * a.tp));
  }
  if (a.global_batch_size % (int64_t{a.micro_batch_size} * a.dp) != 0)
    v.push_back("plan.micro_batch: Megatron-LM's global batch (" + std::to_string(a.global_batch_size) +
                " sequences) must be a multiple of micro batch x DP = " + std::to_string(a.micro_batch_size) + " x " +
                std::to_string(a.dp) + " (num_microbatches_calculator.py)");
  if (a.sequence_parallel && a.tp == 1)
    v.push_back("--sequence-parallel needs TP > 1 (Megatron-LM turns it off at TP 1)");
  if (a.tp_comm_overlap && !a.sequence_parallel)
    v.push_back("--tp-comm-overlap needs --sequence-parallel (Megatron-LM arguments.py: TP communication/GEMM "
                "overlap only with sequence parallelism)");
  if (a.sharding == "hsdp")
    v.push_back("plan.sharding hsdp: Megatron-LM has no sharding inside a node replicated across for all "
                "states (export to torchtitan, or plan with --sharding fsdp, zero2, zero1 or ddp)");
  if (a.virtual_stages > 1 && a.pp == 1) v.push_back("--num-virtual-stages-per-pipeline-rank needs PP > 1");
  if (a.position_embedding_type.empty())
    v.push_back("model.position_embedding alibi: Megatron-LM's --position-embedding-type is learned_absolute, rope, "
                "mrope, relative or none (megatron/training/arguments.py), no ALiBi");
  if (a.attention_backend.empty())
    v.push_back("job.attention_kernel '" + a.attention_kernel +
                "': Megatron-LM's --attention-backend runs FlashAttention (flash: flash_attn_2, flash_attn_3) or "
                "cuDNN's (fused: cudnn), not this kernel (megatron/training/arguments.py, AttnBackend)");
  if (const std::string why = fp8_recipe_refusal(ExportTarget::kMegatron, a.fp8); !why.empty())
    v.push_back("plan.fp8_recipe: " + why);
  if (precision_aware_optimizer(a.optimizer) && !a.distributed_optimizer)
    v.push_back("optimizer states: Megatron-LM's --use-precision-aware-optimizer runs only with the distributed "
                "optimizer (OptimizerConfig: \"only supported with distributed optimizer\"; plan with --sharding zero1, "
                "zero2 or fsdp)");
  const int accounted = (a.account_for_embedding_in_pipeline_split ? 1 : 0) + (a.account_for_loss_in_pipeline_split ? 1 : 0);
  const std::string units = "--num-layers " + std::to_string(a.num_layers) +
                            (accounted ? " + " + std::to_string(accounted) + " accounted" : "");
  if (a.pp > 1 && (a.num_layers + accounted) % a.pp != 0)
    v.push_back(units + " not divisible by PP " + std::to_string(a.pp) +
                " (Megatron-LM transformer_config.py, without an uneven first/last stage)");
  if (a.virtual_stages > 1) {
    if ((a.num_layers + accounted) % (a.pp * a.virtual_stages) != 0)
      v.push_back(units + " not a multiple of PP x virtual stages");
    const int64_t dp_mb = int64_t{a.micro_batch_size} * a.dp;
    if (dp_mb > 0 && (a.global_batch_size / dp_mb) % a.pp != 0)
      v.push_back("interleaved schedule: micro-batches " + std::to_string(a.global_batch_size / dp_mb) +
                  " not divisible by PP " + std::to_string(a.pp) + " (Megatron-LM schedules.py)");
  }
  return v;
}

namespace {

// A dropout probability as Megatron-LM's float arguments take it: "0.0", "0.1".
std::string dropout_arg(double p) {
  if (p == 0) return "0.0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

}  // namespace

std::string megatron_command_line(const MegatronArgs& a) {
  std::string s;
  auto add = [&](const std::string& flag, const std::string& value = "") {
    if (!s.empty()) s += ' ';
    s += flag;
    if (!value.empty()) s += ' ' + value;
  };
  add("--tensor-model-parallel-size", std::to_string(a.tp));
  add("--pipeline-model-parallel-size", std::to_string(a.pp));
  if (a.virtual_stages > 1) add("--num-virtual-stages-per-pipeline-rank", std::to_string(a.virtual_stages));
  if (a.account_for_embedding_in_pipeline_split) add("--account-for-embedding-in-pipeline-split");
  if (a.account_for_loss_in_pipeline_split) add("--account-for-loss-in-pipeline-split");
  add("--context-parallel-size", std::to_string(a.cp));
  if (!a.cp_comm_type.empty()) add("--cp-comm-type", a.cp_comm_type);
  if (!a.hierarchical_cp_sizes.empty()) add("--hierarchical-context-parallel-sizes", join_ints(a.hierarchical_cp_sizes, " "));
  if (a.sequence_parallel) add("--sequence-parallel");
  if (a.tp_comm_overlap) add("--tp-comm-overlap");  // Transformer Engine's userbuffers (tensor_parallel.h)
  if (!a.fsdp_strategy.empty()) {
    add("--use-megatron-fsdp");
    add("--data-parallel-sharding-strategy", a.fsdp_strategy);
    add("--use-distributed-optimizer");
    add("--no-gradient-accumulation-fusion");
    add("--ckpt-format", "fsdp_dtensor");
    // Megatron-FSDP's overlap is its DDP config's overlap_grad_reduce / overlap_param_gather
    // (both off by default); the plan priced the gathers prefetched and the reductions hidden.
    add("--overlap-grad-reduce");
    add("--overlap-param-gather");
  } else if (a.distributed_optimizer) {
    // zero1 as priced (data_parallel.h): grads reduce-scattered in the last micro-step's
    // backward, params gathered in the next forward.
    add("--use-distributed-optimizer");
    add("--overlap-grad-reduce");
    add("--overlap-param-gather");
  } else if (a.dp > 1 || a.cp > 1) {
    add("--overlap-grad-reduce");  // ddp: the all-reduce overlaps the last backward (DDP's buckets)
  }
  if (!a.recompute_granularity.empty()) add("--recompute-granularity", a.recompute_granularity);
  if (!a.recompute_method.empty()) {
    add("--recompute-method", a.recompute_method);
    add("--recompute-num-layers", std::to_string(a.recompute_num_layers));
  }
  if (!a.recompute_modules.empty()) {
    std::string mods = a.recompute_modules.front();
    for (size_t i = 1; i < a.recompute_modules.size(); ++i) mods += ' ' + a.recompute_modules[i];
    add("--recompute-modules", mods);
  }
  add("--micro-batch-size", std::to_string(a.micro_batch_size));
  add("--global-batch-size", std::to_string(a.global_batch_size));
  add("--seq-length", std::to_string(a.seq_length));
  add("--max-position-embeddings", std::to_string(a.seq_length));
  add("--num-layers", std::to_string(a.num_layers));
  add("--hidden-size", std::to_string(a.hidden_size));
  add("--ffn-hidden-size", std::to_string(a.ffn_hidden_size));
  add("--num-attention-heads", std::to_string(a.num_attention_heads));
  if (a.num_query_groups != a.num_attention_heads) {
    add("--group-query-attention");
    add("--num-query-groups", std::to_string(a.num_query_groups));
  }
  if (a.kv_channels * a.num_attention_heads != a.hidden_size) add("--kv-channels", std::to_string(a.kv_channels));
  if (a.swiglu) add("--swiglu");
  if (a.sliding_window > 0) add("--window-size", std::to_string(a.sliding_window - 1) + ",0");
  // The model's biases and dropout, stated: Megatron-LM's defaults are GPT's (biases on,
  // dropout 0.1), which would run something other than the model file.
  if (a.bias != LinearBias::kAll) add("--disable-bias-linear");
  if (a.bias == LinearBias::kQkv) add("--add-qkv-bias");
  add("--attention-dropout", dropout_arg(a.attention_dropout));
  add("--hidden-dropout", dropout_arg(a.hidden_dropout));
  if (a.untie_embeddings) add("--untie-embeddings-and-output-weights");
  add("--normalization", a.normalization);
  add("--position-embedding-type", a.position_embedding_type);
  add("--attention-backend", a.attention_backend);  // auto would let TE pick another kernel
  add("--bf16");
  if (a.fp8 == Fp8Recipe::kDelayed || a.fp8 == Fp8Recipe::kCurrent) {
    add("--fp8-format", "hybrid");
    add("--fp8-recipe", a.fp8 == Fp8Recipe::kDelayed ? "delayed" : "tensorwise");  // Megatron's name for TE's current scaling
  }
  if (a.grad_reduce_in_bf16) add("--grad-reduce-in-bf16");
  const OptimizerStates& o = a.optimizer;
  if (precision_aware_optimizer(o)) {
    add("--use-precision-aware-optimizer");
    if (o.main_params_dtype != StateDtype::kFp32) add("--main-params-dtype", to_string(o.main_params_dtype));
    if (o.exp_avg_dtype != StateDtype::kFp32) add("--exp-avg-dtype", to_string(o.exp_avg_dtype));
    if (o.exp_avg_sq_dtype != StateDtype::kFp32) add("--exp-avg-sq-dtype", to_string(o.exp_avg_sq_dtype));
    if (o.main_params_dtype == StateDtype::kFp32 && !o.store_param_remainders) add("--no-store-param-remainders");
  }
  return s;
}

std::string megatron_export(const Plan& plan, const ModelSpec& model, int gpus_per_node,
                            const std::string& plan_path) {
  std::string out = export_header(plan, ExportTarget::kMegatron, plan_path);
  out += "# Append to: torchrun --nnodes N --nproc-per-node G ... pretrain_gpt.py (add data, tokenizer and\n"
         "# optimizer; the attention kernel picks its own tiles).\n";
  const MegatronArgs args = megatron_args(plan, model);
  if (!args.fsdp_strategy.empty())
    out += "# Megatron-FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset (its checks want more than 1).\n";
  else if (args.tp > 1 || args.cp > 1)  // arguments.py asserts it before Blackwell (arch < 10)
    out += "# Before torchrun: export CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM requires it with TP or CP > 1\n"
           "# on GPUs before Blackwell: the TP/CP communication must be scheduled ahead of the GEMMs).\n";
  if (args.grad_reduce_in_bf16)  // a numerics choice the plan made: say how to undo it
    out += "# --grad-reduce-in-bf16: the plan priced bf16 gradients; for Megatron-LM's fp32 default (more memory)\n"
           "# drop it and re-plan with --grad-reduce-in-fp32.\n";
  out += placement_comment(plan, gpus_per_node, "Megatron's rank order tp-cp-ep-dp-pp, TP " + std::to_string(plan.choice.tp));
  out += megatron_command_line(args) + "\n";
  return out;
}

}  // namespace rm
