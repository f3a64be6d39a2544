// What the transformer's tests share (tests/executor and the GPU tests in tests/cuda): a
// small model, the fp64 reference attention standing in for the ring (one rank holding
// the whole sequence), and a few AdamW steps of that model on any kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "executor/adamw.h"
#include "executor/bf16_kernels.h"
#include "executor/reference_attention.h"
#include "executor/transformer.h"

namespace rm::exec::testing {

inline ModelSpec small_spec() {
  ModelSpec m;
  m.name = "test";
  m.layers = 2;
  m.hidden = 16;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = 8;
  m.ffn_hidden = 24;
  m.vocab = 257;
  m.gated_ffn = true;
  return m;
}

// The fp64 reference as the attention of a whole sequence, its tensors read and written
// through `kernels`.
struct ReferenceAttention {
  ReferenceShape shape;
  TrainKernels<float>& kernels = cpu_train_kernels<float>();
  void forward(LayerAttention<float>& t) const { reference_layer_attention(shape, kernels, t, false); }
  void backward(LayerAttention<float>& t) const { reference_layer_attention(shape, kernels, t, true); }
};

// The mean token losses of `steps` AdamW steps (defaults) of the small model from seed 3,
// one sequence of 24 hashed bytes per step, everything on `kernels`: the parameters,
// gradients and moments in fp32 in their memory, the gradient norm and AdamW on them (as
// `train` runs a rank's shards). The pass runs in fp32, or with `bf16` under mixed
// precision (bf16_kernels.h): each step's parameters rounded to bf16, the pass on
// Bf16Kernels over the same kernels, its bf16 gradients widened for the optimizer.
inline std::vector<double> train_steps(TrainKernels<float>& kernels, int steps, bool bf16 = false) {
  const Transformer model(small_spec(), "test");
  const ModelSpec& spec = model.spec();
  const int64_t c = 24;
  const ReferenceAttention ref{{c, spec.head_dim, spec.heads, spec.kv_heads, true}, kernels};
  const AttentionFn fwd = [&](int, LayerAttention<float>& t) { ref.forward(t); };
  const AttentionFn bwd = [&](int, LayerAttention<float>& t) { ref.backward(t); };
  Bf16Kernels half(kernels);
  Bf16Attention half_attention = bf16_attention(half, fwd, bwd);
  std::vector<int64_t> pos(static_cast<size_t>(c));
  for (int64_t i = 0; i < c; ++i) pos[i] = i;
  const std::vector<float> init = model.init(3);
  const auto n = static_cast<int64_t>(init.size());
  Tensor<float> params = kernels.alloc(1, n), grads = kernels.alloc(1, n), m = kernels.alloc(1, n),
                v = kernels.alloc(1, n);
  kernels.upload(params.data(), init.data(), n);
  kernels.zero(m);
  kernels.zero(v);
  const AdamWConfig cfg;
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> seq(static_cast<size_t>(c + 1));
    for (int64_t i = 0; i <= c; ++i) seq[i] = static_cast<int32_t>(splitmix64(s * 1000 + i) % 256);
    const TokenBatch batch{seq.data(), seq.data() + 1, pos.data(), c, 1};
    const double scale = 1.0 / c;
    double loss = 0;
    if (bf16) {
      Tensor<Bf16> p16 = half.alloc(1, n), g16 = half.alloc(1, n);
      kernels.to_bf16(p16.data(), params.data(), n);
      half.zero(g16);
      FullParams<Bf16> access(model.units(), p16.data(), g16.data());
      loss = model.forward_backward<Bf16>(half, access, batch, scale, half_attention.forward,
                                          half_attention.backward);
      half_attention.reset();
      kernels.from_bf16(grads.data(), g16.data(), n);
    } else {
      kernels.zero(grads);
      FullParams<float> access(model.units(), params.data(), grads.data());
      loss = model.forward_backward<float>(kernels, access, batch, scale, fwd, bwd);
    }
    losses.push_back(scale * loss);
    adamw_update(cfg, whole_model_segments(model.tensors()), std::sqrt(kernels.squared_norm(grads)), s,
                 kernels, params, grads, m, v);
  }
  return losses;
}

}  // namespace rm::exec::testing
