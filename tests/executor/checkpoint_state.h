// A training state for the checkpoint tests and the checkpoint fuzz target: the model
// initialised from `step`, a data position and AdamW moments of fixed values, so a round
// trip compares every array checkpoint.h writes.
#pragma once

#include <cstdint>

#include "executor/checkpoint.h"

namespace rm::exec::testing {

inline TrainState checkpoint_state(const Transformer& model, int64_t step) {
  TrainState s;
  s.step = step;
  s.seed = 11;
  s.data = {2, 1234};
  s.params = model.init(static_cast<uint64_t>(step));
  s.optimizer.step = step;
  s.optimizer.m.assign(s.params.size(), 0.5f);
  s.optimizer.v.assign(s.params.size(), 0.25f);
  return s;
}

}  // namespace rm::exec::testing
