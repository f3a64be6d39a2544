#include "planner/published_corpus.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "planner/data_parallel.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"
#include "planner/kernel_efficiency.h"
#include "planner/yaml_reader.h"

namespace rm {

namespace {

template <typename E>
using Names = std::vector<std::pair<E, const char*>>;

const Names<CpKind> kCpKinds = {{CpKind::kNone, "none"},         {CpKind::kRing, "ring"},
                                {CpKind::kZigzag, "zigzag"},     {CpKind::kStriped, "striped"},
                                {CpKind::kAllGather, "all_gather"}, {CpKind::kA2a, "a2a"},
                                {CpKind::kA2aP2p, "a2a+p2p"}};
const Names<Sharding> kShardings = {{Sharding::kNone, "none"},   {Sharding::kDdp, "ddp"},
                                    {Sharding::kZero1, "zero1"}, {Sharding::kZero2, "zero2"},
                                    {Sharding::kFsdp, "fsdp"},   {Sharding::kHsdp, "hsdp"}};
const Names<Precision> kPrecisions = {
    {Precision::kBf16, "bf16"}, {Precision::kFp16, "fp16"}, {Precision::kFp8, "fp8"}};
const Names<Metric> kMetrics = {{Metric::kTokensPerSPerGpu, "tokens_per_s_per_gpu"},
                                {Metric::kIterationsPerS, "iterations_per_s"},
                                {Metric::kMfu, "mfu"},
                                {Metric::kTflopsPerGpu, "tflops_per_gpu"},
                                {Metric::kGibPerGpu, "gib_per_gpu"}};
const Names<Split> kSplits = {{Split::kFit, "fit"}, {Split::kHeldout, "heldout"}};
// The corpus's own spellings of planner enums (the schema's, not the CLI's).
const Names<Workload> kCorpusWorkloads = {{Workload::kStep, "step"}, {Workload::kAttention, "attention"}};
const Names<Passes> kCorpusPasses = {{Passes::kForward, "forward"},
                               {Passes::kForwardBackward, "forward_backward"}};
const Names<Checkpointing> kCorpusCheckpointings = {{Checkpointing::kNone, "none"},
                                              {Checkpointing::kSelective, "selective"},
                                              {Checkpointing::kFull, "full"}};
const std::vector<std::string> kGpus = {"a100-80gb", "a100-40gb", "h100-80gb", "h100-96gb",
                                        "h800",      "h200",      "b200",      "gb200"};
// Every key of an entry, in schema order (`assumed` names some of the others).
const std::vector<std::string> kEntryKeys = {
    "id",           "source",    "gpu",     "cluster",       "model",     "gpus",   "seq_len",
    "micro_batch",  "global_batch", "workload", "passes",     "cp",        "cp_kind", "tp",
    "pp",           "dp",        "sharding", "checkpointing", "precision", "causal", "metric",
    "published",    "definitions", "split",  "note",          "attention_kernel", "topology", "compile",
    "pp_schedule",  "fp8_recipe", "tp_comm_overlap", "account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split", "virtual_stages", "repeat_kv", "framework",
    "grad_reduce_in_fp32", "compiled_loss", "main_params_dtype", "store_param_remainders", "exp_avg_dtype",
    "exp_avg_sq_dtype"};

template <typename E>
const char* name_of(const Names<E>& names, E v) {
  for (const auto& [value, name] : names)
    if (value == v) return name;
  return "?";
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

template <typename E>
E parse_name(const YamlMap& m, const std::string& key, const Names<E>& names) {
  const std::string s = m.str(key);
  std::vector<std::string> all;
  for (const auto& [value, name] : names) {
    if (s == name) return value;
    all.push_back(name);
  }
  m.fail(key, "expected one of " + joined(all) + " (got '" + s + "')");
}

// A key that must be present but may be null (the source does not say); true when null.
bool is_null(const YAML::Node& entry, const YamlMap& m, const std::string& key) {
  const YAML::Node v = entry[key];
  if (!v.IsDefined()) m.node(key);  // throws: missing (or misspelt)
  if (!v.IsNull()) return false;
  m.has(key);  // marks it known
  return true;
}

bool is_kebab_case(const std::string& s) {
  if (s.empty() || s.front() == '-' || s.back() == '-' || s.find("--") != std::string::npos) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

std::vector<std::string> parse_assumed(const YamlMap& m) {
  std::vector<std::string> out;
  if (!m.has("assumed")) return out;
  const YAML::Node list = m.node("assumed");
  if (!list.IsSequence()) m.fail("assumed", "expected a list of field names (got " + describe_node(list) + ")");
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string name = item.IsScalar() ? item.Scalar() : "";
    if (std::find(kEntryKeys.begin(), kEntryKeys.end(), name) == kEntryKeys.end() || name == "id") {
      m.fail("assumed", "item " + std::to_string(i) + " is " + describe_node(item) +
                            ": expected the name of another field of the entry");
    }
    out.push_back(name);
  }
  return out;
}

// The rules that tie fields together (validation/README.md).
void check_consistency(const YamlMap& m, const PublishedEntry& e) {
  const int64_t product = int64_t{e.tp} * e.pp * e.dp * e.cp;
  if (product != e.gpus) {
    m.fail("gpus", "expected tp * pp * dp * cp = " + std::to_string(e.tp) + " * " + std::to_string(e.pp) +
                       " * " + std::to_string(e.dp) + " * " + std::to_string(e.cp) + " = " +
                       std::to_string(product) + " (got " + std::to_string(e.gpus) + ")");
  }
  if (e.cp == 1 && e.cp_kind != CpKind::kNone)
    m.fail("cp_kind", std::string("expected none when cp is 1 (got ") + to_string(e.cp_kind) + ")");
  if (e.cp > 1 && e.cp_kind == CpKind::kNone)
    m.fail("cp_kind", "expected the context-parallel kind of cp " + std::to_string(e.cp) + " (got none)");
  if (e.micro_batch && e.global_batch && *e.global_batch % (int64_t{e.dp} * *e.micro_batch) != 0) {
    m.fail("global_batch", "expected a multiple of dp * micro_batch = " +
                               std::to_string(int64_t{e.dp} * *e.micro_batch) + " (got " +
                               std::to_string(*e.global_batch) + ")");
  }
}

PublishedEntry parse_entry(const YAML::Node& node, const std::string& source, size_t index) {
  // The id first, named by position; then every field named by the id.
  const YamlMap head(node, source, "entries[" + std::to_string(index) + "]");
  const std::string id = head.str("id");
  if (!is_kebab_case(id)) head.fail("id", "expected a kebab-case name: a-z, 0-9 and '-' (got '" + id + "')");
  const YamlMap m(node, source, id);
  PublishedEntry e;
  e.id = m.str("id");
  e.location = m.location("id");
  e.source = m.str("source");
  e.gpu = m.str("gpu");
  if (std::find(kGpus.begin(), kGpus.end(), e.gpu) == kGpus.end())
    m.fail("gpu", "expected one of " + joined(kGpus) + " (got '" + e.gpu + "')");
  e.cluster = m.str("cluster");
  e.model = m.str("model");
  auto count = [&m](const char* key) { return m.count(key, 1, kMaxGpus); };
  e.gpus = count("gpus");
  e.seq_len = m.integer("seq_len", Range::between(1, kMaxSeqTokens));
  if (!is_null(node, m, "micro_batch")) e.micro_batch = count("micro_batch");
  if (!is_null(node, m, "global_batch")) e.global_batch = m.integer("global_batch", Range::between(1, kMaxBatchTokens));
  e.workload = parse_name(m, "workload", kCorpusWorkloads);
  e.passes = parse_name(m, "passes", kCorpusPasses);
  e.cp = count("cp");
  e.cp_kind = parse_name(m, "cp_kind", kCpKinds);
  e.tp = count("tp");
  e.pp = count("pp");
  e.dp = count("dp");
  if (!is_null(node, m, "sharding")) e.sharding = parse_name(m, "sharding", kShardings);
  if (!is_null(node, m, "checkpointing")) e.checkpointing = parse_name(m, "checkpointing", kCorpusCheckpointings);
  e.precision = parse_name(m, "precision", kPrecisions);
  e.attention_kernel = m.str_or("attention_kernel", "");
  if (m.has("attention_kernel") && !valid_attention_kernel_name(e.attention_kernel))
    m.fail("attention_kernel", "expected a name of a-z, 0-9 and '_' (got '" + e.attention_kernel + "')");
  e.topology = m.str_or("topology", "");
  if (m.has("topology") && (e.topology.empty() ||
                            e.topology.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-_") != std::string::npos))
    m.fail("topology", "expected a shipped topology's name of a-z, 0-9, '-' and '_' (got '" + e.topology + "')");
  e.causal = m.boolean("causal");
  if (m.has("compile")) e.compile = m.boolean("compile");
  e.compiled_loss = m.has("compiled_loss") && m.boolean("compiled_loss");
  if (e.compiled_loss && e.compile != true) m.fail("compiled_loss", "expected only with compile: true");
  if (m.has("repeat_kv")) e.repeat_kv = m.boolean("repeat_kv");
  if (m.has("pp_schedule")) {
    const std::string v = m.str("pp_schedule");
    if (v != "1f1b" && v != "interleaved_1f1b") m.fail("pp_schedule", "expected 1f1b or interleaved_1f1b (got '" + v + "')");
    if (e.pp == 1) m.fail("pp_schedule", "expected only with pp > 1");
    e.pp_interleaved = v == "interleaved_1f1b";
  }
  if (m.has("virtual_stages")) {
    e.virtual_stages = m.count("virtual_stages", 2, kMaxGpus);
    if (e.pp_interleaved != true) m.fail("virtual_stages", "expected only with pp_schedule interleaved_1f1b");
  }
  for (const auto& [key, field] : {std::pair{"account_for_embedding_in_pipeline_split", &e.embedding_in_pipeline_split},
                                   std::pair{"account_for_loss_in_pipeline_split", &e.loss_in_pipeline_split}}) {
    if (!m.has(key)) continue;
    *field = m.boolean(key);
    if (e.pp == 1) m.fail(key, "expected only with pp > 1");
  }
  if (m.has("tp_comm_overlap")) {
    e.tp_comm_overlap = m.boolean("tp_comm_overlap");
    if (e.tp == 1) m.fail("tp_comm_overlap", "expected only with tp > 1");
  }
  if (m.has("framework")) {
    const std::string v = m.str("framework");
    if (v != "megatron" && v != "pytorch") m.fail("framework", "expected megatron or pytorch (got '" + v + "')");
    e.framework = v == "megatron" ? Framework::kMegatron : Framework::kPytorch;
  }
  e.grad_reduce_in_fp32 = m.has("grad_reduce_in_fp32") ? m.boolean("grad_reduce_in_fp32")
                                                         : framework_grad_reduce_in_fp32(e.framework);
  e.optimizer = read_optimizer_states(m);
  if (m.has("fp8_recipe")) {
    e.fp8_recipe = parse_fp8_recipe(m.str("fp8_recipe"), m.location("fp8_recipe"), m.field("fp8_recipe"));
    if (e.precision != Precision::kFp8) m.fail("fp8_recipe", "expected only with precision fp8");
  } else if (e.precision == Precision::kFp8) {
    m.fail("fp8_recipe",
           "expected with precision fp8: tensorwise (torchao), delayed or current (Transformer Engine's scalings)");
  }
  e.metric = parse_name(m, "metric", kMetrics);
  e.published = m.number("published", Range::above_up_to(0, 1e18));  // tokens/s, MFU, seconds
  e.definitions = m.str("definitions");
  e.split = parse_name(m, "split", kSplits);
  e.note = m.str("note");
  e.assumed = parse_assumed(m);
  m.finish();
  check_consistency(m, e);
  return e;
}

}  // namespace

const char* to_string(CpKind v) { return name_of(kCpKinds, v); }
const char* to_string(Precision v) { return name_of(kPrecisions, v); }
const char* to_string(Metric v) { return name_of(kMetrics, v); }
const char* to_string(Split v) { return name_of(kSplits, v); }

PublishedCorpus parse_published_corpus(const std::string& yaml_text, const std::string& source) {
  const YAML::Node doc = load_yaml(yaml_text, source);
  const YamlMap root(doc, source);
  root.integer("version", Range{1, false, 1, false});
  const YAML::Node list = root.node("entries");
  if (!list.IsSequence() || list.size() == 0)
    root.fail("entries", "expected a non-empty list of entries (got " + describe_node(list) + ")");
  root.finish();
  PublishedCorpus corpus;
  corpus.source = source;
  std::map<std::string, std::string> first_seen;  // id -> location
  for (size_t i = 0; i < list.size(); ++i) {
    PublishedEntry e = parse_entry(list[i], source, i);
    const auto [it, inserted] = first_seen.emplace(e.id, e.location);
    if (!inserted) throw InputError(e.location + ": " + e.id + ".id: duplicate id (first at " + it->second + ")");
    corpus.entries.push_back(std::move(e));
  }
  return corpus;
}

PublishedCorpus load_published_corpus(const std::string& path) {
  if (path.empty()) return parse_published_corpus(shipped_corpus_text(), kShippedCorpusPath);
  return parse_published_corpus(read_input_file(path, InputKind::kCorpus), path);
}

}  // namespace rm
