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
// A Transformer may hold a part of the model (ModelPart): a pipeline chunk's layers, with
// the embedding on the first chunk and the head on the last, and under tensor parallelism a
// member's part of each tensor (TpSplit: heads, F and V divided by tp), in the same order.
// The flat vector splits into FSDP units (units()), contiguous ranges as torchtitan wraps
// them: the embedding, each TransformerBlock, and the final norm with the output head.
// forward_backward() reads a unit's parameters and adds into its gradients only through
// a ParamAccess, between gather and release, so FSDP (fsdp.h) can hold each unit
// unsharded only while it runs.
#pragma once

#include <coroutine>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "executor/backend.h"
#include "executor/train_kernels.h"
#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm::exec {

// How tensor parallelism splits a tensor over the members of a TP group (Megatron-LM,
// Shoeybi et al. 2019): kCols, the column-parallel wq, wk, wv (by heads), w1, w3 (by FFN
// columns) and the output head (by vocabulary entries); kRows, the row-parallel wo, w2 and
// the vocabulary-parallel embedding; kNone, the norm gains every member holds whole
// (their gradients summed over the group, as sequence parallelism computes them from each
// member's own tokens).
enum class TpSplit { kNone, kRows, kCols };

struct ParamTensor {
  std::string name;
  size_t offset = 0;
  int64_t rows = 0, cols = 0;  // this member's part (the whole tensor with tp 1)
  bool decay = true;  // AdamW weight decay applies (matrices; not norm gains)
  TpSplit split = TpSplit::kNone;
  size_t full_offset = 0;  // where the whole tensor starts in the whole model (tp 1)
};

// A stretch of n elements of a part's flat vector at `local`, at `full` in the whole
// model's (Transformer::part_runs).
struct PartRun {
  size_t local = 0, full = 0, n = 0;
};

