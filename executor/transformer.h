// The decoder-only transformer `ringmaster train` trains (Llama-shaped, as a model YAML
// describes it), fp32 on the CPU with Eigen: token embedding; per layer RMSNorm, causal
// GQA attention with RoPE, output projection and residual, RMSNorm, SwiGLU feed-forward
// and residual; final RMSNorm, output head, cross-entropy.
//
// The attention itself is not here: forward_backward() calls the `attention` functions it
// is given once per layer and pass (the plan's ring attention across the MPI ranks in
// training, train.h; a plain reference in the tests), so every rank runs this code on its
// own c tokens of a sequence and the ring joins them.
//
// Shapes (letters as in planner/plan.h and backend.h): c tokens of this rank, H hidden,
// h / h_kv heads of dim d, F ffn hidden, V vocab. Activations are row-major [c][...];
// the attention tensors are head-major LayerAttention ([h][c][d], [h_kv][c][d]).
// Parameters live in one flat fp32 vector (so all-reduce, clipping, AdamW and checkpoints
// treat them as one array); tensors() names each slice, torchtitan's names, weights stored
// [in][out] so that y = x W:
//   tok_embeddings [V][H]; per layer l "layers.l.": attention_norm [H], wq [H][h d],
//   wk [H][h_kv d], wv [H][h_kv d], wo [h d][H], ffn_norm [H], w1 [H][F], w3 [H][F],
//   w2 [F][H]; norm [H]; output [H][V].
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "planner/model_spec.h"

namespace rm::exec {

struct ParamTensor {
  std::string name;
  size_t offset = 0;
  int64_t rows = 0, cols = 0;
  bool decay = true;  // AdamW weight decay applies (matrices; not norm gains)
};

// One layer's attention tensors on this rank, head-major (layouts of backend.h), in the
// model's arithmetic type T (float for training; double for run --verify's reference).
// Forward: q, k, v set (after RoPE) -> fills out, lse.
// Backward: q, k, v, out, lse, dout set -> fills dq, dk, dv.
template <class T>
struct LayerAttention {
  std::vector<T> q, k, v, out, lse, dout, dq, dk, dv;
};
template <class T>
using AttentionFnOf = std::function<void(int layer, LayerAttention<T>& t)>;
using AttentionFn = AttentionFnOf<float>;

class Transformer {
 public:
  // `where` names the model for errors: InputError unless heads * head_dim is consistent,
  // the FFN is gated (SwiGLU) and the vocabulary holds the byte tokenizer's 257 tokens.
  Transformer(const ModelSpec& model, const std::string& where);

  size_t num_params() const { return num_params_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ModelSpec& spec() const { return m_; }

  // Deterministic initialisation from `seed` (the same on every rank): matrices normal
  // with std 0.02, output projections wo and w2 scaled by 1/sqrt(2 * layers) (GPT-2,
  // Radford et al. 2019, section 2.3), norm gains 1.
  std::vector<float> init(uint64_t seed) const;

  // One sequence's c tokens on this rank: `tokens` and `targets` (size c) at global
  // `positions` (for RoPE). Adds grad_scale * d(sum of token losses)/d(params) into
  // `grads` and returns the sum of the c tokens' cross-entropy losses (nats).
  // T is float (training) or double (the reference of run --verify).
  template <class T>
  double forward_backward(const std::vector<T>& params, std::vector<T>& grads,
                          const int32_t* tokens, const int32_t* targets,
                          const int64_t* positions, int64_t c, double grad_scale,
                          const AttentionFnOf<T>& attention_forward,
                          const AttentionFnOf<T>& attention_backward) const;

 private:
  struct LayerOffsets {
    size_t attention_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2;
  };
  size_t add(const std::string& name, int64_t rows, int64_t cols, bool decay);
  ModelSpec m_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  size_t tok_embeddings_ = 0, norm_ = 0, output_ = 0;
  size_t num_params_ = 0;
};

}  // namespace rm::exec
