// AdamW with clipping (see adamw.h).
#include "executor/adamw.h"

#include <algorithm>
#include <cmath>

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

void adamw_update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments,
                  double norm, std::vector<float>& params, const std::vector<float>& grads,
                  AdamWState& state) {
  if (state.m.size() != params.size()) {
    state.m.assign(params.size(), 0.0f);
    state.v.assign(params.size(), 0.0f);
  }
  // torch.nn.utils.clip_grad_norm_'s rule: scale by clip / (norm + 1e-6) when above.
  const double clip = norm > cfg.clip_norm ? cfg.clip_norm / (norm + 1e-6) : 1.0;
  const double lr = adamw_lr(cfg, state.step);
  ++state.step;
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(state.step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(state.step));
  const float b1 = static_cast<float>(cfg.beta1), b2 = static_cast<float>(cfg.beta2);
  for (const AdamWSegment& t : segments) {
    const float decay = t.decay ? static_cast<float>(1.0 - lr * cfg.weight_decay) : 1.0f;
    for (size_t i = t.begin; i < t.end; ++i) {
      const float g = static_cast<float>(grads[i] * clip);
      state.m[i] = b1 * state.m[i] + (1 - b1) * g;
      state.v[i] = b2 * state.v[i] + (1 - b2) * g * g;
      const double mhat = state.m[i] / bc1, vhat = state.v[i] / bc2;
      params[i] = static_cast<float>(params[i] * decay - lr * mhat / (std::sqrt(vhat) + cfg.eps));
    }
  }
}

}  // namespace rm::exec
