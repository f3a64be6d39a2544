// A plan: the job a user asked for, the choices the planner made for it, and what the
// planner predicts. Written as plan.yaml by `ringmaster plan -o`, read back by `simulate`,
// `run` and `validate`; it holds everything the simulator and the executor need to
// reproduce the run (the model and topology are named; a user's own spec by path).
//
// Shape letters used throughout ringmaster:
//   N  sequence length (tokens per sequence)   P  ring size (= cp)
//   c  tokens per rank per sequence = N / P    d  head dim
//   h  query heads    h_kv  key/value heads    G  GPUs = tp * cp * dp * pp
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "planner/kernel_efficiency.h"

namespace YAML {
class Node;
}

namespace rm {

class YamlMap;

// kUsp: Megatron's a2a+p2p (unified sequence parallelism): all-to-all over heads inside a
// node (PlanChoice::cp_a2a GPUs, Ulysses), then a p2p ring of cp / cp_a2a GPUs across nodes
// carrying K,V of the h / cp_a2a heads each GPU then holds (usp_plan.h).
enum class Strategy { kRing, kFlashFsdp, kAllGatherCp, kUlysses, kUsp };
// kTwoLevel: the two-level ("double") ring of schedule.h, first spelled "hierarchical";
// Megatron's hierarchical context parallelism is its a2a+p2p, hence the new name.
enum class Schedule { kFlat, kBidirectional, kTwoLevel };
enum class LoadBalance { kContiguous, kStriped, kZigzag };
enum class Checkpointing { kNone, kSelective, kFull };
// What is predicted / run: ring attention alone (forward + backward), one whole layer,
// or a whole training step.
enum class Workload { kAttention, kLayer, kStep };
enum class Passes { kForward, kForwardBackward };
// How float8 linear layers scale their inputs (linear_precision.h): none (bf16 linears),
// torchao's dynamic tensorwise scaling (torchtitan's float8), Transformer Engine's delayed
// scaling (Megatron-LM / NeMo fp8) or its current scaling (Float8CurrentScaling, NeMo's and
// Megatron-Bridge's "FP8-CS").
enum class Fp8Recipe { kNone, kTensorwise, kDelayed, kCurrent };
// A dtype Adam keeps a state in (Megatron-Core's precision-aware optimizer, OptimizerConfig
// main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype; Megatron-LM's --main-params-dtype,
// --exp-avg-dtype, --exp-avg-sq-dtype): fp32, fp16, bf16, or fp8 (scaled per tensor).
enum class StateDtype { kFp32, kFp16, kBf16, kFp8 };
// The training framework a plan is priced for (`plan --target`, the corpus's `framework`):
// where its GEMMs pay the GEMM size curve (data_parallel.h pays_gemm_size_curve). kAny: no
// framework named; kMegatron: Megatron-Core with Transformer Engine (Megatron-LM, NeMo,
// Megatron-Bridge); kPytorch: PyTorch-native stacks (torchtitan, Composer / llm-foundry,
// PyTorch DDP and FSDP).
enum class Framework { kAny, kMegatron, kPytorch };
// Data-parallel sharding of the model states over the cp·dp GPUs of a TP rank (ZeRO,
// Rajbhandari et al. 2020, Sec. 5; memory_model.h has the bytes, cost_model.h the
// collectives): kDdp replicates all (one gradient all-reduce per step); kZero1 shards the
// optimizer states (Megatron's --use-distributed-optimizer: grads reduce-scattered and
// params all-gathered once per step); kZero2 shards grads too (reduce-scatter per
// micro-step), params held whole, so no backward all-gather: FSDP2's
// reshard_after_forward=False priced per step; kFsdp (ZeRO-3) shards params as well
// (all-gather per unit forward and backward, per micro-step); kHsdp is FSDP inside each
// node's GPUs of a TP rank, replicated across nodes (torchtitan's data_parallel_shard_degree
// x data_parallel_replicate_degree; an all-reduce of the gradient shards once per step).
// kNone is the published corpus's "no data parallelism" (dp 1); no plan has it.
enum class Sharding { kNone, kDdp, kZero1, kZero2, kFsdp, kHsdp };

// The context-parallel kind of a plan as Megatron-LM's --cp-comm-type spells it: "p2p"
// (the ring), "all_gather" (Llama 3's all-gather of K,V), "a2a" (Ulysses, all-to-all over
// heads), "a2a+p2p" (all-to-all inside a node, ring across). The strategy a kind is priced
// and scheduled as: p2p = kRing, all_gather = kAllGatherCp, a2a = kUlysses, a2a+p2p = kUsp;
// flash-fsdp (cp = 1) has none ("none").
const char* cp_comm_type(Strategy v);
// Throws InputError naming `where` and `field`.
Strategy parse_cp_comm_type(const std::string& s, const std::string& where, const std::string& field);

// Canonical spellings used on the command line, in YAML and in JSON
// ("ring", "flash-fsdp", "allgather-cp", "ulysses", "usp"; "flat", "bidirectional",
// "two-level" (the old "hierarchical" is still read); "contiguous", "striped", "zigzag";
// "none", "selective", "full";
// "attention", "layer", "step"; "forward", "forward-backward").
const char* to_string(Strategy v);
const char* to_string(Schedule v);
const char* to_string(LoadBalance v);
const char* to_string(Checkpointing v);
const char* to_string(Workload v);
const char* to_string(Passes v);
const char* to_string(Sharding v);  // "ddp", "zero1", "zero2", "fsdp", "hsdp" ("none")
const char* to_string(Framework v);  // "any", "megatron", "pytorch"
const char* to_string(Fp8Recipe v);  // "tensorwise", "delayed", "current" ("none")
const char* to_string(StateDtype v);  // "fp32", "fp16", "bf16", "fp8"
// Parse; throw InputError naming `where` and `field` and listing the valid spellings.
Strategy parse_strategy(const std::string& s, const std::string& where, const std::string& field);
Schedule parse_schedule(const std::string& s, const std::string& where, const std::string& field);
// The two-level ring's first spelling, still accepted (the CLI notes the new one).
inline constexpr const char* kOldTwoLevelSpelling = "hierarchical";
LoadBalance parse_load_balance(const std::string& s, const std::string& where, const std::string& field);
Checkpointing parse_checkpointing(const std::string& s, const std::string& where, const std::string& field);
Workload parse_workload(const std::string& s, const std::string& where, const std::string& field);
Passes parse_passes(const std::string& s, const std::string& where, const std::string& field);
// A plan's sharding: ddp, zero1, zero2, fsdp or hsdp ("none" is refused).
Sharding parse_sharding(const std::string& s, const std::string& where, const std::string& field);
Framework parse_framework(const std::string& s, const std::string& where, const std::string& field);
// An fp8 recipe: tensorwise, delayed or current ("none" is refused).
Fp8Recipe parse_fp8_recipe(const std::string& s, const std::string& where, const std::string& field);
// An optimizer state's dtype: fp32, fp16, bf16 or fp8; `main_params` (the master copy):
// fp32 or fp16 only, Megatron-LM's choices.
StateDtype parse_state_dtype(const std::string& s, const std::string& where, const std::string& field,
                             bool main_params = false);

// Adam's states as the optimizer keeps them (memory_model.h optimizer_state_bytes), in
// Megatron-Core's OptimizerConfig terms (--use-precision-aware-optimizer): the master params
// in main_params_dtype (fp32 or fp16), or as the 16 bits of the fp32 master that the bf16
// param lacks (store_param_remainders: Transformer Engine's FusedAdam under the
// precision-aware optimizer, apex's DistributedFusedAdam under NeMo's bf16 O2), and the two
// moments in exp_avg_dtype and exp_avg_sq_dtype. Default: fp32 all, ZeRO's 12 bytes a
// parameter (Megatron-LM's without the precision-aware optimizer, torchtitan's, FSDP's).
// Plan files, the corpus and the command line use these names.
struct OptimizerStates {
  StateDtype main_params_dtype = StateDtype::kFp32;
  bool store_param_remainders = false;
  StateDtype exp_avg_dtype = StateDtype::kFp32;
  StateDtype exp_avg_sq_dtype = StateDtype::kFp32;
};
// A plan file's or a corpus entry's optimizer-state keys (main_params_dtype,
// store_param_remainders, exp_avg_dtype, exp_avg_sq_dtype; each optional, fp32 / false).
// Throws InputError naming the key: a bad dtype, or remainders of a master not in fp32.
OptimizerStates read_optimizer_states(const YamlMap& m);

// What the user asked for.
struct Job {
  std::string model;     // shipped name or path to a model YAML
  std::string topology;  // shipped name or path to a topology YAML
  int gpus = 0;
  int64_t seq_len = 0;
  int64_t batch_tokens = 0;  // global batch per optimizer step; 0 = default (2M tokens)
  // The global batch in sequences, whatever their length (Megatron's --global-batch-size);
  // when > 0 it is the batch and batch_tokens is not read (sequences_per_step).
  int64_t batch_sequences = 0;
  bool causal = true;
  Workload workload = Workload::kStep;
  Passes passes = Passes::kForwardBackward;
  // The attention implementation the run will use (kernel_efficiency.h); other than the one
  // the GPU's curve describes (GpuSpec::attention_curve) it is priced by the GPU's factor for
  // it (apply_attention_kernel, which also names the curve's own for "").
  std::string attention_kernel = kDefaultAttentionKernel;
  // The layers' elementwise ops run as PyTorch's eager kernels, one per op with fp32
  // upcasts (torchtitan without torch.compile; attention_work.h ElementwiseBytes): set by
  // `validate --published` from an entry's `compile: false`; plans otherwise price them fused.
  bool eager_elementwise = false;
  // Float8 linear layers and their scaling recipe (linear_precision.h): the GEMMs at the
  // GPU's fp8 rate, the casts to fp8 priced as memory-bound work beside them. Set by `plan
  // --fp8 RECIPE` (the plan file's `fp8_recipe`) and by `validate --published` from an
  // entry's `precision: fp8` and `fp8_recipe`; the topology's rate follows through
  // apply_linear_precision.
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;
  // How the run computes its loss (memory_model.h): true, the head's logits and the
  // cross-entropy in chunks of kLogitsChunkTokens (Liger's fused linear cross-entropy, the
  // Ring Attention paper's blockwise loss); false, over the whole micro-step's fp32 logits
  // at once, as torchtitan and Megatron-LM compute it (--no-chunked-loss). Memory only:
  // the same FLOPs and bytes either way.
  bool chunked_loss = true;
  // With chunked_loss false: the whole loss compiled with the model (torch.compile fuses the
  // fp32 upcast, log-softmax and NLL; memory_model.h whole_loss_bytes_per_logit), as
  // torchtitan runs it under --compile since it compiles its loss (--compiled-loss). Memory only.
  bool compiled_loss = false;
  // The framework the plan is priced for: `plan --target` sets it (megatron, or pytorch for
  // torchtitan), `validate --published` from an entry's `framework`; it decides where the
  // GEMM size curve applies (data_parallel.h pays_gemm_size_curve).
  Framework framework = Framework::kAny;
  // The gradients accumulated and reduced in fp32 (Megatron-Core's grad_reduce_in_fp32;
  // Megatron-LM's default with --bf16 unless --grad-reduce-in-bf16, torchtitan's
  // mixed_precision_reduce = "float32"): the reduce-scatters and all-reduces move 4 bytes a
  // gradient, and a plan that holds whole gradients holds them in fp32 (data_parallel.h
  // grad_element_bytes). `plan --target` defaults it to the framework's default; otherwise
  // false, gradients in the GPU's element type (ZeRO's 2 + 2 + 12 bytes a parameter).
  bool grad_reduce_in_fp32 = false;
  // Adam's states as the optimizer keeps them (OptimizerStates).
  OptimizerStates optimizer;
};

// Ring order names: "node-major", "snake" (rail-aware), "searched", "custom".
struct PlanChoice {
  Strategy strategy = Strategy::kRing;
  // Tensor-parallel degree (with sequence parallelism, tensor_parallel.h): each ring
  // position is a TP group of tp GPUs on one node; Megatron's --tensor-model-parallel-size.
  int tp = 1;
  // tp > 1 only: each TP all-gather pipelined with the GEMM it feeds and each reduce-scatter
  // with the GEMM that produces it, in tp chunks (tensor_parallel.h); Megatron-LM's
  // --tp-comm-overlap, torchtitan's enable_async_tensor_parallel. false: waited at once.
  bool tp_comm_overlap = false;
  int cp = 1;  // ring size P
  int dp = 1;  // data-parallel (FSDP) degree; tp * cp * dp * pp == gpus
  Schedule schedule = Schedule::kFlat;
  std::string order_name = "node-major";
  // A permutation of all G GPU ids; ring k is order[k*cp .. (k+1)*cp). The GPU at
  // order[k*cp + i] holds ring position i of ring k. With tp > 1 there are tp·dp rings,
  // ring d·tp + t being TP rank t of replica d (tensor_parallel.h's tp_order).
  std::vector<int> order;
  LoadBalance load_balance = LoadBalance::kZigzag;
  int block_q = 128;      // query tile of the blockwise kernel
  int block_kv = 128;     // key/value tile of the blockwise kernel
  int kv_subblocks = 1;   // each ring transfer split into this many messages
  Checkpointing checkpointing = Checkpointing::kNone;
  int grad_accum = 1;     // micro-steps per optimizer step
  // Sequences each ring processes per micro-step (step workloads; Megatron-LM's
  // --micro-batch-size, torchtitan's local_batch_size): FSDP gathers and scatters each
  // layer once per micro-step, so more sequences per micro-step amortise them, at the
  // cost of that many sequences' stored activations.
  int micro_batch = 1;
  // a2a+p2p (kUsp) only: the all-to-all degree inside a node, Megatron's first
  // --hierarchical-context-parallel-sizes entry; the ring spans cp / cp_a2a GPUs. 1 otherwise.
  int cp_a2a = 1;
  // How the model states are sharded over the data-parallel GPUs (each TP rank's cp·dp);
  // kHsdp shards inside a node (hsdp_shard_degree) and replicates across.
  Sharding sharding = Sharding::kFsdp;
  // hsdp only: torchtitan's data_parallel_shard_degree, the replicas (dp) whose cp·dp_shard
  // GPUs of a TP rank form one shard group; data_parallel_replicate_degree = dp / dp_shard.
  // 1 otherwise.
  int dp_shard = 1;
  // Pipeline-parallel degree (pipeline_parallel.h; Megatron's --pipeline-model-parallel-size,
  // torchtitan's pipeline_parallel_degree): tp·cp·dp·pp = G, stages outermost in the rank
  // order (tp-cp-dp-pp), so `order` is tp_order(tp, cp, dp·pp) when pp > 1. Step workloads
  // only; grad_accum is then the micro-batches per pipeline per step.
  int pp = 1;
  // Model chunks per pipeline rank: 1 = 1F1B, > 1 = interleaved 1F1B (Megatron's
  // --num-virtual-stages-per-pipeline-rank).
  int virtual_stages = 1;
  // Whether the pipeline split counts the input embedding, and the output head with the
  // loss, as one layer each (pipeline_parallel.h's PipelineLayout; Megatron-Core's
  // account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split,
  // torchtitan's pipeline_parallel_first_stage_less_layers / _last_stage_less_layers = 1).
  // pp > 1 only.
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
};

// How a plan's context-parallel ranks exchange K,V, in words (the headers of run, train and
// simulate, sweep's progress): "no context parallelism", "flat ring", "all_gather (K,V
// gathered around the ring, dK,dV reduce-scattered)", "a2a+p2p 8x2 (...)"...
std::string cp_exchange_text(const PlanChoice& c);
// a2a+p2p's split as Megatron's --hierarchical-context-parallel-sizes: "8x2" (a2a degree x
// ring size).
std::string usp_split_text(const PlanChoice& c);
// Whether K,V pass around a ring that has a schedule and K,V sub-blocks (p2p, or a2a+p2p's
// ring across nodes): not at cp 1, where there is no context parallelism. Whether the plan
// has a load balance: a2a's GPUs each attend over whole sequences (for their heads), where
// all_gather splits its queries in zigzag chunks. A plan without one keeps the field as the
// search left it (Megatron keeps --cp-comm-type at CP 1); reports print "-".
bool has_ring_schedule(const PlanChoice& c);
bool has_load_balance(const PlanChoice& c);
// What a plan's group of GPUs that holds one sequence is called: "ring" (p2p, a2a+p2p),
// "CP group" (all_gather, a2a) or, at cp 1, "data-parallel replica".
const char* cp_group_noun(const PlanChoice& c);

// Sequences each ring runs through a layer per micro-step: the plan's micro-batch for a
// step workload, one otherwise (the cost model, the schedule generator and the GEMM size
// curve all count the micro-step this way).
inline int micro_step_sequences(const Job& job, const PlanChoice& ch) {
  return job.workload == Workload::kStep ? (ch.micro_batch > 1 ? ch.micro_batch : 1) : 1;
}

struct MemoryBreakdown {  // bytes per GPU
  double model_states = 0;     // sharded params, grads, optimizer states
  double layer_buffers = 0;    // unsharded (all-gathered) layer params and grads
  double activations = 0;      // stored for the backward pass, all layers
  // Of the activations: a PyTorch pipeline stage's receive buffers, one per micro-batch for
  // its input and its output gradient, held all step (pipeline_stage_buffers).
  double pipeline_buffers = 0;
  double working_set = 0;      // one layer's peak transient buffers (ring buffers, tiles...)
  double runtime_reserve = 0;  // CUDA context, NCCL buffers
  // PyTorch's caching allocator's cached blocks on top of the tensors' peak
  // (memory_model.h kAllocatorCacheFraction). Not part of total(): the allocator frees
  // them and retries before it fails, so they never decide a fit.
  double allocator_cache = 0;
  // What the tensors hold at their peak (torch.cuda.max_memory_allocated).
  double live() const { return model_states + layer_buffers + activations + working_set; }
  // What the plan needs: the tensors' peak and the runtime's reserve (decides the fit).
  double total() const { return live() + runtime_reserve; }
  // What the caching allocator holds at its peak (torch.cuda.max_memory_reserved).
  double allocator_reserved() const { return live() + allocator_cache; }
};

struct Prediction {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double comm_overhead = 0;  // fraction of the step in which communication is exposed
  double memory_bytes_per_gpu = 0;
  bool fits = false;
  // Throughput over the throughput of the same GPUs with free communication
  // (= compute-only step time / step time).
  double scaling_efficiency = 0;
  MemoryBreakdown memory;
  // Breakdown of step_time_s (seconds).
  double attention_compute_s = 0;
  double linear_compute_s = 0;
  double exposed_comm_s = 0;
  double fsdp_exposed_s = 0;
  double tp_comm_s = 0;  // tensor-parallel all-gathers and reduce-scatters (unhidden)
  double pp_bubble_s = 0;  // pipeline fill and drain (pipeline_parallel.h); 0 when pp = 1
  double pp_p2p_s = 0;     // pipeline stage-to-stage transfers (exposed)
  // Of exposed_comm_s: the p2p ring's later steps waiting for the ring's slowest kernel
  // (CostParams::lockstep_jitter, straggler.h); 0 without a jitter.
  double lockstep_wait_s = 0;
  double overlap_threshold_tokens = 0;  // c >= F/B on the ring's bottleneck link
  std::string why_not;  // set when !fits or the plan is infeasible: the reason, for people
};

struct Baseline {
  Strategy strategy;
  bool feasible = true;  // false when the strategy cannot run this job at all (heads, ...)
  bool fits = false;
  double memory_bytes_per_gpu = 0;
  double tokens_per_s = 0;
  double step_time_s = 0;
  int cp = 1, dp = 1;
  Checkpointing checkpointing = Checkpointing::kNone;
  int micro_batch = 1;
  std::string why_not;
};

struct Plan {
  Job job;
  PlanChoice choice;
  Prediction predicted;
  std::vector<Baseline> baselines;
  // Set by Planner::plan when the pick has tp > 1 (unpinned): the best plan with tp = 1,
  // what tensor parallelism is measured against. JSON "without_tp"; not in plan.yaml.
  std::optional<Baseline> without_tp;
};

// plan.yaml round trip. read_plan throws InputError naming the file and field.
void write_plan_yaml(const Plan& plan, const std::string& path);  // temp file + rename
Plan read_plan_yaml(const std::string& path);
// The same from text already read; `source` names it in messages.
Plan parse_plan_yaml(const std::string& yaml_text, const std::string& source);
std::string plan_to_yaml_string(const Plan& plan);

// The JSON object `plan` prints and `sweep` lists (a contract; see README):
// schema_version, model, topology, gpus, seq_len, plan{...}, predicted{...}, baselines[...].
// Schema 2 added, beside the existing keys (unchanged): plan.cp_comm_type, plan.tp,
// plan.pp, plan.sharding, plan.virtual_stages (and predicted.pp_bubble_s, pp_p2p_s). The
// planner prices tp >= 1 (with sequence parallelism), pp >= 1 with virtual stages
// (pipeline_parallel.h) and every sharding level over each stage's TP rank's cp·dp GPUs
// ("ddp", "zero1", "zero2", "fsdp", "hsdp"); plan.yaml carries the same keys and refuses
// other values (a plan without `sharding` is fsdp, as every plan was before).
inline constexpr int kPlanSchemaVersion = 2;
nlohmann::json plan_to_json(const Plan& plan);

}  // namespace rm
