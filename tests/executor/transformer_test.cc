// The transformer's analytic gradients (transformer.h) against central finite
// differences of its own loss, with the fp64 reference attention standing in for the ring
// (one rank holding the whole sequence), so a wrong backward of any block (RMSNorm, RoPE,
// SwiGLU, head, embedding, the attention tensors' layouts) fails here, naming the tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "executor/reference_attention.h"
#include "executor/transformer.h"
#include "planner/input_error.h"

namespace rm::exec {
namespace {

ModelSpec small_spec() {
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

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

struct ReferenceAttention {
  ReferenceShape shape;
  void forward(LayerAttention<float>& t) const {
    const auto r = reference_attention(shape, to_double(t.q), to_double(t.k), to_double(t.v), {}, false);
    t.out = to_float(r.out);
    t.lse = to_float(r.lse);
  }
  void backward(LayerAttention<float>& t) const {
    const auto r = reference_attention(shape, to_double(t.q), to_double(t.k), to_double(t.v),
                                       to_double(t.dout), true);
    t.dq = to_float(r.dq);
    t.dk = to_float(r.dk);
    t.dv = to_float(r.dv);
  }
};

TEST_CASE("transformer: gradients match finite differences of the loss in every tensor") {
  const ModelSpec spec = small_spec();
  const Transformer model(spec, "test");
  const int64_t c = 7;
  const ReferenceAttention ref{{c, spec.head_dim, spec.heads, spec.kv_heads, true}};
  const AttentionFn fwd = [&](int, LayerAttention<float>& t) { ref.forward(t); };
  const AttentionFn bwd = [&](int, LayerAttention<float>& t) { ref.backward(t); };
  const std::vector<int32_t> tokens{72, 101, 108, 108, 111, 256, 33};
  const std::vector<int32_t> targets{101, 108, 108, 111, 256, 33, 10};
  std::vector<int64_t> pos(c);
  for (int64_t i = 0; i < c; ++i) pos[i] = i + 3;  // RoPE sees non-zero positions

  // Larger weights than the 0.02 initialisation, so every gradient is well above fp32 noise.
  std::vector<float> params = model.init(5);
  for (const ParamTensor& t : model.tensors())
    for (size_t i = t.offset; i < t.offset + t.rows * t.cols; ++i)
      params[i] = t.decay ? params[i] * 15.0f : 1.0f + 0.1f * std::sin(static_cast<float>(i));
  std::vector<float> grads(params.size(), 0.0f);
  const double scale = 1.0 / c;
  model.forward_backward(params, grads, tokens.data(), targets.data(), pos.data(), c, scale, fwd, bwd);
  auto loss_at = [&](const std::vector<float>& p) {
    std::vector<float> g(p.size(), 0.0f);
    return model.forward_backward(p, g, tokens.data(), targets.data(), pos.data(), c, scale, fwd, bwd) * scale;
  };
  double worst = 0;
  for (const ParamTensor& t : model.tensors()) {
    const size_t n = static_cast<size_t>(t.rows * t.cols);
    for (size_t k = 0; k < 4; ++k) {
      // Embedding rows of tokens that occur; elsewhere spread over the tensor.
      const size_t i = t.name == "tok_embeddings" ? t.offset + static_cast<size_t>(tokens[k]) * t.cols + k
                                                  : t.offset + (k * 7919) % n;
      const float h = 1e-2f;
      std::vector<float> p = params;
      p[i] = params[i] + h;
      const double up = loss_at(p);
      p[i] = params[i] - h;
      const double down = loss_at(p);
      const double fd = (up - down) / (2.0 * h);
      const double err = std::fabs(fd - grads[i]) / std::max(1e-3, std::fabs(fd));
      worst = std::max(worst, err);
      INFO(t.name << " element " << i - t.offset << ": analytic " << grads[i] << ", finite difference " << fd);
      CHECK(err < 2e-2);
    }
  }
  std::printf("transformer gradient check: largest relative difference %.2e\n", worst);
}

TEST_CASE("transformer: models train cannot run are refused naming the field") {
  ModelSpec m = small_spec();
  m.vocab = 256;
  CHECK_THROWS_WITH_AS(Transformer(m, "plan.yaml"),
                       doctest::Contains("plan.yaml: model test: vocab: must hold the byte "
                                         "tokenizer's 257 tokens (got 256)"),
                       InputError);
  m = small_spec();
  m.gated_ffn = false;
  CHECK_THROWS_AS(Transformer(m, "plan.yaml"), InputError);
}

}  // namespace
}  // namespace rm::exec
