#include "planner/model_spec.h"

namespace rm {

double ModelSpec::layer_params() const {
  const double h = hidden;
  const double q = static_cast<double>(heads) * head_dim;
  const double kv = static_cast<double>(kv_heads) * head_dim;
  // Wq (h x q), Wk and Wv (h x kv each), Wo (q x h); norms are negligible.
  const double attention = h * q + 2 * h * kv + q * h;
  // SwiGLU has gate, up and down projections; a plain MLP has up and down.
  const double ffn = (gated_ffn ? 3.0 : 2.0) * h * ffn_hidden;
  return attention + ffn;
}

double ModelSpec::params() const {
  return layers * layer_params() + (tied_embeddings ? 1.0 : 2.0) * vocab * hidden;
}

}  // namespace rm
