#include "planner/published_prediction.h"

#include <algorithm>
#include <cctype>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/linear_precision.h"
#include "planner/pipeline_parallel.h"
#include "planner/plan_loader.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "planner/units.h"

namespace rm {

namespace {

// The shipped topologies for each corpus GPU: `one_node` when the run fits in it, else
// `multi_node`; `none` says why a GPU has none.
struct GpuTopologies {
  const char* gpu;
  const char* one_node;
  const char* multi_node;
  const char* none;
};
const GpuTopologies kGpuTopologies[] = {
    {"a100-80gb", "a100-nvlink-box", "dgx-a100-ib", ""},
    {"a100-40gb", "dgx-a100-40gb-ib", "dgx-a100-40gb-ib", ""},
    {"h100-80gb", "dgx-h100-ib", "dgx-h100-ib", ""},
    {"h200", "dgx-h200-ib", "dgx-h200-ib", ""},
    {"h800", "h800-nvlink-box", "", "no multi-node H800 topology"},
    {"h100-96gb", "grand-teton-h100-96gb", "grand-teton-h100-96gb", ""},
    {"b200", "dgx-b200-ib", "dgx-b200-ib", ""},
    {"gb200", "dgx-gb200-nvl72", "dgx-gb200-nvl72", ""},
};

// The kernel papers' backward FLOPs over forward FLOPs (FlashAttention-2/3 benchmarks, as
// validation/README.md records): the sources' accounting, not the model's time ratio.
constexpr double kKernelPaperBackwardFlops = 2.5;

// Formulas as the corpus's `definitions` write them, spaces removed, lower case.
struct ConventionText {
  const char* text;
  FlopConvention convention;
};
const ConventionText kConventionTexts[] = {
    {"12*layers*hidden*seqlen^2", FlopConvention::kMegatron},
    {"12*l*d*s", FlopConvention::kMegatron},
    {"4*seqlen^2*head_dim*heads", FlopConvention::kAttentionKernel},
    {"4*seq^2*d*heads", FlopConvention::kAttentionKernel},
};

// The topology for the entry's GPU and size, or "" with the reason added.
std::string topology_for(const PublishedEntry& e, std::vector<std::string>& why) {
  if (!e.topology.empty()) {  // the entry names its cluster
    int max = 0;
    try {
      max = load_topology(e.topology).max_gpus();
    } catch (const InputError& bad) {
      throw InputError(e.location + ": " + e.id + ".topology: " + bad.what());
    }
    if (e.gpus <= max) return e.topology;
    why.push_back(std::to_string(e.gpus) + " GPUs: more than the " + std::to_string(max) + " of topology " +
                  e.topology);
    return "";
  }
  for (const GpuTopologies& g : kGpuTopologies) {
    if (e.gpu != g.gpu) continue;
    if (*g.one_node && e.gpus <= load_topology(g.one_node).max_gpus()) return g.one_node;
    if (*g.multi_node) {
      const int max = load_topology(g.multi_node).max_gpus();
      if (e.gpus <= max) return g.multi_node;
      why.push_back(std::to_string(e.gpus) + " GPUs: more than the " + std::to_string(max) + " of topology " +
                    g.multi_node);
      return "";
    }
    why.push_back(g.none);
    return "";
  }
  why.push_back("no topology for gpu " + e.gpu);
  return "";
}

}  // namespace

std::optional<std::string> corpus_gpu_type(const GpuSpec& gpu) {
  for (const GpuTopologies& g : kGpuTopologies)
    if (same_gpu_spec(load_topology(g.one_node).gpu, gpu)) return g.gpu;
  return std::nullopt;
}

namespace {

// Everything about the entry the planner cannot express yet.
std::vector<std::string> unexpressible(const PublishedEntry& e) {
  std::vector<std::string> why;
  const bool step = e.workload == Workload::kStep;
  if (e.cp_kind == CpKind::kA2aP2p) why.push_back(std::string("cp_kind ") + to_string(e.cp_kind));
  if (step && e.dp > 1 && e.sharding == Sharding::kNone)
    why.push_back("sharding none with dp " + std::to_string(e.dp) + " (data parallelism shards or replicates)");
  if (step && !e.checkpointing) why.push_back("checkpointing not stated");
  if (!step && e.metric == Metric::kGibPerGpu) why.push_back("memory of an attention call alone");
  if (e.metric == Metric::kTflopsPerGpu || e.metric == Metric::kMfu) {
    const auto conv = flop_convention(e.definitions);
    if (!conv) {
      why.push_back("FLOP formula not stated in definitions");
    } else if ((*conv == FlopConvention::kMegatron) != step) {
      why.push_back(std::string("FLOP formula for ") + (step ? "attention kernels" : "whole models") +
                    " on a " + to_string(e.workload) + " figure");
    }
  }
  return why;
}

// Defaults for what a step's source does not state; the figures barely depend on them.
std::vector<std::string> assumptions(const PublishedEntry& e) {
  std::vector<std::string> out;
  if (e.workload != Workload::kStep) return out;
  if (!e.global_batch) out.push_back("global batch 2M tokens, the planner's default (not stated)");
  if (e.dp > 1 && !e.sharding) out.push_back("FSDP (sharding not stated)");
  if (std::find(e.assumed.begin(), e.assumed.end(), "definitions") != e.assumed.end())
    out.push_back("the FLOP formula in definitions (the source states none)");
  return out;
}

LoadBalance load_balance_of(CpKind k) {
  switch (k) {
    case CpKind::kZigzag:
      return LoadBalance::kZigzag;
    case CpKind::kStriped:
      return LoadBalance::kStriped;
    default:
      return LoadBalance::kContiguous;  // ring, and cp 1
  }
}

// The source's FLOPs of one predicted step (all GPUs).
double source_flops(const PublishedEntry& e, const ModelSpec& m, const Plan& plan) {
  if (*flop_convention(e.definitions) == FlopConvention::kMegatron)
    return static_cast<double>(sequences_per_step(plan.job)) * megatron_flops_per_sequence(m, e.seq_len);
  return static_cast<double>(e.dp) * attention_kernel_flops_per_sequence(m, e.seq_len, e.causal, e.passes);
}

double metric_value(const PublishedEntry& e, const ModelSpec& m, const Topology& topo, const Plan& plan) {
  const Prediction& p = plan.predicted;
  switch (e.metric) {
    case Metric::kTokensPerSPerGpu:
      return p.tokens_per_s / e.gpus;
    case Metric::kIterationsPerS: {
      const int calls = e.workload == Workload::kAttention ? e.micro_batch.value_or(1) : 1;
      return 1.0 / (p.step_time_s * calls);
    }
    case Metric::kTflopsPerGpu:
      return source_flops(e, m, plan) / (p.step_time_s * e.gpus) / kTera;
    case Metric::kMfu:
      return 100.0 * source_flops(e, m, plan) / (p.step_time_s * e.gpus) / topo.gpu.peak_flops;
    case Metric::kGibPerGpu:
      // The memory figures the corpus holds are the caching allocator's peak reserve
      // (torchtitan logs reserved_bytes.all.peak): no CUDA context, no NCCL buffers.
      return p.memory.allocator_reserved() / kGiB;
  }
  return 0;
}

// The pinned plan, through the planner's pin path. An attention benchmark holds no model,
// so the planner's step memory says nothing about it: there the fastest tiles win, fit or
// not (best_plan would take the least-memory tiles of a plan that does not fit).
Plan pinned_plan(Planner& planner, const Job& job, SearchPins pins) {
  if (job.workload != Workload::kAttention) return planner.best_plan(job, pins);
  std::optional<Plan> best;
  for (int bq : kTileSizes) {
    for (int bkv : kTileSizes) {
      pins.block_q = bq;
      pins.block_kv = bkv;
      try {
        Plan p = planner.best_plan(job, pins);
        if (!best || p.predicted.tokens_per_s > best->predicted.tokens_per_s) best = std::move(p);
      } catch (const InputError&) {
        // This tile cannot run; another may.
      }
    }
  }
  if (best) return *best;
  pins.block_q.reset();
  pins.block_kv.reset();
  return planner.best_plan(job, pins);  // no tile runs: the planner's reasons
}

}  // namespace

std::optional<FlopConvention> flop_convention(const std::string& definitions) {
  std::string s;
  for (char c : definitions)
    if (!std::isspace(static_cast<unsigned char>(c))) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const ConventionText& t : kConventionTexts)
    if (s.find(t.text) != std::string::npos) return t.convention;
  return std::nullopt;
}

