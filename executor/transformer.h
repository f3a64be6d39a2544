// The decoder-only transformer `ringmaster train` trains (Llama-shaped, as a model YAML
// describes it), fp32, on the device of the TrainKernels it is given (train_kernels.h:
// Eigen on the CPU, cuBLAS and small kernels on a GPU; one orchestration for both):
// token embedding; per layer RMSNorm, causal GQA attention with RoPE, output projection
// and residual, RMSNorm, SwiGLU feed-forward and residual; final RMSNorm, output head,
// cross-entropy.
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
// The flat vector splits into FSDP units (units()), contiguous ranges as torchtitan wraps
// them: the embedding, each TransformerBlock, and the final norm with the output head.
// forward_backward() reads a unit's parameters and adds into its gradients only through
// a ParamAccess, between gather and release, so FSDP (fsdp.h) can hold each unit
// unsharded only while it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/train_kernels.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm::exec {

struct ParamTensor {
  std::string name;
  size_t offset = 0;
  int64_t rows = 0, cols = 0;
  bool decay = true;  // AdamW weight decay applies (matrices; not norm gains)
};

// One layer's attention tensors of one sequence on this rank, head-major (layouts of
// backend.h: q, out, dout, dq [h][c d]; k, v, dk, dv [h_kv][c d]; lse [h][c]), in the
// memory of the kernels the pass runs on (train_kernels.h), in the model's arithmetic
// type T (float for training; double for run --verify's reference). The pass allocates
// them all. Forward: q, k, v set (after RoPE) -> fills out, lse.
// Backward: q, k, v, out, lse, dout set -> fills dq, dk, dv.
template <class T>
struct LayerAttention {
  Tensor<T> q, k, v, out, lse, dout, dq, dk, dv;
  // a2a: the backend's head-sharded view after this forward (its Q, K, V, out, lse), which
  // the backward reads (Backend::a2a_save, ring_attention.h); empty otherwise.
  std::vector<float> a2a_view;
};
// One FSDP unit: parameters [begin, end) of the flat vector.
struct ParamUnit {
  std::string name;
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Where forward_backward() finds each unit's parameters and gradients. Within one call,
// per unit u: gather(u) before its parameters are read (in the forward pass, and again in
// the backward pass after a release), release(u) when they are no longer needed for now;
// grads(u) once, before the first gradient is added (a unit-sized buffer indexed from the
// unit's begin, zero or holding earlier sums), and reduce(u) after the last one.
template <class T>
class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  virtual const T* gather(int unit) = 0;
  virtual void release(int unit) = 0;
  virtual T* grads(int unit) = 0;
  virtual void reduce(int unit) = 0;
};

// The whole model in two flat arrays (one rank, no sharding), in the memory of the
// kernels the pass runs on: gather and grads point into them, release and reduce do
// nothing; the gradients accumulate across calls.
template <class T>
class FullParams : public ParamAccess<T> {
 public:
  FullParams(const std::vector<ParamUnit>& units, const T* params, T* grads)
      : units_(units), params_(params), grads_(grads) {}
  const T* gather(int u) override { return params_ + units_[u].begin; }
  void release(int) override {}
  T* grads(int u) override { return grads_ + units_[u].begin; }
  void reduce(int) override {}

 private:
  const std::vector<ParamUnit>& units_;
  const T* params_;
  T* grads_;
};

// One call's micro-batch: `sequences` sequences of this rank's c tokens each, stacked
// ([sequences][c]: tokens, targets), at the global `positions` [c] (RoPE; the same for
// every sequence).
struct TokenBatch {
  const int32_t* tokens = nullptr;
  const int32_t* targets = nullptr;
  const int64_t* positions = nullptr;
  int64_t c = 0;
  int sequences = 1;
};

// Where forward_backward()'s own compute went, added up over calls (seconds): the GEMMs
// of the linear layers and the head, and the elementwise work around them (norms, RoPE,
// SwiGLU's activation, softmax and loss, residual adds, layout copies). The attention
// calls and the collectives behind the ParamAccess count in neither.
struct PassTimes {
  double linear_s = 0;
  double elementwise_s = 0;
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

  // FSDP units (see above): 0 the embedding, 1..layers the blocks, layers + 1 the head.
  const std::vector<ParamUnit>& units() const { return units_; }

  // A micro-batch's tokens on this rank (attention called once per sequence, layer and
  // pass). Adds grad_scale * d(sum of token losses)/d(params) into the gradients of
  // `params` and returns the sum of the tokens' cross-entropy losses (nats).
  // `checkpointing` as Megatron-LM's recompute: kNone keeps every activation for the
  // backward pass; kSelective drops the SwiGLU intermediates (w1 b, w3 b, silu(.) * .,
  // [c][F] each) and recomputes them from the stored FFN input; kFull keeps only each
  // layer's input and recomputes the whole layer, its ring attention forward included,
  // before the layer's backward. The gradients do not depend on it (same arithmetic).
  // `held_activation_bytes`, when given, receives the bytes of activations stored for the
  // backward pass at the end of the forward pass (the peak of what is kept across layers);
  // `times`, when given, gets this call's compute added (PassTimes).
  // T is float (training) or double (the reference of run --verify). `kernels` computes
  // everything but the attention, in its own memory: `params` hands out pointers into it
  // (FSDP's shards live there, fsdp.h), and the attention callbacks get their tensors
  // there too (LayerAttention).
  template <class T>
  double forward_backward(TrainKernels<T>& kernels, ParamAccess<T>& params,
                          const TokenBatch& batch, double grad_scale,
                          const AttentionFnOf<T>& attention_forward,
                          const AttentionFnOf<T>& attention_backward,
                          Checkpointing checkpointing = Checkpointing::kNone,
                          size_t* held_activation_bytes = nullptr,
                          PassTimes* times = nullptr) const;
  // The same on the CPU (Eigen kernels), parameters in host memory.
  template <class T>
  double forward_backward(ParamAccess<T>& params, const TokenBatch& batch, double grad_scale,
                          const AttentionFnOf<T>& attention_forward,
                          const AttentionFnOf<T>& attention_backward,
                          Checkpointing checkpointing = Checkpointing::kNone,
                          size_t* held_activation_bytes = nullptr,
                          PassTimes* times = nullptr) const {
    return forward_backward<T>(cpu_train_kernels<T>(), params, batch, grad_scale, attention_forward,
                               attention_backward, checkpointing, held_activation_bytes, times);
  }
  // One sequence (c tokens at `positions`), all parameters and gradients in flat vectors.
  template <class T>
  double forward_backward(const std::vector<T>& params, std::vector<T>& grads,
                          const int32_t* tokens, const int32_t* targets,
                          const int64_t* positions, int64_t c, double grad_scale,
                          const AttentionFnOf<T>& attention_forward,
                          const AttentionFnOf<T>& attention_backward) const {
    FullParams<T> access(units_, params.data(), grads.data());
    return forward_backward<T>(access, TokenBatch{tokens, targets, positions, c, 1}, grad_scale,
                               attention_forward, attention_backward);
  }

 private:
  // Offsets within the layer's unit.
  struct LayerOffsets {
    size_t attention_norm, wq, wk, wv, wo, ffn_norm, w1, w3, w2;
  };
  size_t add(const std::string& name, int64_t rows, int64_t cols, bool decay);
  ModelSpec m_;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  std::vector<ParamUnit> units_;
  size_t tok_embeddings_ = 0, norm_ = 0, output_ = 0;  // within their units
  size_t num_params_ = 0;
};

}  // namespace rm::exec
