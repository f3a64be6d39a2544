// AdamW (Loshchilov & Hutter 2019) with global gradient-norm clipping, over a rank's part
// of the model's flat fp32 parameter vector (transformer.h): the whole vector, or its FSDP
// shards (fsdp.h), in the memory of the kernels that run it (train_kernels.h: the host
// for cpu, the GPU for cuda). It is elementwise, so every rank updating its own elements
// from the same global gradient norm gives the same parameters as one rank updating them
// all.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/transformer.h"

namespace rm::exec {

// Defaults of Llama 2's pre-training (Touvron et al. 2023, section 2.2: beta1 0.9,
// beta2 0.95, eps 1e-5, weight decay 0.1, gradient clipping 1.0). The learning rate and
// warm-up suit the shipped tiny and small models on bytes (chosen by short runs here,
// see README "Training"), with a linear warm-up as Llama's and no decay afterwards, so a
// run's trajectory does not depend on its --steps.
struct AdamWConfig {
  double lr = 3e-3;
  int warmup_steps = 10;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-5;
  double weight_decay = 0.1;  // on matrices only (ParamTensor::decay)
  double clip_norm = 1.0;
};

// AdamW's state as a checkpoint holds it (host memory, the whole model).
struct AdamWState {
  int64_t step = 0;  // updates applied
  std::vector<float> m, v;
};

// Elements [begin, end) of the arrays AdamW updates, with or without weight decay.
struct AdamWSegment {
  size_t begin = 0, end = 0;
  bool decay = true;
};
// The segments of the whole flat vector: one per tensor.
std::vector<AdamWSegment> whole_model_segments(const std::vector<ParamTensor>& tensors);

// The learning rate of update number `step` (0-based).
double adamw_lr(const AdamWConfig& cfg, int64_t step);

// Update number `step` (0-based): clips the gradients of the global norm `grad_norm` (over
// all ranks' parts) to cfg.clip_norm, then applies one AdamW update to the `segments` of
// `params`, with the moments m and v (all four arrays the same size, in `kernels`' memory).
void adamw_update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments,
                  double grad_norm, int64_t step, TrainKernels<float>& kernels,
                  View<float> params, ConstView<float> grads, View<float> m, View<float> v);
// The same with both moments stored in bf16 (TrainKernels::adamw_bf16_moments).
void adamw_update(const AdamWConfig& cfg, const std::vector<AdamWSegment>& segments,
                  double grad_norm, int64_t step, TrainKernels<float>& kernels,
                  View<float> params, ConstView<float> grads, View<Bf16> m, View<Bf16> v);

}  // namespace rm::exec
