// A decoder-only transformer as the cost and memory models see it. Loaded from
// models/*.yaml (shipped ones compiled in; see spec_library.h).
#pragma once

#include <cstdint>
#include <string>

namespace rm {

// The block's norm and position embedding, as a framework is told to build them (Megatron-LM's
// --normalization and --position-embedding-type). The cost and memory models price every
// block as Llama's (RMSNorm, rotary: attention_work.h); these change what an export asks
// for, not a prediction.
enum class Norm { kRmsNorm, kLayerNorm };
enum class PositionEmbedding { kRope, kLearned, kAlibi };
const char* to_string(Norm v);               // "rmsnorm", "layernorm"
const char* to_string(PositionEmbedding v);  // "rope", "learned", "alibi"
// Parse; throw InputError naming `where` and `field` and listing the valid spellings
// (plan_io.cc, with the other enum spellings).
Norm parse_norm(const std::string& s, const std::string& where, const std::string& field);
PositionEmbedding parse_position_embedding(const std::string& s, const std::string& where, const std::string& field);

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