// Which part of the model a Transformer holds: TP member `tp_rank` of `tp` (TpSplit) of a
// pipeline stage's chunks of consecutive layers (one, or v under the interleaved
// schedule, in model order; none: all layers as one chunk), with the embedding where the
// stage's first chunk is the model's first and the head with the loss where its last is
// the model's last (planner/pipeline_parallel.h). The default: the whole model.
struct LayerRange {
  int first = 0, count = 0;
};
struct ModelPart {
  int tp = 1, tp_rank = 0;
  std::vector<LayerRange> chunks;
  bool embedding = true, head = true;
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
  enum Kind { kEmbedding, kBlock, kHead };
  std::string name;
  size_t begin = 0, end = 0;
  Kind kind = kBlock;
  int chunk = 0;  // a block's pipeline chunk among the part's (ModelPart::chunks)
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

// The collectives of tensor + sequence parallelism over the pass's activations, in the
// TP group of `size()` members that hold the same tokens (Megatron-LM's
// --sequence-parallel, Korthikanti et al. 2022): between the parallel regions each member
// keeps rows / size of the batch's rows, member j rows [j r, (j + 1) r). Blocking; every
// member calls the same collectives with the same shapes in the same order (NCCL's
// contract, shard_collectives.h). Blocks are contiguous and equal:
//   all_gather:     all [size][mine] (member j's `mine` as block j)
//   reduce_scatter: mine = the sum over members of their all's block of this member
//   all_to_all:     out's block k = member k's `blocks` block of this member
//   all_reduce:     x = the sum over members, in place
template <class T>
class TensorParallel {
 public:
  virtual ~TensorParallel() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void all_gather(ConstView<T> mine, View<T> all) = 0;
  virtual void reduce_scatter(ConstView<T> all, View<T> mine) = 0;
  virtual void all_to_all(ConstView<T> blocks, View<T> out) = 0;
  virtual void all_reduce(View<T> x) = 0;
};

// Where a pipeline stage's pass of one micro-batch meets its neighbours
// (Transformer::pass): a part without the embedding reads `input`, the previous part's
// output [mr][H] (this TP member's rows), set before forward(); a part without the head
// leaves its output in `output` when forward() returns, reads the gradient of that output
// from `grad`, set before backward(), and, without the embedding, leaves the gradient of
// its input in `input_grad` when backward() returns.
template <class T>
struct StageIo {
  ConstView<T> input;
  Tensor<T> output;
  ConstView<T> grad;
  Tensor<T> input_grad;
};

// A pass suspended between its forward and its backward (a C++20 coroutine,
// Transformer::pass): forward() runs it to the end of the part's forward (for the part
// with the head, through the loss), backward() to its end and returns the loss it took
// (0 without the head). Each once, in that order; an exception inside either reaches the
// caller. Move-only; destroying it frees the pass and what it held.
class PassTask {
 public:
  struct promise_type {
    double loss = 0;
    PassTask get_return_object() { return PassTask(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_value(double l) { loss = l; }
    void unhandled_exception() { throw; }
  };
  explicit PassTask(std::coroutine_handle<promise_type> h) : h_(h) {}
  PassTask(PassTask&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  PassTask& operator=(PassTask&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  PassTask(const PassTask&) = delete;
  PassTask& operator=(const PassTask&) = delete;
  ~PassTask() {
    if (h_) h_.destroy();
  }
  void forward() { resume(); }
  double backward() {
    resume();
    return h_.promise().loss;
  }

 private:
  void resume() {
    if (!h_ || h_.done()) throw std::logic_error("PassTask: resumed past its end (or after it threw)");
    h_.resume();
  }
  std::coroutine_handle<promise_type> h_;
};

template <class T>
using AttentionFnOf = std::function<void(int layer, LayerAttention<T>& t)>;
using AttentionFn = AttentionFnOf<float>;

class Transformer {
 public:
  // `where` names the model for errors: InputError unless heads * head_dim is consistent,
  // the FFN is gated (SwiGLU) and the vocabulary holds the byte tokenizer's 257 tokens.
  // With `tp` > 1 this is member `tp_rank`'s part of the model (TpSplit): h / tp query and
  // h_kv / tp kv heads, F / tp FFN columns, V / tp vocabulary entries (InputError unless
  // tp divides them, as planner/tensor_parallel.h's tp_why_invalid says).
  Transformer(const ModelSpec& model, const std::string& where, const ModelPart& part = {});

  size_t num_params() const { return num_params_; }  // this part's
  size_t full_params() const { return full_params_; }  // the whole model's
  const ModelPart& part() const { return part_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ModelSpec& spec() const { return m_; }  // the whole model's

  // Deterministic initialisation from `seed` (the same on every rank): matrices normal
  // with std 0.02, output projections wo and w2 scaled by 1/sqrt(2 * layers) (GPT-2,
  // Radford et al. 2019, section 2.3), norm gains 1. A part's is its part of the whole
  // model's (so a run's trajectory does not depend on tp or pp).
  std::vector<float> init(uint64_t seed) const;

  // Where TP member `member`'s vector of this chunk sits in the whole model's, stretch by
  // stretch (in local order), and the two ways across: this part of a whole vector, and
  // the whole vector from the chunk's TP members' ([tp][num_params()], member order; zero
  // outside the chunk, so the chunks' add up to the whole).
  std::vector<PartRun> part_runs(int member) const;
  std::vector<float> part_slice(const std::vector<float>& full) const;
  std::vector<float> part_join(const std::vector<float>& members) const;

  // FSDP units (see above): the embedding (where held), the blocks, the head (where
  // held), in model order; the whole model's are 0 the embedding, 1..layers the blocks,
  // layers + 1 the head.
  const std::vector<ParamUnit>& units() const { return units_; }

  // One micro-batch's pass through chunk `chunk` of this part, suspended between its
  // forward and its backward (PassTask), so that a pipeline stage runs other micro-batches'
  // passes in between (1F1B): what forward_backward() below does, split there. `io` meets
  // the neighbouring chunks (StageIo; null for the whole model). The batch's token arrays
  // must outlive the pass. The other arguments as forward_backward's.
  template <class T>
  PassTask pass(TrainKernels<T>& kernels, ParamAccess<T>& params, TokenBatch batch, double grad_scale,
                AttentionFnOf<T> attention_forward, AttentionFnOf<T> attention_backward,
                Checkpointing checkpointing, StageIo<T>* io, size_t* held_activation_bytes, PassTimes* times,
                TensorParallel<T>* tp, int chunk = 0) const;
  int chunks() const { return static_cast<int>(part_.chunks.size()); }

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
  // With tp > 1, `tp` is the member's group (TensorParallel): the pass runs Megatron-LM's
  // tensor + sequence parallelism: each member norms and adds residuals on its rows / tp
  // rows; the rows are all-gathered before the QKV, FFN and head GEMMs (the norm outputs
  // stored split and gathered again in the backward for the weight gradients, as
  // Megatron-Core's sequence-parallel Linears do and the planner's memory model prices),
  // the row-parallel wo and w2 outputs and the vocabulary-parallel embedding's are
  // reduce-scattered back; the
  // attention runs on the member's heads (the plan's ring of its TP rank); the loss is
  // taken on the member's own rows after an all-to-all gives them every vocabulary entry
  // (torchtitan's loss without loss_parallel, on rows / tp rows); norm gains' gradients
  // are all-reduced over the group. The loss returned is the member's rows'.
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
                          PassTimes* times = nullptr, TensorParallel<T>* tp = nullptr) const {
    PassTask t = pass<T>(kernels, params, batch, grad_scale, attention_forward, attention_backward, checkpointing,
                         nullptr, held_activation_bytes, times, tp);
    t.forward();
    return t.backward();
  }
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
  // Appends this member's part of a whole [rows][cols] tensor split as `split` says, or,
  // where the part does not hold it (`held` false), only counts it in the whole model.
  size_t add(const std::string& name, int64_t rows, int64_t cols, bool decay, TpSplit split, bool held);
  ModelSpec m_;
  ModelPart part_;  // chunks filled in
  // Per chunk: where its blocks start among the units and among layers_.
  std::vector<int> chunk_unit0_, chunk_layer0_;
  int tp_ = 1, tp_rank_ = 0;
  size_t full_params_ = 0;
  std::vector<ParamTensor> tensors_;
  std::vector<LayerOffsets> layers_;
  std::vector<ParamUnit> units_;
  size_t tok_embeddings_ = 0, norm_ = 0, output_ = 0;  // within their units
  size_t num_params_ = 0;
};

}  // namespace rm::exec
