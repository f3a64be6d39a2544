#include "cli/job_options.h"

#include <cstdio>
#include <tuple>

#include "planner/data_parallel.h"
#include "planner/export_target.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/linear_precision.h"
#include "planner/memory_model.h"
#include "planner/plan_loader.h"
#include "planner/spec_library.h"
#include "planner/units.h"

namespace rm::cli {

void add_job_options(CLI::App* cmd, JobOptions& o, bool with_job_size) {
  cmd->add_option("--model", o.model,
                  std::string("model: a shipped name, a YAML path or a Hugging Face config.json (default ") +
                      kDefaultModel + ")");
  cmd->add_option("--topology", o.topology,
                  std::string("cluster: a shipped name or a YAML path (default ") + kStudyTopology + ")");
  if (with_job_size) {
    cmd->add_option("--gpus", o.gpus, "number of GPUs, at most " + std::to_string(kMaxGpus) +
                                          " (required; with plan --min-gpus the most to try)")
        ->check(CLI::Range(1, kMaxGpus));
    cmd->add_option(kSeqOptionNames, o.seq,
                    "sequence length in tokens: 8k, 1M or 1048576 (at most 1G = 2^30; Megatron's --seq-length, "
                    "torchtitan's seq_len)");
  }
  auto* tokens = cmd->add_option("--batch-tokens", o.batch_tokens,
                                 "global batch per optimizer step in tokens (default 2M, the Ring Attention paper's "
                                 "A100 batch; at least one sequence, at most 2^40)");
  cmd->add_option("--global-batch-size", o.global_batch_size,
                  "or the global batch in sequences per optimizer step, at every length (Megatron's "
                  "--global-batch-size)")
      ->excludes(tokens);
  cmd->add_flag("--causal,!--no-causal", o.causal, "causal mask (default) or full attention");
  cmd->add_flag("--chunked-loss,!--no-chunked-loss", o.chunked_loss,
                "the run computes the head's logits and the loss in 4K-token chunks (default; Liger's fused "
                "linear cross-entropy, the Ring Attention paper's blockwise loss), or over the whole "
                "micro-step's fp32 logits at once, as torchtitan and Megatron-LM do (memory only)");
  cmd->add_flag("--compiled-loss", o.compiled_loss,
                "with --no-chunked-loss: the loss compiled with the model, as torchtitan runs it under --compile "
                "since it compiles its loss (the fp32 upcast, log-softmax and NLL fused: the bf16 logits and "
                "their gradient; memory only)");
  auto* fp32_grads = cmd->add_flag(
      "--grad-reduce-in-fp32", o.grad_reduce_in_fp32,
      "the run accumulates and reduces gradients in fp32 (Megatron-Core's grad_reduce_in_fp32, Megatron-LM's "
      "bf16 default; torchtitan's mixed_precision_reduce = \"float32\"): twice the gradient traffic, and 4 bytes "
      "a whole gradient held (default with --target megatron|torchtitan)");
  cmd->add_flag("--grad-reduce-in-bf16", o.grad_reduce_in_bf16,
                "or in bf16, the GPU's element type (Megatron-LM's --grad-reduce-in-bf16; NVIDIA's performance "
                "recipes; the default without --target)")
      ->excludes(fp32_grads);
  cmd->add_option("--main-params-dtype", o.main_params_dtype,
                  "Adam's master params: fp32 (default) or fp16 (Megatron-LM's --main-params-dtype, with "
                  "--use-precision-aware-optimizer)");
  cmd->add_flag("--store-param-remainders", o.store_param_remainders,
                "the fp32 master kept as the 16 bits its bf16 param lacks, 2 bytes a parameter (Transformer "
                "Engine's FusedAdam under Megatron-LM's --use-precision-aware-optimizer, its default there; apex's "
                "DistributedFusedAdam under NeMo's bf16 O2)");
  cmd->add_option("--exp-avg-dtype", o.exp_avg_dtype,
                  "Adam's first moment: fp32 (default), fp16, bf16 or fp8 (Megatron-LM's --exp-avg-dtype)");
  cmd->add_option("--exp-avg-sq-dtype", o.exp_avg_sq_dtype,
                  "Adam's second moment: fp32 (default), fp16, bf16 or fp8 (Megatron-LM's --exp-avg-sq-dtype)");
  cmd->add_option("--workload", o.workload,
                  "what is predicted: attention (ring attention fwd+bwd), layer, or step (default)");
  cmd->add_option("--profile", o.profile, "calibrated profile YAML from `ringmaster calibrate`");
  cmd->add_option("--attention-kernel", o.attention_kernel,
                  "attention implementation the run uses: by default the one the topology's curve describes "
                  "(flash_attn_2; cudnn, Transformer Engine's fused kernels, on B200), or one the topology prices by "
                  "a factor (gpu.attention.kernels: triton; flash_attn_3 and cudnn on Hopper)");
  cmd->add_option("--fp8", o.fp8,
                  "float8 linear layers with this scaling recipe: tensorwise (torchao's, torchtitan's "
                  "model.converters float8), delayed or current (Transformer Engine's, Megatron-LM's --fp8-recipe "
                  "delayed / tensorwise); GPUs with fp8 tensor cores (H100, H200, B200, GB200). Default: bf16");
  auto* pins = cmd->add_option_group("pins", "fix a choice; the search works around it");
  pins->add_option("--cp-comm-type", o.cp_comm_type,
                   "context-parallel kind (Megatron's --cp-comm-type): p2p (ring), all_gather (K,V "
                   "all-gather, Llama 3), a2a (Ulysses) or a2a+p2p (all-to-all inside a node, ring across)");
  pins->add_option("--hierarchical-context-parallel-sizes", o.hierarchical_cp_sizes,
                   "a2a+p2p's split, as Megatron's: A B = the all-to-all degree inside a node and the ring "
                   "size across (cp = A x B; implies --cp-comm-type a2a+p2p)");
  pins->add_option("--tp,--tensor-model-parallel-size", o.tp,
                   "tensor-parallel size with sequence parallelism, inside a node (Megatron's "
                   "--tensor-model-parallel-size; searched over 1, 2, 4, 8)");
  pins->add_flag("--tp-comm-overlap", o.tp_comm_overlap,
                 "overlap each TP all-gather and reduce-scatter with its GEMM in tp chunks (Megatron's "
                 "--tp-comm-overlap, torchtitan's enable_async_tensor_parallel; searched both ways where tp > 1)");
  pins->add_flag("--no-tp-comm-overlap", o.no_tp_comm_overlap, "wait for each TP collective at once (Megatron's default)");
  pins->add_option("--pp,--pipeline-model-parallel-size", o.pp,
                   "pipeline-parallel size, stages outermost in the rank order tp-cp-dp-pp (Megatron's "
                   "--pipeline-model-parallel-size; step workload; searched over 1, 2, 4, ... that divide the GPUs)");
  pins->add_option("--virtual-stages,--num-virtual-stages-per-pipeline-rank", o.virtual_stages,
                   "model chunks per pipeline stage: 1 = 1F1B, more = interleaved 1F1B (Megatron's "
                   "--num-virtual-stages-per-pipeline-rank; needs --pp > 1)");
  pins->add_flag("--account-for-embedding-in-pipeline-split", o.embedding_in_split,
                 "the pipeline split counts the input embedding as one layer: the first stage takes one "
                 "fewer (Megatron's flag; torchtitan's pipeline_parallel_first_stage_less_layers 1; searched "
                 "with the loss's, both or neither, where pp > 1)");
  pins->add_flag("--no-account-for-embedding-in-pipeline-split", o.no_embedding_in_split,
                 "the split counts transformer layers only at the first stage (Megatron's default)");
  pins->add_flag("--account-for-loss-in-pipeline-split", o.loss_in_split,
                 "the pipeline split counts the output head and the loss as one layer: the last stage takes "
                 "one fewer (Megatron's flag; torchtitan's pipeline_parallel_last_stage_less_layers 1)");
  pins->add_flag("--no-account-for-loss-in-pipeline-split", o.no_loss_in_split,
                 "the split counts transformer layers only at the last stage (Megatron's default)");
  pins->add_option("--cp,--context-parallel-size", o.cp,
                   "context-parallel size (Megatron's --context-parallel-size, torchtitan's "
                   "context_parallel_degree); dp = gpus / (tp x cp x pp)");
  pins->add_option("--dp", o.dp,
                   "data-parallel size (replicas or shards of the model states, as --sharding says); "
                   "with tp and pp it sets cp = gpus / (tp x pp x dp)");
  pins->add_option("--schedule", o.schedule,
                   "flat, bidirectional or two-level (ring schedules; 'hierarchical' is read as two-level)");
  pins->add_option("--order", o.order, "ring order: node-major, snake (rail-aware) or searched");
  pins->add_option("--load-balance", o.load_balance, "contiguous, striped or zigzag");
  pins->add_option("--block-q", o.block_q, "query tile of the attention kernel");
  pins->add_option("--block-kv", o.block_kv, "key/value tile of the attention kernel");
  pins->add_option("--kv-subblocks", o.kv_subblocks, "messages per ring transfer");
  pins->add_option("--checkpointing,--recompute-granularity", o.checkpointing,
                   "activation checkpointing: none, selective or full (Megatron's --recompute-granularity, "
                   "torchtitan's activation_checkpoint.mode)");
  pins->add_option("--micro-batch,--micro-batch-size", o.micro_batch,
                   "sequences per micro-step on each data-parallel replica, its ring or CP group (step workload; "
                   "Megatron's --micro-batch-size): at most the replica's share of the batch");
  pins->add_option("--sharding", o.sharding,
                   "data-parallel sharding: ddp (replicated), zero1 (optimizer states sharded; Megatron "
                   "--use-distributed-optimizer), zero2 (+ grads), fsdp (+ params; ZeRO-3) or hsdp "
                   "(fsdp inside a node, replicated across)");
}

namespace {

// --hierarchical-context-parallel-sizes A B: pins a2a+p2p, cp = A x B and the a2a degree A.
void pin_hierarchical_cp_sizes(const std::vector<int>& h, int gpus, SearchPins& p) {
  const char* f = "--hierarchical-context-parallel-sizes";
  auto str = [](int64_t v) { return std::to_string(v); };
  if (h.size() != 2 || h[0] < 2 || h[1] < 2 || h[0] > kMaxGpus || h[1] > kMaxGpus) {
    std::string got;
    for (int v : h) got += (got.empty() ? "" : " ") + str(v);
    fail_input(kCommandLine, f, "expected two sizes A B >= 2: the a2a degree inside a node, the ring size across (got " +
                                    got + ")");
  }
  const int64_t cp = int64_t{h[0]} * h[1];
  if (p.cp_comm_type && *p.cp_comm_type != Strategy::kUsp)
    fail_input(kCommandLine, f, std::string("is a2a+p2p's split (got --cp-comm-type ") + cp_comm_type(*p.cp_comm_type) + ")");
  if (p.cp && *p.cp != cp)
    fail_input(kCommandLine, f, "expected A x B = --cp " + str(*p.cp) + " (got " + str(cp) + ")");
  if (gpus % cp != 0)
    fail_input(kCommandLine, f, "expected A x B to divide --gpus " + str(gpus) + " (got " + str(cp) + ")");
  p.cp_comm_type = Strategy::kUsp;
  p.cp = static_cast<int>(cp);
  p.cp_a2a = h[0];
}

}  // namespace

ResolvedJob resolve_job(const JobOptions& o, int gpus, int64_t seq_len) {
  ResolvedJob r;
  r.job.model = o.model.empty() ? kDefaultModel : o.model;
  r.job.topology = o.topology.empty() ? kStudyTopology : o.topology;
  r.model = load_model(r.job.model);
  r.topology = load_topology(r.job.topology);
  if (gpus == 0) fail_input(kCommandLine, "--gpus", "required: the number of GPUs");
  r.job.attention_kernel = o.attention_kernel;
  apply_attention_kernel(r.topology, r.job.attention_kernel, kCommandLine, "--attention-kernel");
  if (gpus < 1 || gpus > kMaxGpus)
    fail_input(kCommandLine, "--gpus", "must be in [1, " + std::to_string(kMaxGpus) + "] (got " + std::to_string(gpus) + ")");
  r.job.gpus = gpus;
  r.job.seq_len = seq_len > 0 ? seq_len : (o.seq.empty() ? 0 : parse_size(o.seq, kCommandLine, "--seq", kMaxSeqTokens));
  r.job.batch_tokens =
      o.batch_tokens.empty() ? 0 : parse_size(o.batch_tokens, kCommandLine, "--batch-tokens", kMaxBatchTokens);
  if (o.global_batch_size) {
    if (*o.global_batch_size < 1 || *o.global_batch_size > kMaxBatchTokens)
      fail_input(kCommandLine, "--global-batch-size",
                 "must be in [1, 2^40] sequences (got " + std::to_string(*o.global_batch_size) + ")");
    r.job.batch_sequences = *o.global_batch_size;
  }
  if (r.job.batch_tokens != 0 && r.job.batch_tokens < r.job.seq_len) {
    fail_input(kCommandLine, "--batch-tokens",
               "expected at least one sequence, --seq " + std::to_string(r.job.seq_len) + " tokens (got " +
                   std::to_string(r.job.batch_tokens) + ")");
  }
  r.job.causal = o.causal;
  r.job.chunked_loss = o.chunked_loss;
  if (o.compiled_loss && o.chunked_loss)
    fail_input(kCommandLine, "--compiled-loss", "expected with --no-chunked-loss (a chunked loss holds no whole logits)");
  r.job.compiled_loss = o.compiled_loss;
  r.job.grad_reduce_in_fp32 = o.grad_reduce_in_fp32;
  r.job.workload = parse_workload(o.workload, kCommandLine, "--workload");
  if (!o.fp8.empty()) r.job.fp8_recipe = parse_fp8_recipe(o.fp8, kCommandLine, "--fp8");
  apply_plan_precision(r.topology, r.job.fp8_recipe, o.profile, kCommandLine, "--fp8");
  OptimizerStates& opt = r.job.optimizer;
  auto dtype = [&](const std::string& v, const char* option, bool main_params) {
    return v.empty() ? StateDtype::kFp32 : parse_state_dtype(v, kCommandLine, option, main_params);
  };
  opt.main_params_dtype = dtype(o.main_params_dtype, "--main-params-dtype", true);
  opt.store_param_remainders = o.store_param_remainders;
  opt.exp_avg_dtype = dtype(o.exp_avg_dtype, "--exp-avg-dtype", false);
  opt.exp_avg_sq_dtype = dtype(o.exp_avg_sq_dtype, "--exp-avg-sq-dtype", false);
  if (const std::string why = optimizer_states_why_invalid(opt, r.topology.gpu.element_bytes); !why.empty())
    fail_input(kCommandLine, "--store-param-remainders", why);
  r.topology.gpu.memory_bytes *= 1 - o.headroom;  // the fabric copies the topology: before it
  build_fabric_and_costs(r.topology, gpus, o.profile, r.fabric, r.cost);

  SearchPins& p = r.pins;
  auto in_range = [](const std::optional<int>& v, const char* name, int hi) {
    if (v && (*v < 1 || *v > hi))
      fail_input(kCommandLine, name, "must be in [1, " + std::to_string(hi) + "] (got " + std::to_string(*v) + ")");
    return v;
  };
  p.tp = in_range(o.tp, "--tp", kMaxGpus);
  p.cp = in_range(o.cp, "--cp", kMaxGpus);
  p.dp = in_range(o.dp, "--dp", kMaxGpus);
  if (o.tp_comm_overlap && o.no_tp_comm_overlap)
    fail_input(kCommandLine, "--tp-comm-overlap", "expected one of --tp-comm-overlap and --no-tp-comm-overlap (got both)");
  if (o.tp_comm_overlap || o.no_tp_comm_overlap) p.tp_comm_overlap = o.tp_comm_overlap;
  if (o.tp_comm_overlap && p.tp && *p.tp == 1)
    fail_input(kCommandLine, "--tp-comm-overlap", "needs tp > 1: with --tp 1 there are no TP collectives to overlap");
  p.block_q = in_range(o.block_q, "--block-q", kMaxBlockTokens);
  p.block_kv = in_range(o.block_kv, "--block-kv", kMaxBlockTokens);
  p.kv_subblocks = in_range(o.kv_subblocks, "--kv-subblocks", kMaxKvSubblocks);
  p.micro_batch = in_range(o.micro_batch, "--micro-batch", kMaxMicroBatch);
  p.pp = in_range(o.pp, "--pp", kMaxGpus);
  p.virtual_stages = in_range(o.virtual_stages, "--virtual-stages", kMaxGpus);
  if (!o.cp_comm_type.empty()) p.cp_comm_type = parse_cp_comm_type(o.cp_comm_type, kCommandLine, "--cp-comm-type");
  if (!o.schedule.empty()) p.schedule = parse_schedule(o.schedule, kCommandLine, "--schedule");
  if (o.schedule == kOldTwoLevelSpelling) {
    std::fprintf(stderr,
                 "note: --schedule hierarchical is now spelled two-level (the double ring); "
                 "Megatron's hierarchical context parallelism is --cp-comm-type a2a+p2p\n");
  }
  if (!o.load_balance.empty()) p.load_balance = parse_load_balance(o.load_balance, kCommandLine, "--load-balance");
  if (!o.checkpointing.empty()) p.checkpointing = parse_checkpointing(o.checkpointing, kCommandLine, "--checkpointing");
  if (!o.sharding.empty()) p.sharding = parse_sharding(o.sharding, kCommandLine, "--sharding");
  if (!o.order.empty()) {
    if (o.order != "node-major" && o.order != "snake" && o.order != "searched")
      fail_input(kCommandLine, "--order", "expected one of node-major, snake, searched (got '" + o.order + "')");
    p.order = o.order;
  }
  if (!o.hierarchical_cp_sizes.empty()) pin_hierarchical_cp_sizes(o.hierarchical_cp_sizes, gpus, p);
  if (p.cp && gpus % *p.cp != 0)
    fail_input(kCommandLine, "--cp", "must divide --gpus " + std::to_string(gpus) + " (got " + std::to_string(*p.cp) + ")");
  if (p.tp && gpus % *p.tp != 0)
    fail_input(kCommandLine, "--tp", "must divide --gpus " + std::to_string(gpus) + " (got " + std::to_string(*p.tp) + ")");
  if (p.pp && gpus % *p.pp != 0)
    fail_input(kCommandLine, "--pp", "must divide --gpus " + std::to_string(gpus) + " (got " + std::to_string(*p.pp) + ")");
  if (p.pp && gpus % (int64_t{*p.pp} * p.tp.value_or(1) * p.cp.value_or(1)) != 0)
    fail_input(kCommandLine, "--pp", "--tp x --cp x --pp must divide --gpus " + std::to_string(gpus) + " (got " +
                                         std::to_string(p.tp.value_or(1)) + " x " + std::to_string(p.cp.value_or(1)) +
                                         " x " + std::to_string(*p.pp) + ")");
  for (const auto& [on, off, name, pin] :
       {std::tuple{o.embedding_in_split, o.no_embedding_in_split, "embedding", &p.account_for_embedding_in_pipeline_split},
        std::tuple{o.loss_in_split, o.no_loss_in_split, "loss", &p.account_for_loss_in_pipeline_split}}) {
    const std::string flag = std::string("--account-for-") + name + "-in-pipeline-split";
    if (on && off)
      fail_input(kCommandLine, flag, "expected one of " + flag + " and --no-" + flag.substr(2) + " (got both)");
    if (on || off) *pin = on;
    if (on && p.pp && *p.pp == 1)
      fail_input(kCommandLine, flag, "needs --pp > 1: it decides how a pipeline splits the layers (got --pp 1)");
  }
  if (p.virtual_stages && *p.virtual_stages > 1 && p.pp && *p.pp == 1)
    fail_input(kCommandLine, "--virtual-stages", "needs --pp > 1: virtual stages are chunks of a pipeline stage (got --pp 1)");
  if (p.dp && gpus % *p.dp != 0)
    fail_input(kCommandLine, "--dp", "must divide --gpus " + std::to_string(gpus) + " (got " + std::to_string(*p.dp) + ")");
  if (p.dp && gpus % (int64_t{*p.dp} * p.tp.value_or(1) * p.cp.value_or(1) * p.pp.value_or(1)) != 0)
    fail_input(kCommandLine, "--dp", "--tp x --cp x --pp x --dp must divide --gpus " + std::to_string(gpus) + " (got " +
                                         std::to_string(p.tp.value_or(1)) + " x " + std::to_string(p.cp.value_or(1)) +
                                         " x " + std::to_string(p.pp.value_or(1)) + " x " + std::to_string(*p.dp) + ")");
  if (p.dp && p.tp && p.cp && p.pp && int64_t{*p.tp} * *p.cp * *p.pp * *p.dp != gpus)
    fail_input(kCommandLine, "--dp", "--tp x --cp x --pp x --dp must be --gpus " + std::to_string(gpus) + " (got " +
                                         std::to_string(*p.tp) + " x " + std::to_string(*p.cp) + " x " +
                                         std::to_string(*p.pp) + " x " + std::to_string(*p.dp) + ")");
  if (p.tp && p.cp && gpus % (int64_t{*p.tp} * *p.cp) != 0)
    fail_input(kCommandLine, "--cp", "--tp x --cp must divide --gpus " + std::to_string(gpus) + " (got " +
                                         std::to_string(*p.tp) + " x " + std::to_string(*p.cp) + ")");
  return r;
}

Plan plan_job_for_target(Planner& planner, const ResolvedJob& r, const JobOptions& o, Job job,
                         const std::string& target_name, const std::string& where) {
  const ExportTarget target = parse_export_target(target_name, where, "target");
  if (!o.grad_reduce_in_fp32 && !o.grad_reduce_in_bf16)
    job.grad_reduce_in_fp32 = framework_grad_reduce_in_fp32(target_framework(target));
  return plan_for_target(planner, job, r.pins, target, r.model, r.topology.gpus_per_node, where);
}

}  // namespace rm::cli
