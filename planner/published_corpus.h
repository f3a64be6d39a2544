// The corpus of published measurements: validation/published.yaml (schema and sources in
// validation/README.md), one entry per figure a real training run or attention benchmark
// published, with the configuration exactly as its source ran it. It is what
// `ringmaster validate --published` holds the uncalibrated predictions to (DESIGN.md,
// "Prediction accuracy").
//
// The reader is strict, like the spec readers: every entry has exactly the schema's keys
// (`assumed` optional), each of the right type and range, so a typo or a missing field never
// turns into a silent default. Errors are InputError naming the file, the line, the entry's
// id and the field:
//   validation/published.yaml:39: llmfoundry-a100-mpt7b-2k.micro_batch: expected a whole
//   number in [1, 1e+09] (got 'six')
// Fields a source does not state are null where the schema allows it (micro_batch,
// global_batch, sharding, checkpointing): std::nullopt here.
//
// The shipped corpus is compiled into the binary (planner/embed_corpus.cmake), so the
// command works from any folder; a file of one's own replaces it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/topology.h"

namespace rm {

// Context-parallel kinds as the schema spells them (`cp_kind`).
enum class CpKind { kNone, kRing, kZigzag, kStriped, kAllGather, kA2a, kA2aP2p };
enum class Precision { kBf16, kFp16, kFp8 };
enum class Metric { kTokensPerSPerGpu, kIterationsPerS, kMfu, kTflopsPerGpu, kGibPerGpu };
enum class Split { kFit, kHeldout };

// The schema's spellings ("none", "ring", "all_gather", "a2a+p2p"; "tokens_per_s_per_gpu";
// "fit", "heldout"...).
const char* to_string(CpKind v);
const char* to_string(Precision v);
const char* to_string(Metric v);
const char* to_string(Split v);

struct PublishedEntry {
  std::string id;         // unique kebab-case name
  std::string location;   // "<file>:<line>" of the entry, for messages made later
  std::string source;     // repository + path + commit + row, or paper + section + table
  std::string gpu;        // a100-80gb, a100-40gb, h100-80gb, h100-96gb, h800, h200, b200, gb200
  std::string cluster;    // the machine as the source describes it
  std::string model;      // a shipped model name (or a model YAML path)
  int gpus = 0;           // tp * pp * dp * cp
  int64_t seq_len = 0;    // tokens per sequence (the whole sequence)
  std::optional<int> micro_batch;       // sequences per DP rank per micro-step
  std::optional<int64_t> global_batch;  // sequences per optimizer step
  Workload workload = Workload::kStep;  // kStep or kAttention (one layer's attention)
  Passes passes = Passes::kForwardBackward;
  int cp = 1;
  CpKind cp_kind = CpKind::kNone;       // kNone exactly when cp == 1
  int tp = 1, pp = 1, dp = 1;
  std::optional<Sharding> sharding;
  std::optional<Checkpointing> checkpointing;
  Precision precision = Precision::kBf16;
  // The attention implementation the run used (optional; "" = the one the GPU's curve
  // describes, GpuSpec::attention_curve): a name the GPU's spec prices
  // (GpuSpec::attention_kernels), e.g. llm-foundry's `attn_impl: triton`.
  std::string attention_kernel;
  // The shipped topology that describes the source's cluster (optional; "" = the GPU's
  // default, published_prediction.h), e.g. llama3-h100-roce for the Llama 3 paper's runs.
  std::string topology;
  // Whether the run compiled its model (optional; absent: the framework's own kernels, priced
  // fused). false = torchtitan without --training.compile: eager elementwise kernels
  // (Job::eager_elementwise).
  std::optional<bool> compile;
  // Whether the run compiled its loss with the model (optional, default false; with compile:
  // true): Job::compiled_loss. torchtitan under --compile since its loss is compiled too.
  bool compiled_loss = false;
  // Whether the run's model code repeats K,V to every query head before the attention call
  // (optional, default false; torchtitan's Llama `repeat_kv`): ModelSpec::kv_repeated.
  bool repeat_kv = false;
  // The pipeline schedule the source names (optional, pp > 1 only): false = 1F1B, true =
  // interleaved 1F1B (torchtitan's pipeline_parallel_schedule "1F1B" / "Interleaved1F1B");
  // absent: both are searched.
  std::optional<bool> pp_interleaved;
  // Whether the pipeline split counts the embedding / the head and loss as a layer each
  // (optional, pp > 1 only; PlanChoice's account_for_*_in_pipeline_split, Megatron-Core's
  // flags): the Llama 3 paper's "one layer less" on the first and last stages. Absent:
  // searched both ways.
  std::optional<bool> embedding_in_pipeline_split, loss_in_pipeline_split;
  // Model chunks per pipeline rank where the source gives or implies them (optional, >= 2,
  // interleaved_1f1b only); absent: those of kVirtualStages that cut the model are tried.
  std::optional<int> virtual_stages;
  // Whether the run overlapped its TP collectives with the GEMMs (optional, tp > 1 only;
  // tensor_parallel.h): Megatron-LM's --tp-comm-overlap, torchtitan's AsyncTP. Absent: not
  // overlapped, both frameworks' default.
  bool tp_comm_overlap = false;
  // How fp8 linear layers scale (required with precision fp8, refused otherwise):
  // `tensorwise` (torchao's dynamic tensorwise scaling: torchtitan's float8), `delayed` or
  // `current` (Transformer Engine's delayed and current scaling: Megatron-LM, NeMo,
  // Megatron-Bridge's FP8-CS), linear_precision.h.
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;
  // The framework that ran it (optional): `megatron` (Megatron-LM, NeMo, Megatron-Bridge)
  // or `pytorch` (torchtitan, llm-foundry's Composer, PyTorch DDP / FSDP); absent (any):
  // one the source does not name or neither (data_parallel.h pays_gemm_size_curve).
  Framework framework = Framework::kAny;
  // Gradients accumulated and reduced in fp32 (optional, `grad_reduce_in_fp32`; absent: the
  // framework's default, data_parallel.h framework_grad_reduce_in_fp32): Job::grad_reduce_in_fp32.
  bool grad_reduce_in_fp32 = false;
  // Adam's states as the run kept them (optional keys main_params_dtype,
  // store_param_remainders, exp_avg_dtype, exp_avg_sq_dtype; absent: fp32): Job::optimizer.
  OptimizerStates optimizer;
  bool causal = true;
  Metric metric = Metric::kTokensPerSPerGpu;
  double published = 0;   // the figure as printed, in `metric`'s unit
  std::string definitions;  // what the figure counts (FLOP formula, column)
  Split split = Split::kFit;
  std::string note;
  std::vector<std::string> assumed;  // field names the corpus inferred, not stated
};

struct PublishedCorpus {
  std::string source;  // where it was read from ("validation/published.yaml" when shipped)
  std::vector<PublishedEntry> entries;  // in file order
};

// The project's own timing rather than a published figure: its source begins "ringmaster (own
// measurement" (validation/published.yaml's last section; the script's output is committed).
inline bool own_measurement(const PublishedEntry& e) { return e.source.rfind("ringmaster (own measurement", 0) == 0; }

// The shipped corpus's path in the repository, used as its source in messages.
inline constexpr const char* kShippedCorpusPath = "validation/published.yaml";

// Parses corpus YAML text; `source` names it in messages. Throws InputError.
PublishedCorpus parse_published_corpus(const std::string& yaml_text, const std::string& source);
// The file at `path`, or the shipped corpus when `path` is empty.
PublishedCorpus load_published_corpus(const std::string& path = "");

// The text of validation/published.yaml as built into the binary (generated source).
const char* shipped_corpus_text();

}  // namespace rm
