// A model read from a Hugging Face transformers config.json (a local file; nothing is
// downloaded): `--model path/to/config.json`. The architectures whose keys are understood
// (model_type): llama, mistral, qwen2, gemma. Keys read:
//   hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, vocab_size
//                         required
//   num_key_value_heads   default num_attention_heads (MHA)
//   head_dim              default hidden_size / num_attention_heads (Gemma sets its own)
//   sliding_window        Mistral; Qwen2 only when use_sliding_window is true; null = none
//   tie_word_embeddings   default: the architecture's (true for gemma, else false)
//   hidden_act            silu / swish (SwiGLU), gelu, gelu_pytorch_tanh, gelu_new (GeGLU):
//                         all four architectures use a gated FFN
//   attention_dropout     default 0 (the model's `attention_dropout`, for exports)
//   attention_bias, mlp_bias  must be false where present: Qwen2's biases (Q, K, V) are the
//                         architecture's (`bias: qkv`); others' have no export spelling
// Anything else in the file (rope, norms, token ids, dtype) does not change the cost or
// memory model and is ignored; an unknown model_type is refused naming the key.
#pragma once

#include <string>

#include "planner/model_spec.h"

namespace rm {

// `source` (the path) names the file in InputError messages and becomes the spec's source;
// the name is the file's parent folder when the file is called config.json, else its stem.
ModelSpec parse_hf_config(const std::string& json_text, const std::string& source);
bool is_hf_config_path(const std::string& path);  // ends in .json

}  // namespace rm
