// AdamW with clipping (see adamw.h).
#include "executor/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace rm::exec {

double adamw_lr(const AdamWConfig& cfg, int64_t step) {
  if (cfg.warmup_steps <= 0) return cfg.lr;
  return cfg.lr * std::min(1.0, static_cast<double>(step + 1) / cfg.warmup_steps);
}

std::vector<AdamWSegment> whole_model_segments(const std::vector<ParamTensor>& tensors) {
  std::vector<AdamWSegment> s;
  for (const ParamTensor& t : tensors)
    s.push_back({t.offset, t.offset + static_cast<size_t>(t.rows * t.cols), t.decay});
  return s;
}

namespace {

// Both overloads: the moments' element type M picks the kernel.
template <class M>
void update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments, double norm, int64_t step,
            TrainKernels<float>& kernels, View<float> params, ConstView<float> grads, View<M> m, View<M> v) {
  AdamWScalars s;
  // torch.nn.utils.clip_grad_norm_'s rule: scale by clip / (norm + 1e-6) when above.
  s.clip = norm > cfg.clip_norm ? cfg.clip_norm / (norm + 1e-6) : 1.0;
  s.lr = adamw_lr(cfg, step);
  s.bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(step + 1));
  s.bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(step + 1));
  s.eps = cfg.eps;
  s.b1 = static_cast<float>(cfg.beta1);
  s.b2 = static_cast<float>(cfg.beta2);
  for (const AdamWSegment& t : segments) {
    s.decay = t.decay ? static_cast<float>(1.0 - s.lr * cfg.weight_decay) : 1.0f;
    const auto at = [&](auto view) {
      view.data += t.begin;
      view.rows = 1;
      view.cols = static_cast<int64_t>(t.end - t.begin);
      return view;
    };
    if constexpr (std::is_same_v<M, Bf16>) kernels.adamw_bf16_moments(at(params), at(grads), at(m), at(v), s);
    else kernels.adamw(at(params), at(grads), at(m), at(v), s);
  }
}

}  // namespace

void adamw_update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments, double norm, int64_t step,
                  TrainKernels<float>& kernels, View<float> params, ConstView<float> grads, View<float> m,
                  View<float> v) {
  update(cfg, segments, norm, step, kernels, params, grads, m, v);
}

void adamw_update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments, double norm, int64_t step,
                  TrainKernels<float>& kernels, View<float> params, ConstView<float> grads, View<Bf16> m,
                  View<Bf16> v) {
  update(cfg, segments, norm, step, kernels, params, grads, m, v);
}

}  // namespace rm::exec
