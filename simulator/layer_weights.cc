// Layer weights (see layer_weights.h).
#include "simulator/layer_weights.h"

#include <algorithm>

namespace rm::sim {

// With E >= kMinEmittedLayers the middle layer m = E/2 - 1, in steady state, also stands
// for the L - E layers not emitted; the others count once, keeping their boundary effects.
// With fewer, each emitted layer stands for L/E.
LayerWeights::LayerWeights(const OpSchedule& s)
    : w_(std::max(1, s.layers_emitted), 1.0), micro_(s.micro_stand_in_weight) {
  const int E = s.layers_emitted, L = E * s.layer_multiplier;
  if (L == E) return;
  if (E >= kMinEmittedLayers) {
    w_[E / 2 - 1] += L - E;
  } else {
    for (double& w : w_) w = s.layer_multiplier;
  }
}

}  // namespace rm::sim
