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
#include "tests/executor/transformer_fixture.h"

namespace rm::exec {
namespace {

using testing::ReferenceAttention;
using testing::small_spec;

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

TEST_CASE("transformer: FSDP units cover the flat vector in order") {
  const Transformer model(small_spec(), "test");
  const auto& units = model.units();
  REQUIRE(units.size() == 2 + 2);  // embedding, 2 blocks, head
  CHECK(units.front().begin == 0);
  CHECK(units.back().end == model.num_params());
  for (size_t u = 1; u < units.size(); ++u) CHECK(units[u].begin == units[u - 1].end);
  CHECK(units[1].name == "layers.0");
}

TEST_CASE("transformer: tensor-parallel members' parts tile the whole model, and init is the whole init's") {
  ModelSpec m = small_spec();
  m.kv_heads = 2;  // tp 2 splits the kv heads too
  m.vocab = 258;
  const Transformer whole(m, "test");
  const Transformer first(m, "test", {.tp = 2, .tp_rank = 0, .chunks = {}}), second(m, "test", {.tp = 2, .tp_rank = 1, .chunks = {}});
  REQUIRE(first.num_params() == second.num_params());
  CHECK(first.full_params() == whole.num_params());
  // Only the norm gains are whole on every member: 2 per layer and the final one.
  const size_t gains = static_cast<size_t>(m.hidden) * (2 * m.layers + 1);
  CHECK(2 * first.num_params() - gains == whole.num_params());
  // Every element of the whole vector is some member's, every local element maps once.
  std::vector<int> covered(whole.num_params(), 0);
  for (int j = 0; j < 2; ++j) {
    std::vector<int> local(first.num_params(), 0);
    for (const PartRun& r : first.part_runs(j))
      for (size_t i = 0; i < r.n; ++i) {
        ++local[r.local + i];
        ++covered[r.full + i];
      }
    for (int n : local) REQUIRE(n == 1);
  }
  size_t twice = 0;
  for (int n : covered) {
    REQUIRE(n >= 1);
    twice += n == 2;
  }
  CHECK(twice == gains);
  // Slicing then joining gives the whole back; each member's init is its slice of the whole's.
  const std::vector<float> init = whole.init(5);
  std::vector<float> parts = first.part_slice(init);
  const std::vector<float> b = second.part_slice(init);
  CHECK(parts == first.init(5));
  CHECK(b == second.init(5));
  parts.insert(parts.end(), b.begin(), b.end());
  CHECK(first.part_join(parts) == init);
  // wq is column-parallel: member 1's first row is the whole's columns [h/2 d, h d) of row 0.
  const ParamTensor& wq = first.tensors()[2];
  REQUIRE(wq.name == "layers.0.attention.wq");
  CHECK(wq.cols == m.heads / 2 * m.head_dim);
  CHECK(b[wq.offset] == init[wq.full_offset + static_cast<size_t>(wq.cols)]);
  // A tp that does not divide the heads, the FFN or the vocabulary is refused naming plan.tp.
  CHECK_THROWS_WITH_AS(Transformer(small_spec(), "plan.yaml", {.tp = 2, .tp_rank = 0, .chunks = {}}),
                       doctest::Contains("plan.yaml: plan.tp: tp 2 must divide the 2 query heads, 1 kv heads"),
                       InputError);
}

TEST_CASE("transformer: a pass suspends between its forward and its backward, once each") {
  // The whole model's pass through PassTask gives forward_backward's loss and gradients;
  // resuming it past its end is refused, not undefined.
  const Transformer model(small_spec(), "test");
  const std::vector<float> params = model.init(9);
  const ModelSpec& spec = model.spec();
  const int64_t c = 6;
  const ReferenceAttention ref{{c, spec.head_dim, spec.heads, spec.kv_heads, true}};
  const AttentionFn fwd = [&](int, LayerAttention<float>& t) { ref.forward(t); };
  const AttentionFn bwd = [&](int, LayerAttention<float>& t) { ref.backward(t); };
  const std::vector<int32_t> tokens{72, 101, 108, 108, 111, 256}, targets{101, 108, 108, 111, 256, 33};
  std::vector<int64_t> pos(c);
  for (int64_t i = 0; i < c; ++i) pos[i] = i;
  std::vector<float> g1(params.size()), g2(params.size());
  const double whole = model.forward_backward<float>(params, g1, tokens.data(), targets.data(), pos.data(), c, 0.5,
                                                      fwd, bwd);
  FullParams<float> access(model.units(), params.data(), g2.data());
  PassTask t = model.pass<float>(cpu_train_kernels<float>(), access, TokenBatch{tokens.data(), targets.data(),
                                                                                 pos.data(), c, 1},
                                 0.5, fwd, bwd, Checkpointing::kNone, nullptr, nullptr, nullptr, nullptr);
  t.forward();
  CHECK(g2 == std::vector<float>(params.size()));  // no gradient before the backward
  CHECK(t.backward() == whole);
  CHECK(g2 == g1);
  CHECK_THROWS_AS(t.backward(), std::logic_error);
}

// Two sequences of one micro-batch (stacked, one call) under each checkpointing policy.
struct BatchRun {
  double loss = 0;
  std::vector<float> grads;
  size_t held = 0;
};

BatchRun run_batch(const Transformer& model, const std::vector<float>& params, Checkpointing ckpt,
                   int sequences) {
  const ModelSpec& spec = model.spec();
  const int64_t c = 6;
  const ReferenceAttention ref{{c, spec.head_dim, spec.heads, spec.kv_heads, true}};
  int forward_calls = 0;
  const AttentionFn fwd = [&](int, LayerAttention<float>& t) { ref.forward(t); ++forward_calls; };
  const AttentionFn bwd = [&](int, LayerAttention<float>& t) { ref.backward(t); };
  const std::vector<int32_t> tokens{72, 101, 108, 108, 111, 256, 33, 7, 9, 200, 12, 10};
  const std::vector<int32_t> targets{101, 108, 108, 111, 256, 33, 7, 9, 200, 12, 10, 72};
  std::vector<int64_t> pos(c);
  for (int64_t i = 0; i < c; ++i) pos[i] = 2 * i;
  BatchRun r;
  r.grads.assign(params.size(), 0.0f);
  FullParams<float> access(model.units(), params.data(), r.grads.data());
  for (int s = 0; s < 2; s += sequences)
    r.loss += model.forward_backward<float>(
        access, TokenBatch{tokens.data() + s * c, targets.data() + s * c, pos.data(), c, sequences},
        0.1, fwd, bwd, ckpt, &r.held);
  // Full recomputation runs each layer's attention forward again before its backward.
  CHECK(forward_calls == (ckpt == Checkpointing::kFull ? 2 : 1) * spec.layers * 2);
  return r;
}

TEST_CASE("transformer: checkpointing recomputes the same gradients and stores less") {
  const Transformer model(small_spec(), "test");
  const std::vector<float> params = model.init(9);
  const BatchRun none = run_batch(model, params, Checkpointing::kNone, 2);
  const BatchRun selective = run_batch(model, params, Checkpointing::kSelective, 2);
  const BatchRun full = run_batch(model, params, Checkpointing::kFull, 2);
  // The same arithmetic in the same order: bit for bit.
  CHECK(selective.loss == none.loss);
  CHECK(full.loss == none.loss);
  CHECK(selective.grads == none.grads);
  CHECK(full.grads == none.grads);
  // Stored for backward: full keeps each layer's input [2c][H] only, selective drops the
  // three [2c][F] SwiGLU intermediates.
  const ModelSpec& m = model.spec();
  const size_t rows = 2 * 6;
  CHECK(full.held == m.layers * rows * m.hidden * sizeof(float));
  CHECK(none.held - selective.held == m.layers * 3 * rows * m.ffn_hidden * sizeof(float));
  std::printf("stored activations for 2 x 6 tokens: none %zu B, selective %zu B, full %zu B\n",
              none.held, selective.held, full.held);
}

TEST_CASE("transformer: a micro-batch of two stacked sequences equals two calls") {
  const Transformer model(small_spec(), "test");
  const std::vector<float> params = model.init(9);
  const BatchRun stacked = run_batch(model, params, Checkpointing::kNone, 2);
  const BatchRun apart = run_batch(model, params, Checkpointing::kNone, 1);
  CHECK(stacked.loss == doctest::Approx(apart.loss).epsilon(1e-6).scale(0));
  double worst = 0, largest = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(stacked.grads[i] - apart.grads[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(apart.grads[i])));
  }
  std::printf("stacked vs separate sequences: largest gradient difference %.2e (largest %.2e)\n",
              worst, largest);
  CHECK(worst <= 1e-5 * largest);
}

TEST_CASE("transformer: mixed precision (bf16 storage) follows the fp32 losses to bf16 rounding") {
  // The same steps with the pass in bf16 (bf16_kernels.h): close to the fp32 losses, not
  // equal to them (the rounding really happens), and deterministic.
  const std::vector<double> fp32 = testing::train_steps(cpu_train_kernels<float>(), 6);
  const std::vector<double> bf16 = testing::train_steps(cpu_train_kernels<float>(), 6, true);
  REQUIRE(bf16.size() == fp32.size());
  double worst = 0;
  for (size_t s = 0; s < fp32.size(); ++s) worst = std::max(worst, std::fabs(bf16[s] - fp32[s]) / fp32[s]);
  std::printf("bf16 storage against fp32: largest relative loss difference over 6 steps %.2e\n", worst);
  CHECK(worst < 1e-2);
  CHECK(worst > 0);
  CHECK(testing::train_steps(cpu_train_kernels<float>(), 6, true) == bf16);
}

TEST_CASE("transformer: AdamW steps on the kernels are deterministic") {
  // The fixture the GPU test compares the cuda kernels with: a rerun is bit for bit the
  // same (nothing in a step depends on more than its inputs), and on hashed bytes the
  // loss stays near ln 257, the uniform guess of the untrained model.
  const std::vector<double> losses = testing::train_steps(cpu_train_kernels<float>(), 4);
  CHECK(testing::train_steps(cpu_train_kernels<float>(), 4) == losses);
  for (double l : losses) CHECK(std::fabs(l - std::log(257.0)) < 0.1);
}

}  // namespace
}  // namespace rm::exec
