// The 1F1B and interleaved 1F1B programs of a pipeline's stages (see pipeline_schedule.h).
#include "planner/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace rm {

namespace {

// Appends one stage's computes and exchanges; receives get their tags later, by link order.
class StageProgram {
 public:
  StageProgram(int stage, int pp, int v) : s_(stage), p_(pp), v_(v) {}

  void compute(PipelineAction::Kind kind, int micro, int chunk) {
    PipelineAction a;
    a.kind = kind;
    a.micro = micro;
    a.chunk = chunk;
    out_.push_back(a);
  }
  // One exchange: the activation of (micro, chunk) to the next stage and the input
  // gradient of (micro, chunk) to the previous one (micro < 0: none), a receive of an
  // activation from the previous stage and of a gradient from the next one.
  void exchange(int act_micro, int act_chunk, int grad_micro, int grad_chunk, bool recv_act, bool recv_grad) {
    PipelineAction a;
    a.kind = PipelineAction::kExchange;
    const int next = (s_ + 1) % p_, prev = (s_ + p_ - 1) % p_;
    if (act_micro >= 0) a.messages.push_back({next, true, false, act_micro * v_ + act_chunk, -1});
    if (grad_micro >= 0) a.messages.push_back({prev, true, true, grad_micro * v_ + grad_chunk, -1});
    if (recv_act) a.messages.push_back({prev, false, false, -1, -1});
    if (recv_grad) a.messages.push_back({next, false, true, -1, -1});
    if (!a.messages.empty()) out_.push_back(std::move(a));
  }
  std::vector<PipelineAction> take() { return std::move(out_); }

 private:
  int s_, p_, v_;
  std::vector<PipelineAction> out_;
};

int mod(int a, int m) { return ((a % m) + m) % m; }

// 1F1B (Megatron's forward_backward_pipelining_without_interleaving).
std::vector<PipelineAction> one_f_one_b(int s, int p, int m, bool backward) {
  StageProgram g(s, p, 1);
  const bool first = s == 0, last = s == p - 1;
  auto fwd = [&](int i) { g.compute(PipelineAction::kForward, i, 0); };
  auto bwd = [&](int i) { g.compute(PipelineAction::kBackward, i, 0); };
  // Exchanges with the stage after (down) and before (up), where there is one.
  auto down = [&](int send, bool recv) {
    if (!last) g.exchange(send, 0, -1, 0, false, recv);
  };
  auto up = [&](int send, bool recv) {
    if (!first) g.exchange(-1, 0, send, 0, recv, false);
  };
  if (!backward) {
    for (int i = 0; i < m; ++i) {
      up(-1, true);
      fwd(i);
      down(i, false);
    }
    return g.take();
  }
  const int warmup = static_cast<int>(pp_warmup_forwards(p, 1, m, s, true, InterleavedWarmup::kMegatron));
  for (int i = 0; i < warmup; ++i) {
    up(-1, true);
    fwd(i);
    down(i, false);
  }
  const int steady = m - warmup;
  if (steady > 0) up(-1, true);
  for (int i = 0; i < steady; ++i) {
    fwd(warmup + i);
    down(warmup + i, true);
    bwd(i);
    up(i, i + 1 < steady);
  }
  for (int i = steady; i < m; ++i) {
    down(-1, true);
    bwd(i);
    up(i, false);
  }
  return g.take();
}

// Interleaved 1F1B (Megatron's forward_backward_pipelining_with_interleaving, without
// overlapped p2p), its receive flags as Megatron sets them.
std::vector<PipelineAction> interleaved(int s, int p, int v, int m, bool backward, InterleavedWarmup rule) {
  StageProgram g(s, p, v);
  const int total = m * v;
  auto chunk_of = [&](int k, bool forward) {
    const int c = mod(k, p * v) / p;
    return forward ? c : v - 1 - c;
  };
  auto micro_of = [&](int k) { return k / (p * v) * p + k % p; };
  auto last_virtual = [&](int chunk) { return s == p - 1 && chunk == v - 1; };
  auto first_virtual = [&](int chunk) { return s == 0 && chunk == 0; };
  auto fwd = [&](int k) { g.compute(PipelineAction::kForward, micro_of(k), chunk_of(k, true)); };
  auto bwd = [&](int k) { g.compute(PipelineAction::kBackward, micro_of(k), chunk_of(k, false)); };
  // What iteration k's forward and backward send (none from the model's ends).
  auto act = [&](int k) { return last_virtual(chunk_of(k, true)) ? -1 : micro_of(k); };
  auto grad = [&](int k) { return first_virtual(chunk_of(k, false)) ? -1 : micro_of(k); };

  const int warmup = static_cast<int>(pp_warmup_forwards(p, v, m, s, backward, rule));
  const bool all_warmup = warmup == total;
  const int remaining = total - warmup;
  g.exchange(-1, 0, -1, 0, s != 0, false);  // the first chunk's input
  for (int k = 0; k < warmup; ++k) {
    fwd(k);
    bool recv_prev = !(s == 0 && chunk_of(k + 1, true) == 0) && k != total - 1;
    const bool last_warmup = k == warmup - 1 && !all_warmup;
    g.exchange(act(k), chunk_of(k, true), -1, 0, recv_prev, last_warmup && s != p - 1);
  }
  for (int k = 0; k < remaining; ++k) {
    const int fk = k + warmup;
    fwd(fk);
    bwd(k);
    bool recv_prev = s != 0 || chunk_of(fk - (p - 1), true) != v - 1;
    const bool recv_next = s != p - 1 || chunk_of(k - (p - 1), false) != 0;
    if (k == remaining - 1) recv_prev = false;
    g.exchange(act(fk), chunk_of(fk, true), grad(k), chunk_of(k, false), recv_prev, recv_next);
  }
  if (!backward) return g.take();
  if (all_warmup) g.exchange(-1, 0, -1, 0, false, s != p - 1);
  for (int k = remaining; k < total; ++k) {
    bwd(k);
    const bool recv_next = !(s == p - 1 && chunk_of(k + 1, false) == v - 1) && k != total - 1;
    g.exchange(-1, 0, grad(k), chunk_of(k, false), false, recv_next);
  }
  return g.take();
}

}  // namespace

