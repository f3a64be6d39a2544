// A decoder-only transformer as the cost and memory models see it. Loaded from
// models/*.yaml (shipped ones compiled in; see spec_library.h).
#pragma once

#include <cstdint>
#include <string>

namespace rm {

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

  // Parameters of one layer (attention + FFN weights, norms ignored) and of the model
  // (layers + input embedding + output head).
  double layer_params() const;
  double params() const;
};

}  // namespace rm