double megatron_flops_per_sequence(const ModelSpec& m, int64_t seq_len) {
  const double n = static_cast<double>(seq_len);
  const double params = m.layers * m.layer_params() + static_cast<double>(m.vocab) * m.hidden;
  return 6.0 * n * params + 12.0 * m.layers * m.hidden * n * n;
}

double attention_kernel_flops_per_sequence(const ModelSpec& m, int64_t seq_len, bool causal, Passes passes) {
  const double n = static_cast<double>(seq_len);
  const double forward = 4.0 * n * n * m.head_dim * m.heads * (causal ? 0.5 : 1.0);
  return forward * (passes == Passes::kForward ? 1.0 : 1.0 + kKernelPaperBackwardFlops);
}

PublishedCheck check_published(const PublishedEntry& e) {
  PublishedCheck r;
  r.not_modelled = unexpressible(e);
  r.topology = topology_for(e, r.not_modelled);
  ModelSpec model;
  try {
    model = load_model(e.model);
  } catch (const InputError& bad) {
    throw InputError(e.location + ": " + e.id + ".model: " + bad.what());
  }
  if (!r.not_modelled.empty()) return r;
  r.assumed = assumptions(e);
  model.kv_repeated = e.repeat_kv;

  Topology topo = load_topology(r.topology);
  std::string kernel = e.attention_kernel;
  try {
    apply_attention_kernel(topo, kernel, e.location, e.id + ".attention_kernel");
  } catch (const InputError&) {
    r.not_modelled.push_back("attention kernel " + kernel + ": topology " + r.topology + " has no constant for it");
    return r;
  }
  if (e.precision == Precision::kFp8) {
    try {
      apply_linear_precision(topo, LinearPrecision::kFp8, e.location, e.id + ".precision");
    } catch (const InputError&) {
      r.not_modelled.push_back("fp8 linear layers: topology " + r.topology + " has no fp8 rate");
      return r;
    }
  }
  std::unique_ptr<Fabric> fabric;
  CostParams cost;
  build_fabric_and_costs(topo, e.gpus, "", fabric, cost);
  Planner planner(model, *fabric, cost);

  Job job;
  job.model = e.model;
  job.topology = r.topology;
  job.gpus = e.gpus;
  job.seq_len = e.seq_len;
  job.causal = e.causal;
  job.workload = e.workload;
  job.passes = e.passes;
  job.attention_kernel = kernel;
  job.eager_elementwise = e.compile.has_value() && !*e.compile;
  job.fp8_recipe = e.fp8_recipe;
  job.framework = e.framework;
  job.grad_reduce_in_fp32 = e.grad_reduce_in_fp32;
  job.optimizer = e.optimizer;
  // Every framework of the corpus takes the loss over whole fp32 logits (torchtitan,
  // Megatron-LM / NeMo, llm-foundry's Composer, the papers' PyTorch runs): memory only.
  job.chunked_loss = false;
  job.compiled_loss = e.compiled_loss;
  if (e.workload == Workload::kAttention) job.batch_tokens = e.seq_len * e.dp;
  else if (e.global_batch) job.batch_tokens = *e.global_batch * e.seq_len;

  SearchPins pins;
  pins.cp = e.cp;
  pins.cp_comm_type = e.cp_kind == CpKind::kAllGather ? Strategy::kAllGatherCp
                      : e.cp_kind == CpKind::kA2a     ? Strategy::kUlysses
                                                      : Strategy::kRing;
  if (pins.cp_comm_type == Strategy::kRing) {  // the ring's own choices
    pins.schedule = Schedule::kFlat;
    pins.order = "node-major";
    pins.load_balance = load_balance_of(e.cp_kind);
    pins.kv_subblocks = 1;
  }
  pins.checkpointing = e.checkpointing.value_or(Checkpointing::kNone);
  pins.tp = e.tp;  // as the source ran it (tensor_parallel.h): tp 1 is not searched past
  if (e.tp > 1) pins.tp_comm_overlap = e.tp_comm_overlap;  // likewise its TP overlap
  // The stated sharding level (data_parallel.h); unstated, FSDP (assumptions() says so).
  pins.sharding = e.sharding && *e.sharding != Sharding::kNone ? *e.sharding : Sharding::kFsdp;
  pins.pp = e.pp;  // likewise its pipeline (pipeline_parallel.h) and its split where stated
  pins.account_for_embedding_in_pipeline_split = e.embedding_in_pipeline_split;
  pins.account_for_loss_in_pipeline_split = e.loss_in_pipeline_split;
  // 1F1B, interleaved (each virtual stage count that cuts, the faster kept), or both tried.
  std::vector<std::optional<int>> virtual_stages{std::nullopt};
  if (e.pp_interleaved == false) virtual_stages = {1};
  if (e.pp_interleaved == true) {
    virtual_stages.clear();
    for (int v : kVirtualStages)
      if (v > 1) virtual_stages.push_back(v);
  }
  if (e.virtual_stages) virtual_stages = {*e.virtual_stages};
  // A step's micro-batch as the source ran it (unstated: the planner's pick); an attention
  // call over several sequences is priced as that many one-sequence calls (metric_value).
  if (e.workload != Workload::kStep) pins.micro_batch = 1;
  else if (e.micro_batch) pins.micro_batch = *e.micro_batch;
  std::string refusal;
  bool priced = false;
  for (const std::optional<int>& v : virtual_stages) {
    pins.virtual_stages = v;
    try {
      const Plan p = pinned_plan(planner, job, pins);
      if (!priced || better_pick(p.predicted, r.plan.predicted)) r.plan = p;
      priced = true;
    } catch (const InputError& refused) {
      if (refusal.empty()) refusal = refused.what();
    }
  }
  if (!priced) {
    r.not_modelled.push_back("the planner refuses the pinned plan: " + refusal);
    return r;
  }
  if (!pins.micro_batch)
    r.assumed.insert(r.assumed.begin(), "micro_batch " + std::to_string(r.plan.choice.micro_batch) +
                                            ", the planner's pick (not stated)");
  r.modelled = true;
  r.predicted = metric_value(e, model, topo, r.plan);
  r.error = (e.published - r.predicted) / r.predicted;
  // The planner and the fabric are done with these (the fabric holds its own topology).
  r.model = std::move(model);
  r.priced_topology = std::move(topo);
  r.cost = std::move(cost);
  return r;
}

}  // namespace rm
