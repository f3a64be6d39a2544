// Mixed precision for `ringmaster train` as PyTorch's FSDP2 MixedPrecisionPolicy
// (param_dtype bf16, reduce_dtype fp32) and autocast run it: the pass keeps its
// activations, the gathered parameters and their gradients in bf16 (Bf16, train_kernels.h),
// and computes each op in fp32 from them, rounding its outputs back to bf16; the model
// state (FSDP's shards, AdamW) stays fp32 (fsdp.h).
//
// Bf16Kernels are the TrainKernels<Bf16> of any TrainKernels<float> (Eigen on the cpu,
// cuBLAS and CUDA kernels on a GPU): each primitive converts its bf16 operands to fp32
// temporaries with the inner kernels' from_bf16, runs the inner fp32 primitive, and
// converts its outputs with to_bf16. So one set of fp32 kernels, answering to the fp64
// loops of tests/executor/train_kernels_check.h, serves both precisions, and the bf16 path
// runs on the cpu in CI exactly as on a GPU (the same conversions, the same orchestration).
// The price is conversion traffic beside every op (fused bf16 kernels would avoid it).
//
// Tensors are bf16 allocations of the inner kernels' memory (an fp32 allocation of half
// the element count, rounded up). Views at any offset are fine: every access converts.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "executor/train_kernels.h"
#include "executor/transformer.h"

namespace rm::exec {

class Bf16Kernels final : public TrainKernels<Bf16> {
 public:
  explicit Bf16Kernels(TrainKernels<float>& inner) : k_(inner) {}
  TrainKernels<float>& inner() { return k_; }
  std::string name() const override { return k_.name() + " (bf16 storage)"; }
  double peak_flops() const override { return k_.peak_flops(); }

  Tensor<Bf16> alloc(int64_t rows, int64_t cols) override;
  void free(Bf16* data) override;
  void zero(View<Bf16> x) override;
  void copy(View<Bf16> dst, ConstView<Bf16> src) override;
  void upload(Bf16* dst, const Bf16* host, int64_t n) override;
  void download(Bf16* host, const Bf16* src, int64_t n) override;
  void synchronize() override { k_.synchronize(); }

  void gemm(ConstView<Bf16> a, bool trans_a, ConstView<Bf16> b, bool trans_b, View<Bf16> c,
            bool accumulate) override;
  void rmsnorm_forward(ConstView<Bf16> x, const Bf16* g, View<Bf16> y, View<Bf16> r) override;
  // Recomputes 1/rms in fp32 from x (the stored bf16 r would cost 2^-8 of it), as fused
  // RMSNorm kernels keep their rstd in fp32.
  void rmsnorm_backward(ConstView<Bf16> x, ConstView<Bf16> r, const Bf16* g, ConstView<Bf16> dy,
                        View<Bf16> dx, Bf16* dg) override;
  void rope(View<Bf16> x, int heads, int d, const int64_t* positions, int64_t c, int sign) override;
  void swiglu_forward(ConstView<Bf16> u, ConstView<Bf16> g, View<Bf16> s) override;
  void swiglu_backward(ConstView<Bf16> ds, ConstView<Bf16> u, ConstView<Bf16> g, View<Bf16> du,
                       View<Bf16> dg) override;
  void embedding_forward(ConstView<Bf16> table, const int32_t* tokens, View<Bf16> x) override;
  void embedding_backward(ConstView<Bf16> dx, const int32_t* tokens, View<Bf16> dtable) override;
  double cross_entropy(View<Bf16> logits, const int32_t* targets, double grad_scale) override;
  void to_heads(ConstView<Bf16> x, int64_t row0, int heads, int d, View<Bf16> t) override;
  void from_heads(ConstView<Bf16> t, int heads, int d, View<Bf16> x, int64_t row0) override;
  void add(View<Bf16> y, ConstView<Bf16> x) override;
  double squared_norm(ConstView<Bf16> x) override;
  // The optimizer runs on the fp32 shards: throws std::logic_error.
  void adamw(View<Bf16> p, ConstView<Bf16> grad, View<Bf16> m, View<Bf16> v, const AdamWScalars& s) override;
  void adamw_bf16_moments(View<Bf16> p, ConstView<Bf16> grad, View<Bf16> m, View<Bf16> v,
                          const AdamWScalars& s) override;
  void to_bf16(Bf16* dst, const Bf16* src, int64_t n) override;
  void from_bf16(Bf16* dst, const Bf16* src, int64_t n) override;

  // An fp32 copy of a bf16 view, and the view's bf16 from an fp32 one (the inner
  // kernels' memory): what every primitive does around its inner call.
  Tensor<float> widen(ConstView<Bf16> x);
  void narrow(View<Bf16> dst, ConstView<float> src);

 private:
  TrainKernels<float>& k_;
};

// The attention callbacks of a bf16 pass over fp32 ones (the ring attention takes fp32
// tensors and rounds Q, K, V itself where its kernels are bf16): the set tensors are
// widened, the fp32 callback runs, and what it filled is narrowed back. The log-sum-exp is
// a statistic, fp32 in every framework (SDPA's logsumexp): the forward keeps its fp32
// copy beside the bf16 tensor the pass stores, and the backward of the same tensor uses it
// (a recomputed forward replaces it). reset() after each pass drops the copies whose
// tensors the pass discarded (full checkpointing stores no log-sum-exp).
struct Bf16Attention {
  AttentionFnOf<Bf16> forward, backward;
  std::shared_ptr<std::map<const Bf16*, Tensor<float>>> lse =
      std::make_shared<std::map<const Bf16*, Tensor<float>>>();
  void reset() { lse->clear(); }
};
Bf16Attention bf16_attention(Bf16Kernels& kernels, AttentionFn forward, AttentionFn backward);

}  // namespace rm::exec
