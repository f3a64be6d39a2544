// Hugging Face config.json models (planner/hf_config.h) against the shipped test configs
// and hand-counted parameters.
#include <doctest/doctest.h>

#include <string>

#include "planner/hf_config.h"
#include "planner/input_error.h"
#include "planner/spec_library.h"

using namespace rm;

namespace {

const std::string kHfDir = std::string(RM_SOURCE_DIR) + "/tests/data/hf";

std::string hf_error_of(const std::string& json) {
  try {
    parse_hf_config(json, "c.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Mistral 7B v0.1: GQA, sliding window 4096, untied") {
  const ModelSpec m = load_model(kHfDir + "/mistral-7b-v0.1/config.json");
  CHECK(m.name == "mistral-7b-v0.1");
  CHECK(m.layers == 32);
  CHECK(m.hidden == 4096);
  CHECK(m.heads == 32);
  CHECK(m.kv_heads == 8);
  CHECK(m.head_dim == 128);
  CHECK(m.ffn_hidden == 14336);
  CHECK(m.vocab == 32000);
  CHECK(m.sliding_window == 4096);
  CHECK_FALSE(m.tied_embeddings);
  // 7.24 B parameters (Mistral 7B model card): 32 x (4096·4096·2 + 2·4096·1024 + 3·4096·14336)
  // + 2·32000·4096.
  CHECK(m.params() == doctest::Approx(32.0 * (2 * 4096.0 * 4096 + 2 * 4096.0 * 1024 + 3 * 4096.0 * 14336) +
                                      2 * 32000.0 * 4096));
  CHECK(m.params() == doctest::Approx(7.24e9).epsilon(0.01).scale(0));
}

TEST_CASE("Qwen2 7B: the written window is off (use_sliding_window false)") {
  const ModelSpec m = load_model(kHfDir + "/qwen2-7b/config.json");
  CHECK(m.kv_heads == 4);
  CHECK(m.head_dim == 128);  // 3584 / 28
  CHECK(m.sliding_window == 0);
  CHECK_FALSE(m.tied_embeddings);
  // 7.6 B (Qwen2 technical report; norms and QKV biases are the rest).
  CHECK(m.params() == doctest::Approx(7.6e9).epsilon(0.01).scale(0));
  // Qwen2's attention has biases on Q, K and V only: Megatron-LM's --add-qkv-bias.
  CHECK(m.bias == LinearBias::kQkv);
  CHECK(m.attention_dropout == 0);
}

TEST_CASE("config.json biases and attention dropout") {
  const std::string base =
      R"("model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("intermediate_size": 128, "vocab_size": 100)";
  const ModelSpec m = parse_hf_config("{" + base + R"(, "attention_dropout": 0.1, "attention_bias": false})", "c.json");
  CHECK(m.bias == LinearBias::kNone);
  CHECK(m.attention_dropout == doctest::Approx(0.1));
  CHECK(m.hidden_dropout == 0);
  // Llama's attention_bias puts biases on Q, K, V and O, which no export spells: refused.
  CHECK(hf_error_of("{" + base + R"(, "attention_bias": true})").rfind("c.json: attention_bias: expected false", 0) == 0);
  CHECK(hf_error_of("{" + base + R"(, "mlp_bias": true})").rfind("c.json: mlp_bias: expected false", 0) == 0);
  CHECK(hf_error_of("{" + base + R"(, "attention_dropout": 1.0})") ==
        "c.json: attention_dropout: expected a probability in [0, 1) (got 1)");
  CHECK(hf_error_of("{" + base + R"(, "attention_dropout": -0.1})").rfind("c.json: attention_dropout: expected", 0) == 0);
}

TEST_CASE("Gemma 7B: head_dim of its own, tied embeddings counted once") {
  const ModelSpec m = load_model(kHfDir + "/gemma-7b/config.json");
  CHECK(m.head_dim == 256);
  CHECK(m.heads * m.head_dim == 4096);  // wider than hidden_size 3072
  CHECK(m.tied_embeddings);
  const double layer = 3072.0 * 4096 * 2 + 2 * 3072.0 * 4096 + 3 * 3072.0 * 24576;
  CHECK(m.layer_params() == doctest::Approx(layer));
  CHECK(m.params() == doctest::Approx(28 * layer + 256000.0 * 3072));
  // 8.54 B as published (Gemma report, Table 2: 7.75 B non-embedding + 0.79 B embedding).
  CHECK(m.params() == doctest::Approx(8.54e9).epsilon(0.01).scale(0));
  ModelSpec untied = m;
  untied.tied_embeddings = false;
  CHECK(untied.params() - m.params() == doctest::Approx(256000.0 * 3072));
}

TEST_CASE("config.json errors name the file and the key") {
  CHECK(hf_error_of(R"({"model_type": "gpt2", "n_embd": 768})") ==
        "c.json: model_type: unknown architecture 'gpt2' (understood: llama, mistral, qwen2, gemma); "
        "write a model YAML for it");
  CHECK(hf_error_of(R"({"hidden_size": 768})") == "c.json: model_type: missing (required)");
  const std::string base =
      R"("model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, )"
      R"("intermediate_size": 128, "vocab_size": 100)";
  CHECK(hf_error_of("{" + base + "}").empty());
  CHECK(hf_error_of("{" + base + R"(, "hidden_act": "relu"})") ==
        "c.json: hidden_act: expected one of silu, swish, gelu, gelu_pytorch_tanh, gelu_new (got 'relu')");
  CHECK(hf_error_of("{" + base + R"(, "sliding_window": -5})") ==
        "c.json: sliding_window: expected a whole number in [1, 1073741824] (got -5)");
  // Counts are range-checked before they become int (2^32 + 2 is not 2), unsigned values too.
  CHECK(hf_error_of("{" + base + R"(, "num_hidden_layers": 4294967298})") ==
        "c.json: num_hidden_layers: expected a whole number in [1, 16384] (got 4294967298)");
  CHECK(hf_error_of("{" + base + R"(, "vocab_size": 18446744073709551615})") ==
        "c.json: vocab_size: expected a whole number in [1, 33554432] (got 18446744073709551615)");
  CHECK(hf_error_of("{" + base + R"(, "head_dim": 1e3})") ==
        "c.json: head_dim: expected a whole number in [1, 16384] (got 1000.0)");
  CHECK(hf_error_of("{" + base + R"(, "tie_word_embeddings": "yes"})") ==
        "c.json: tie_word_embeddings: expected true or false (got \"yes\")");
  CHECK(hf_error_of("[1, 2]") == "c.json: expected a JSON object (a transformers config.json)");
  CHECK(hf_error_of("{").rfind("c.json: not valid JSON", 0) == 0);
  // null means none, as transformers writes it.
  const ModelSpec m = parse_hf_config("{" + base + R"(, "sliding_window": null})", "c.json");
  CHECK(m.sliding_window == 0);
  CHECK(m.kv_heads == 4);  // num_key_value_heads defaults to MHA
}

TEST_CASE("model YAML: bias and dropout, read strictly") {
  const std::string yaml =
      "name: g\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 4\nhead_dim: 16\nffn_hidden: 256\nvocab: 100\n";
  const ModelSpec plain = parse_model(yaml, "g.yaml");
  CHECK(plain.bias == LinearBias::kNone);
  CHECK(plain.hidden_dropout == 0);
  CHECK(plain.attention_dropout == 0);
  const ModelSpec gpt = parse_model(yaml + "bias: all\nhidden_dropout: 0.1\nattention_dropout: 0.05\n", "g.yaml");
  CHECK(gpt.bias == LinearBias::kAll);
  CHECK(gpt.hidden_dropout == doctest::Approx(0.1));
  CHECK(gpt.attention_dropout == doctest::Approx(0.05));
  CHECK(gpt.params() == doctest::Approx(plain.params()));  // biases are not counted, as norms
  CHECK(parse_model(yaml + "bias: qkv\n", "g.yaml").bias == LinearBias::kQkv);
  auto error_of = [&](const std::string& extra) -> std::string {
    try {
      parse_model(yaml + extra, "g.yaml");
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  CHECK(error_of("bias: yes\n").find("bias: expected one of none, qkv, all (got 'yes')") != std::string::npos);
  CHECK(error_of("hidden_dropout: 1\n").find("hidden_dropout: expected a number in [0, 1)") != std::string::npos);
  // The shipped GPT-3 files say what NeMo's recipes build.
  const ModelSpec g5 = load_model("gpt3-5b");
  CHECK(g5.bias == LinearBias::kAll);
  CHECK(g5.hidden_dropout == doctest::Approx(0.1));
  CHECK(g5.attention_dropout == doctest::Approx(0.1));
  CHECK(load_model("llama3-8b").bias == LinearBias::kNone);
}

TEST_CASE("model YAML: sliding_window and tied_embeddings") {
  const std::string yaml =
      "name: w\nlayers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nhead_dim: 16\nffn_hidden: 128\nvocab: 100\n"
      "sliding_window: 32\ntied_embeddings: true\n";
  const ModelSpec m = parse_model(yaml, "w.yaml");
  CHECK(m.sliding_window == 32);
  CHECK(m.tied_embeddings);
  CHECK(m.params() == doctest::Approx(2 * m.layer_params() + 100.0 * 64));
}