PipelineProgram pp_1f1b_program(int pp, int v, int64_t microbatches, bool backward, InterleavedWarmup warmup) {
  PipelineProgram prog;
  const int m = static_cast<int>(microbatches);
  for (int s = 0; s < pp; ++s) {
    prog.stages.push_back(v > 1 ? interleaved(s, pp, v, m, backward, warmup) : one_f_one_b(s, pp, m, backward));
  }
  // Pair the messages of each directed link in posting order: the n-th receive takes the
  // n-th send's tag.
  struct End {
    int stage;
    size_t action, message;
  };
  std::map<std::pair<int, int>, std::vector<End>> sends, recvs;
  for (int s = 0; s < pp; ++s) {
    auto& actions = prog.stages[static_cast<size_t>(s)];
    for (size_t a = 0; a < actions.size(); ++a) {
      for (size_t i = 0; i < actions[a].messages.size(); ++i) {
        const PipelineMessage& msg = actions[a].messages[i];
        (msg.send ? sends[{s, msg.peer}] : recvs[{msg.peer, s}]).push_back({s, a, i});
      }
    }
  }
  auto at = [&](const End& e) -> PipelineMessage& {
    return prog.stages[static_cast<size_t>(e.stage)][e.action].messages[e.message];
  };
  std::map<std::tuple<int, size_t, size_t>, End> partner;
  auto key = [](const End& e) { return std::tuple<int, size_t, size_t>{e.stage, e.action, e.message}; };
  for (const auto& [link, out] : sends) {
    const std::vector<End>& in = recvs[link];
    if (in.size() != out.size()) {
      throw std::logic_error("pp_1f1b_program: link " + std::to_string(link.first) + " -> " +
                             std::to_string(link.second) + " has " + std::to_string(out.size()) + " sends and " +
                             std::to_string(in.size()) + " receives");
    }
    for (size_t n = 0; n < out.size(); ++n) {
      if (at(out[n]).gradient != at(in[n]).gradient)
        throw std::logic_error("pp_1f1b_program: a link carries activations and gradients");
      at(in[n]).tag = at(out[n]).tag;
      partner[key(out[n])] = in[n];
      partner[key(in[n])] = out[n];
    }
  }
  for (const auto& [link, in] : recvs) {
    if (!sends.count(link)) throw std::logic_error("pp_1f1b_program: a receive without its send");
  }
  // Phases: run the stages, each posting an exchange's messages and waiting for all of
  // them; a message takes the next phase when its second end is posted.
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<char> waiting(static_cast<size_t>(pp), 0);
  std::map<std::tuple<int, size_t, size_t>, bool> posted;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      auto& actions = prog.stages[static_cast<size_t>(s)];
      size_t& i = next[static_cast<size_t>(s)];
      char& w = waiting[static_cast<size_t>(s)];
      if (!w) {
        while (i < actions.size() && actions[i].kind != PipelineAction::kExchange) ++i;
        if (i == actions.size()) continue;
        for (size_t k = 0; k < actions[i].messages.size(); ++k) {
          const End e{s, i, k};
          posted[key(e)] = true;
          const End other = partner.at(key(e));
          if (posted[key(other)]) at(e).phase = at(other).phase = prog.messages++;
        }
        w = 1;
        progress = true;
      }
      const auto& msgs = actions[i].messages;
      if (std::all_of(msgs.begin(), msgs.end(), [](const PipelineMessage& msg) { return msg.phase >= 0; })) {
        w = 0;
        ++i;
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s) {
    if (next[static_cast<size_t>(s)] != prog.stages[static_cast<size_t>(s)].size())
      throw std::logic_error("pp_1f1b_program: stage " + std::to_string(s) + " would deadlock");
    for (PipelineAction& a : prog.stages[static_cast<size_t>(s)]) {
      std::sort(a.messages.begin(), a.messages.end(),
                [](const PipelineMessage& x, const PipelineMessage& y) { return x.phase < y.phase; });
    }
  }
  return prog;
}

int64_t pp_warmup_forwards(int pp, int v, int64_t m, int stage, bool backward, InterleavedWarmup warmup) {
  if (!backward) return m * v;
  if (v == 1) return std::min<int64_t>(pp - stage - 1, m);
  if (m == pp && warmup == InterleavedWarmup::kMegatron) return m * v;
  return std::min(int64_t{2} * (pp - stage - 1) + int64_t{v - 1} * pp, m * v);
}

}  // namespace rm
