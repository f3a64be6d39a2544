// A decoder-only transformer as the cost and memory models see it. Loaded from
// models/*.yaml (shipped ones compiled in; see spec_library.h).
#pragma once

#include <cstdint>
#include <string>

namespace rm {

// The block's norm, position embedding and linear-layer biases, as a framework is told to
// build them (Megatron-LM's --normalization, --position-embedding-type, --disable-bias-linear
// and --add-qkv-bias). The cost and memory models price every block as Llama's (RMSNorm,
// rotary, no biases: attention_work.h); these change what an export asks for, not a
// prediction.
enum class Norm { kRmsNorm, kLayerNorm };
enum class PositionEmbedding { kRope, kLearned, kAlibi };
// kQkv: biases on the Q, K, V projections only (Qwen2); kAll: on every linear layer of the
// block (GPT-2/GPT-3, MPT without no_bias; Megatron-LM's default, add_bias_linear).
enum class LinearBias { kNone, kQkv, kAll };
const char* to_string(Norm v);               // "rmsnorm", "layernorm"
const char* to_string(PositionEmbedding v);  // "rope", "learned", "alibi"
const char* to_string(LinearBias v);         // "none", "qkv", "all"
// Parse; throw InputError naming `where` and `field` and listing the valid spellings
// (plan_io.cc, with the other enum spellings).
Norm parse_norm(const std::string& s, const std::string& where, const std::string& field);
PositionEmbedding parse_position_embedding(const std::string& s, const std::string& where, const std::string& field);
LinearBias parse_linear_bias(const std::string& s, const std::string& where, const std::string& field);

struct ModelSpec {
  std::string name;
  std::string source;  // file path or "builtin:<name>"
  std::string note;
  int layers = 0;
  int hidden = 0;      // model width h_model
  int heads = 0;       // query heads h
  int kv_heads = 0;    // key/value heads h_kv (GQA when < heads); heads % kv_heads == 0
  int head_dim = 0;    // d; heads * head_dim == hidden for the shipped models
  int ffn_hidden = 0;  // f
  int vocab = 0;
  bool gated_ffn = true;  // SwiGLU: three f x h matrices instead of two
  // Sliding-window attention (Mistral's `sliding_window`): query i attends keys j with
  // i - W < j <= i under the causal mask; 0 = none. Non-causal jobs ignore it.
  int64_t sliding_window = 0;
  // Input embedding and output head share one matrix (Hugging Face's
  // tie_word_embeddings): its parameters are counted once.
  bool tied_embeddings = false;
  Norm norm = Norm::kRmsNorm;                                 // model file key `norm`
  PositionEmbedding position_embedding = PositionEmbedding::kRope;  // `position_embedding`
  LinearBias bias = LinearBias::kNone;                        // `bias`
  // Dropout probabilities in training (Megatron-LM's --hidden-dropout, after the attention
  // and FFN outputs, and --attention-dropout, on the attention probabilities). Exported, not
  // priced: a fused bias-dropout-add writes and reads a one-byte mask per element, about 1 %
  // of a GPT-3 5B step at HBM bandwidth, and the attention kernel draws its mask in registers.
  double hidden_dropout = 0;     // `hidden_dropout`
  double attention_dropout = 0;  // `attention_dropout`
  // The implementation expands K,V to every query head before the attention call
  // (torchtitan's Llama: repeat_kv ahead of SDPA), so the K,V that context parallelism
  // moves, gathers and accumulates have `heads` heads; the projections stay GQA's. Not a
  // model file key: `validate --published` sets it from an entry's `repeat_kv: true`.
  bool kv_repeated = false;
  // K,V heads the attention call takes, and context parallelism exchanges.
  int attention_kv_heads() const { return kv_repeated ? heads : kv_heads; }

  // Parameters of one layer (attention + FFN weights, norms ignored) and of the model
  // (layers + input embedding + output head, once when tied).
  double layer_params() const;
  double params() const;
};

}  // namespace rm
