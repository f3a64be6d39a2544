#include "planner/hf_config.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/json_reader.h"

namespace rm {

namespace {

using nlohmann::json;

// model_type -> whether its config class ties the embeddings by default
// (transformers' LlamaConfig, MistralConfig, Qwen2Config: False; GemmaConfig: True).
struct Architecture {
  const char* model_type;
  bool tied_by_default;
};
constexpr Architecture kArchitectures[] = {
    {"llama", false}, {"mistral", false}, {"qwen2", false}, {"gemma", true}};
constexpr const char* kActivations[] = {"silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new"};

std::string model_name(const std::string& source) {
  const std::filesystem::path p(source);
  if (p.filename() == "config.json" && p.has_parent_path() && !p.parent_path().filename().empty())
    return p.parent_path().filename().string();
  return p.stem().string();
}

}  // namespace

bool is_hf_config_path(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

ModelSpec parse_hf_config(const std::string& json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e400
    throw InputError(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw InputError(source + ": expected a JSON object (a transformers config.json)");
  const JsonReader r(j, source);
  const std::string type = r.str("model_type");
  const auto* arch = std::find_if(std::begin(kArchitectures), std::end(kArchitectures),
                                  [&](const Architecture& a) { return type == a.model_type; });
  if (arch == std::end(kArchitectures)) {
    r.fail("model_type", "unknown architecture '" + type +
                             "' (understood: llama, mistral, qwen2, gemma); write a model YAML for it");
  }
  ModelSpec m;
  m.source = source;
  m.name = model_name(source);
  m.note = std::string("Hugging Face config (model_type ") + type + ")";
  m.layers = r.count("num_hidden_layers", kMaxLayers);
  m.hidden = r.count("hidden_size", kMaxHidden);
  m.heads = r.count("num_attention_heads", kMaxHeads);
  m.kv_heads = r.count_or("num_key_value_heads", m.heads, kMaxHeads);
  if (!r.has("head_dim") && m.hidden % m.heads != 0) {
    r.fail("head_dim", "missing, and num_attention_heads " + std::to_string(m.heads) +
                           " does not divide hidden_size " + std::to_string(m.hidden));
  }
  m.head_dim = r.count_or("head_dim", m.hidden / m.heads, kMaxHeadDim);
  m.ffn_hidden = r.count("intermediate_size", kMaxFfnHidden);
  m.vocab = r.count("vocab_size", kMaxVocab);
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    r.fail("num_key_value_heads", "expected a divisor of num_attention_heads " + std::to_string(m.heads) +
                                      " (got " + std::to_string(m.kv_heads) + ")");
  }
  const std::string act = r.has("hidden_act") ? r.str("hidden_act") : "silu";
  if (std::find(std::begin(kActivations), std::end(kActivations), act) == std::end(kActivations)) {
    r.fail("hidden_act", "expected one of silu, swish, gelu, gelu_pytorch_tanh, gelu_new (got '" + act + "')");
  }
  m.gated_ffn = true;  // SwiGLU (llama, mistral, qwen2) or GeGLU (gemma)
  // Qwen2 writes its window size but applies it only with use_sliding_window: true.
  if (r.boolean_or("use_sliding_window", type != "qwen2")) m.sliding_window = r.integer_or("sliding_window", 0, kMaxSeqTokens);
  m.tied_embeddings = r.boolean_or("tie_word_embeddings", arch->tied_by_default);
  // Biases: Qwen2's attention has them on Q, K and V only (transformers' Qwen2Attention);
  // the others' `attention_bias` puts them on Q, K, V and the output projection, which
  // neither ringmaster's `bias` nor Megatron-LM's flags (--add-qkv-bias, all or none) build.
  if (type == "qwen2") m.bias = LinearBias::kQkv;
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    if (r.boolean_or(key, false))
      r.fail(key, "expected false (ringmaster builds biases on Q, K, V only, as Qwen2 has them, or on every linear layer, as "
                  "Megatron-LM's --add-qkv-bias and its default do: a model YAML's `bias: qkv` or `bias: all` is the "
                  "nearest)");
  }
  if (r.has("attention_dropout")) {
    m.attention_dropout = r.number("attention_dropout", 0, 1);
    if (m.attention_dropout >= 1) r.fail("attention_dropout", "expected a probability in [0, 1) (got 1)");
  }
  return m;
}

}  // namespace rm
