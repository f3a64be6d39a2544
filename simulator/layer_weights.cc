// Layer weights (see layer_weights.h).
#include "simulator/layer_weights.h"

#include <algorithm>

namespace rm::sim {

// With E >= kMinEmittedLayers the middle layer m = E/2 - 1, in steady state, also stands
// for the L - E layers not emitted; the others count once, keeping their boundary effects.
// With fewer, each emitted layer stands for L/E (not a whole number where E does not
// divide L: the weights are the layers' shares).
LayerWeights::LayerWeights(const OpSchedule& s)
    : w_(std::max(1, s.layers_emitted), 1.0), micro_(s.micro_stand_in_weight), sequence_(s.sequence_stand_in_weight) {
  const int E = s.layers_emitted, L = s.layers_modelled;
  if (L <= E) return;
  if (E >= kMinEmittedLayers) {
    w_[E / 2 - 1] += L - E;
  } else {
    for (double& w : w_) w = static_cast<double>(L) / E;
  }
}

}  // namespace rm::sim
