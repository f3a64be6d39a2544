// The 1F1B programs of a pipeline's stages (see pipeline_schedule.h).
#include "planner/pipeline_schedule.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace rm {

namespace {

// Stage s's actions in program order, exchanges not yet numbered.
std::vector<PipelineAction> stage_program(int s, int p, int m, bool backward) {
  std::vector<PipelineAction> out;
  const bool first = s == 0, last = s == p - 1;
  auto compute = [&](PipelineAction::Kind k, int micro) { out.push_back({k, micro, false, -1, -1, -1}); };
  auto exchange = [&](bool up, int send, int recv) {
    if (up ? first : last) return;  // no neighbour on that side
    if (send < 0 && recv < 0) return;
    out.push_back({PipelineAction::kExchange, -1, up, send, recv, -1});
  };
  if (!backward) {
    for (int i = 0; i < m; ++i) {
      exchange(true, -1, i);
      compute(PipelineAction::kForward, i);
      exchange(false, i, -1);
    }
    return out;
  }
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) {
    exchange(true, -1, i);
    compute(PipelineAction::kForward, i);
    exchange(false, i, -1);
  }
  const int steady = m - warmup;
  if (steady > 0) exchange(true, -1, warmup);
  for (int i = 0; i < steady; ++i) {
    compute(PipelineAction::kForward, warmup + i);
    exchange(false, warmup + i, i);
    compute(PipelineAction::kBackward, i);
    exchange(true, i, i + 1 < steady ? warmup + i + 1 : -1);
  }
  for (int i = steady; i < m; ++i) {
    exchange(false, -1, i);
    compute(PipelineAction::kBackward, i);
    exchange(true, i, -1);
  }
  return out;
}

}  // namespace

PipelineProgram pp_1f1b_program(int pp, int64_t microbatches, bool backward) {
  PipelineProgram prog;
  const int m = static_cast<int>(microbatches);
  for (int s = 0; s < pp; ++s) prog.stages.push_back(stage_program(s, pp, m, backward));
  // Number the exchanges as blocking stages would complete them: repeatedly take an
  // exchange both of whose ends are the next exchange in their stage's program.
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  auto next_exchange = [&](int s) -> PipelineAction* {
    auto& prog_s = prog.stages[static_cast<size_t>(s)];
    size_t& i = next[static_cast<size_t>(s)];
    while (i < prog_s.size() && prog_s[i].kind != PipelineAction::kExchange) ++i;
    return i < prog_s.size() ? &prog_s[i] : nullptr;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s + 1 < pp; ++s) {
      PipelineAction* down = next_exchange(s);
      PipelineAction* up = next_exchange(s + 1);
      if (!down || !up || down->up || !up->up) continue;
      if (down->send != up->recv || down->recv != up->send) {
        throw std::logic_error("pp_1f1b_program: stages " + std::to_string(s) + " and " + std::to_string(s + 1) +
                               " disagree on an exchange");
      }
      down->number = up->number = prog.exchanges++;
      ++next[static_cast<size_t>(s)];
      ++next[static_cast<size_t>(s + 1)];
      progress = true;
    }
  }
  for (int s = 0; s < pp; ++s) {
    if (next_exchange(s)) throw std::logic_error("pp_1f1b_program: stage " + std::to_string(s) + " would deadlock");
  }
  return prog;
}

}  // namespace rm
