// Layer extrapolation: how many of the model's layers the ops of each emitted layer
// stand for, when the schedule emits E of the model's L identical layers (OpSchedule::
// layers_emitted < layers_modelled; E need not divide L). Both replays (free_walk.h,
// simgrid_replay.h) weight each op's seconds by it, and replay() its useful FLOPs.
//
// Layers at either end differ from the rest: the first all-gather is exposed, and the
// last backward layers share links with the head's reduce-scatter (in a 16-GPU step of
// llama2-7b the last three take 2.5 % longer, up to four on some GPUs as waits shift
// between layers; in an 8K-token FSDP step, where the collectives nearly fill each
// layer's compute, the shifts reach the middle of 8 emitted layers: 8.5 % over the full
// replay, 16 layers match it to 1e-6). So with E >= kMinEmittedLayers the middle layer
// E/2 - 1, seven or more layers from either end, stands for itself and the L - E layers
// not emitted, the others for themselves; with fewer, every emitted layer stands for L/E
// (boundary effects then count L/E times). Ops outside the layers (embedding, head,
// optimizer) count once. Folded micro-steps (OpSchedule::micro_stand_in_weight): the ops
// of the stand-in micro-step, in a layer or not, count that many times more; folded
// sequences (sequence_stand_in_weight) likewise.
#pragma once

#include <vector>

#include "planner/op_list.h"

namespace rm::sim {

inline constexpr int kMinEmittedLayers = 16;  // see above

class LayerWeights {
 public:
  explicit LayerWeights(const OpSchedule& s);
  // Ops outside the layers (embedding, head, optimizer) count once.
  double operator()(const Op& op) const {
    return (op.layer >= 0 ? w_[op.layer] : 1.0) * (op.micro_stand_in ? micro_ : 1.0) *
           (op.sequence_stand_in ? sequence_ : 1.0);
  }

 private:
  std::vector<double> w_;  // by emitted layer
  double micro_ = 1;       // OpSchedule::micro_stand_in_weight
  double sequence_ = 1;    // OpSchedule::sequence_stand_in_weight
};

// A sum over ops, each weighted by the layers it stands for.
struct Weighted {
  double sum = 0;
  void add(const LayerWeights& w, const Op& op, double v) { sum += w(op) * v; }
};

}  // namespace rm::sim
