#include "planner/pipeline_parallel.h"

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/tensor_parallel.h"

namespace rm {

PipelineLayout pp_layout(int layers, const PlanChoice& c) {
  return {layers, std::max(1, c.pp), std::max(1, c.virtual_stages), c.account_for_embedding_in_pipeline_split,
          c.account_for_loss_in_pipeline_split};
}

namespace {

int units(const PipelineLayout& l) { return l.layers + (l.embedding_as_layer ? 1 : 0) + (l.loss_as_layer ? 1 : 0); }

}  // namespace

int pp_chunk_layer_count(const PipelineLayout& l, int chunk) {
  const int S = l.pp * l.virtual_stages, U = units(l);
  if (S < 1) return 0;
  return U / S + (chunk < U % S ? 1 : 0) - (l.embedding_as_layer && chunk == 0 ? 1 : 0) -
         (l.loss_as_layer && chunk == S - 1 ? 1 : 0);
}

int pp_chunk_first_layer(const PipelineLayout& l, int chunk) {
  const int S = l.pp * l.virtual_stages, U = units(l);
  if (S < 1 || chunk <= 0) return 0;
  return chunk * (U / S) + std::min(chunk, U % S) - (l.embedding_as_layer ? 1 : 0);
}

int pp_stage_layer_count(const PipelineLayout& l, int stage) {
  const int S = l.pp * l.virtual_stages, U = units(l);
  if (S < 1) return 0;
  // Its v chunks stage + k·pp, of which those below U mod S take one more.
  const int extra = U % S;
  const int more = stage < extra ? std::min(l.virtual_stages, (extra - stage + l.pp - 1) / l.pp) : 0;
  return l.virtual_stages * (U / S) + more - (l.embedding_as_layer && stage == 0 ? 1 : 0) -
         (l.loss_as_layer && stage == l.pp - 1 ? 1 : 0);
}

std::vector<int> pp_stage_layers(const PipelineLayout& l) {
  std::vector<int> out(static_cast<size_t>(std::max(1, l.pp)), 0);
  for (int s = 0; s < l.pp; ++s) out[static_cast<size_t>(s)] = pp_stage_layer_count(l, s);
  return out;
}

std::string pp_why_invalid(const PipelineLayout& l, int64_t microbatches) {
  auto str = [](auto x) { return std::to_string(x); };
  const int pp = l.pp, v = l.virtual_stages;
  if (pp < 1) return "pp must be >= 1 (got " + str(pp) + ")";
  if (v < 1) return "virtual_stages must be >= 1 (got " + str(v) + ")";
  const bool accounted = l.embedding_as_layer || l.loss_as_layer;
  if (pp == 1) {
    if (v > 1) return "virtual stages " + str(v) + " need pp > 1 (the interleaved schedule is a pipeline's)";
    if (accounted)
      return std::string(l.embedding_as_layer ? "account_for_embedding_in_pipeline_split"
                                              : "account_for_loss_in_pipeline_split") +
             " needs pp > 1 (it decides a pipeline split)";
    return "";
  }
  const std::string counted = std::string(l.embedding_as_layer ? " + the embedding" : "") +
                              (l.loss_as_layer ? " + the loss" : "");
  if (v > 1 && units(l) % (pp * v) != 0)
    return "virtual stages " + str(v) + " need the " + str(l.layers) + " layers" + counted +
           " to be a multiple of pp x virtual stages = " + str(pp * v);
  // Each chunk holds a unit: a counted embedding or head may be a chunk's only one (the
  // Llama 3 paper's first chunk "has only the embedding").
  if (units(l) < pp * v)
    return (v > 1 ? "pp x virtual stages = " + str(pp * v) : "pp " + str(pp)) + " leaves a stage without layers (the model has " +
           str(l.layers) + counted + ")";
  if (v > 1 && microbatches % pp != 0)
    return "the interleaved schedule needs the micro-batches per pipeline (" + str(microbatches) +
           ") to be a multiple of pp " + str(pp) + " (Megatron's rule)";
  return "";
}

std::string pp_replay_why_not(int pp, int virtual_stages) {
  if (virtual_stages == 1 || pp > 2) return "";
  return "the interleaved 1F1B schedule (virtual_stages " + std::to_string(virtual_stages) +
         ") is generated for pp > 2 (got pp " + std::to_string(pp) +
         "): with one neighbour both ways a link would carry activations and gradients in one exchange";
}

std::string pp_order_why_invalid(const PlanChoice& c) {
  if (c.pp <= 1 || c.order == tp_order(c.tp, c.cp, c.dp * c.pp)) return "";
  return "with pp > 1 the order must be the tp-cp-dp-pp rank order (stages outermost)";
}

double pp_bubble_fraction(int pp, int v, int64_t m) {
  const double b = pp - 1.0;
  return b / (static_cast<double>(std::max(1, v)) * static_cast<double>(m) + b);
}

PipelineTime pp_step_time(const std::vector<double>& stage_s, int v, int64_t m) {
  double sum = 0, slowest = 0;
  for (double x : stage_s) {
    sum += x;
    slowest = std::max(slowest, x);
  }
  return pp_step_time(sum, slowest, v, m);
}

PipelineTime pp_step_time(double sum, double slowest, int v, int64_t m) {
  PipelineTime t;
  t.bubble_s = (sum - slowest) / std::max(1, v);
  t.step_s = static_cast<double>(m) * slowest + t.bubble_s;
  return t;
}

PipelineMakespan::PipelineMakespan(const PipelineProgram& program, int v) {
  const int pp = static_cast<int>(program.stages.size());
  const int chunks = chunks_ = pp * v;
  int64_t m = 0;
  for (const PipelineAction& a : program.stages.front())
    if (a.kind == PipelineAction::kForward) m = std::max<int64_t>(m, a.micro + 1);
  // The action that completed each (virtual stage, micro-batch)'s forward and backward, and
  // each stage's last one; -1: not yet run.
  std::vector<int> node_f(static_cast<size_t>(chunks * m), -1), node_b(node_f), last(static_cast<size_t>(pp), -1);
  auto at = [m](int g, int k) { return static_cast<size_t>(g * m + k); };
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  // Worklist of stages that may advance: each action runs once, and finishing one wakes
  // the stage its result unblocks.
  std::vector<int> work(static_cast<size_t>(pp));
  for (int s = 0; s < pp; ++s) work[static_cast<size_t>(s)] = s;
  std::vector<char> queued(static_cast<size_t>(pp), 1);
  // Exchanges block as Megatron's do: a stage leaves one when every peer of its messages has
  // reached the matching one (by phase), at the latest arrival (their transfer time is in
  // the chunks' times). arrivals: by phase, the actions each end arrived after; posted: this
  // stage's arrival at its current exchange is recorded.
  std::vector<std::vector<int>> arrivals(static_cast<size_t>(program.messages));
  std::vector<char> posted(static_cast<size_t>(pp), 0);
  auto wake_stage = [&](int w) {
    if (!queued[static_cast<size_t>(w)]) {
      queued[static_cast<size_t>(w)] = 1;
      work.push_back(w);
    }
  };
  auto add_node = [&](int s, int time, std::initializer_list<int> also) {
    Node n;
    n.deps_begin = static_cast<int>(deps_.size());
    if (last[static_cast<size_t>(s)] >= 0) deps_.push_back(last[static_cast<size_t>(s)]);
    for (int d : also)
      if (d >= 0) deps_.push_back(d);
    n.deps_end = static_cast<int>(deps_.size());
    n.time = time;
    nodes_.push_back(n);
    return last[static_cast<size_t>(s)] = static_cast<int>(nodes_.size()) - 1;
  };
  while (!work.empty()) {
    const int s = work.back();
    work.pop_back();
    queued[static_cast<size_t>(s)] = 0;
    const std::vector<PipelineAction>& acts = program.stages[static_cast<size_t>(s)];
    size_t& i = next[static_cast<size_t>(s)];
    for (; i < acts.size(); ++i) {
      const PipelineAction& a = acts[i];
      if (a.kind == PipelineAction::kExchange) {
        if (!posted[static_cast<size_t>(s)]) {
          posted[static_cast<size_t>(s)] = 1;
          for (const PipelineMessage& msg : a.messages) {
            arrivals[static_cast<size_t>(msg.phase)].push_back(last[static_cast<size_t>(s)]);
            if (msg.peer != s) wake_stage(msg.peer);
          }
        }
        bool ready = true;
        for (const PipelineMessage& msg : a.messages) ready = ready && arrivals[static_cast<size_t>(msg.phase)].size() >= 2;
        if (!ready) break;
        // It waits for every end's arrival (its own, the stage's last action, add_node lists).
        const int own = last[static_cast<size_t>(s)];
        const int n = add_node(s, -1, {});
        for (const PipelineMessage& msg : a.messages)
          for (int d : arrivals[static_cast<size_t>(msg.phase)])
            if (d >= 0 && d != own) deps_.push_back(d);
        nodes_[static_cast<size_t>(n)].deps_end = static_cast<int>(deps_.size());
        posted[static_cast<size_t>(s)] = 0;
        continue;
      }
      const int g = a.chunk * pp + s;
      int wake;
      if (a.kind == PipelineAction::kForward) {
        const int ready = g == 0 ? -1 : node_f[at(g - 1, a.micro)];
        if (g > 0 && ready < 0) break;
        node_f[at(g, a.micro)] = add_node(s, a.micro == 0 ? 2 * chunks + g : g, {ready});
        wake = g + 1 < chunks ? (g + 1) % pp : -1;
      } else {
        const int ready = g + 1 == chunks ? node_f[at(g, a.micro)] : node_b[at(g + 1, a.micro)];
        if (ready < 0) break;
        node_b[at(g, a.micro)] = add_node(s, a.micro == m - 1 ? 3 * chunks + g : chunks + g, {ready});
        wake = g > 0 ? (g - 1) % pp : -1;
      }
      if (wake >= 0 && wake != s) wake_stage(wake);
    }
  }
}

double PipelineMakespan::operator()(const std::vector<double>& fwd, const std::vector<double>& bwd,
                                    const std::vector<double>* fwd_first, const std::vector<double>* bwd_last) const {
  // The search prices many pipelines: the buffers are kept between calls.
  thread_local std::vector<double> duration, done;
  duration.resize(4 * static_cast<size_t>(chunks_));
  std::copy(fwd.begin(), fwd.begin() + chunks_, duration.begin());
  std::copy(bwd.begin(), bwd.begin() + chunks_, duration.begin() + chunks_);
  const std::vector<double>& first = fwd_first ? *fwd_first : fwd;
  std::copy(first.begin(), first.begin() + chunks_, duration.begin() + 2 * chunks_);
  const std::vector<double>& last = bwd_last ? *bwd_last : bwd;
  std::copy(last.begin(), last.begin() + chunks_, duration.begin() + 3 * chunks_);
  done.resize(nodes_.size());
  double end = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    double t = 0;
    for (int d = n.deps_begin; d < n.deps_end; ++d) t = std::max(t, done[static_cast<size_t>(deps_[static_cast<size_t>(d)])]);
    if (n.time >= 0) t += duration[static_cast<size_t>(n.time)];
    done[i] = t;
    end = std::max(end, t);
  }
  return end;
}

double pp_program_makespan(const PipelineProgram& program, int v, const std::vector<double>& fwd,
                           const std::vector<double>& bwd, const std::vector<double>* fwd_first,
                           const std::vector<double>* bwd_last) {
  return PipelineMakespan(program, v)(fwd, bwd, fwd_first, bwd_last);
}

int64_t pp_makespan_microbatches(int pp, int v, int64_t m) {
  // 1F1B's warm-up and cool-down span p - 1 micro-batches each; interleaved ones up to
  // 2·(p - 1) + (v - 1)·p chunk micro-batches, a multiple of p kept (Megatron's rule).
  return std::min<int64_t>(m, v == 1 ? int64_t{2} * pp : int64_t{v + 3} * pp);
}

int64_t pp_interleaved_exchanges(int pp, int v, int64_t m, int stage, bool backward, InterleavedWarmup warmup) {
  const int64_t computes = m * v;
  return backward ? computes + pp_warmup_forwards(pp, v, m, stage, true, warmup) : computes;
}

int64_t pp_in_flight(int pp, int v, int64_t m, int stage, InterleavedWarmup warmup) {
  // The warm-up's forwards plus the one in its forward (module docs).
  return std::min(pp_warmup_forwards(pp, v, m, stage, true, warmup) + 1, m * std::max(1, v));
}

double pp_held_in_flight(const PipelineLayout& l, int64_t m, int stage, InterleavedWarmup warmup,
                         const std::vector<double>& chunk_bytes, bool at_head) {
  const int p = l.pp, v = l.virtual_stages;
  const int64_t warm = pp_in_flight(p, v, m, stage, warmup) - 1;
  auto bytes = [&](int chunk) { return chunk_bytes[static_cast<size_t>(chunk)]; };
  bool equal = true;
  for (int c = 1; c < v; ++c) equal = equal && bytes(c) == bytes(0);
  if (equal) return bytes(0) * static_cast<double>(warm + 1);
  // Walk the stage's order: warm-up forwards, then a forward and a backward each (the peak
  // is after a forward), then the cool-down backwards. The steady state repeats every p·v
  // forwards (each adds the chunk it takes away p·v later), so one round of it is enough.
  const int64_t total = m * v, group = int64_t{p} * v;
  auto fwd_chunk = [&](int64_t k) { return static_cast<int>((k % group) / p); };
  auto bwd_chunk = [&](int64_t k) { return v - 1 - static_cast<int>((k % group) / p); };
  double held = 0, most = 0;
  auto forward = [&](int64_t k) {
    held += bytes(fwd_chunk(k));
    if (!at_head || fwd_chunk(k) == v - 1) most = std::max(most, held);
  };
  int64_t f = 0, b = 0;
  for (; f < std::min(warm, total); ++f) forward(f);
  for (const int64_t end = std::min(total, warm + group); f < end;) {
    forward(f++);
    held -= bytes(bwd_chunk(b++));
  }
  return most;
}

double pp_p2p_bytes(const ModelSpec& m, int64_t c, int micro_batch, int element_bytes, int tp) {
  return static_cast<double>(micro_batch) * static_cast<double>(c) * m.hidden * element_bytes / std::max(1, tp);
}

PipelineStageBuffers pipeline_stage_buffers(const PipelineLayout& l, int stage, Framework framework, bool backward,
                                            int64_t microbatches, double message_bytes, double final_hidden_bytes) {
  PipelineStageBuffers b;
  const size_t v = static_cast<size_t>(l.virtual_stages);
  b.held_output.assign(v, 0);
  b.shared_input.assign(v, 0);
  const int S = l.pp * l.virtual_stages;
  const bool torch = framework == Framework::kPytorch;
  b.boundary = stage == l.pp - 1 ? final_hidden_bytes : torch ? 0 : message_bytes;
  if (!torch) return b;
  const double all = static_cast<double>(microbatches) * message_bytes;
  for (size_t c = 0; c < v; ++c) {
    const int g = static_cast<int>(c) * l.pp + stage;
    if (g != 0) b.persistent += all;
    if (g != S - 1) {
      if (backward) b.persistent += all;
      b.held_output[c] = message_bytes;
    }
    if (g != 0 && pp_chunk_layer_count(l, g) > 0) b.shared_input[c] = message_bytes;
  }
  return b;
}

double pp_stage_params(const ModelSpec& m, const PipelineLayout& l, int stage) {
  const double table = static_cast<double>(m.vocab) * m.hidden;
  double p = pp_stage_layer_count(l, stage) * m.layer_params();
  if (l.pp == 1) return p + (m.tied_embeddings ? 1.0 : 2.0) * table;
  if (stage == 0 || stage == l.pp - 1) p += table;  // embedding / head (a tied table is held at both ends)
  return p;
}

std::vector<int> pp_peak_stage_candidates(int pp) {
  if (pp <= 1) return {0};
  if (pp == 2) return {0, 1};
  return {0, 1, pp - 1};
}

std::vector<std::vector<int>> pp_fsdp_groups(int gpus, int tp, int pp) {
  const int per_stage = gpus / pp;
  std::vector<std::vector<int>> groups;
  for (int s = 0; s < pp; ++s) {
    for (int t = 0; t < tp; ++t) {
      std::vector<int> g;
      for (int j = t; j < per_stage; j += tp) g.push_back(s * per_stage + j);
      groups.push_back(std::move(g));
    }
  }
  return groups;
}

PlanChoice pp_flattened(const PlanChoice& choice) {
  PlanChoice f = choice;
  f.dp = choice.dp * choice.pp;
  f.pp = 1;
  f.virtual_stages = 1;
  return f;
}

const char* pp_schedule_name(int v) { return v > 1 ? "Interleaved1F1B" : "1F1B"; }

CostModel::PipelineStep CostModel::pipeline_step(const Job& job, const PlanChoice& ch, const LayerTimes& real,
                                                 const LayerTimes& free, double fsdp_layer,
                                                 const PipelineEnds& fsdp_ends,
                                                 const ForwardGathers& first_gathers, const LastBackward& last_backward,
                                                 double logits,
                                                 int64_t m) {
  const int p = ch.pp, v = ch.virtual_stages;
  const bool fwd_only = job.passes == Passes::kForward;
  const InterleavedWarmup warmup = pp_interleaved_warmup(job.framework);
  // Interleaved: the replayed op lists exchange once per forward-backward pair in the
  // steady state, with both neighbours at once (each GPU sends to both: the both-ways
  // pattern), but after every compute in the warm-up and the cool-down
  // (pp_interleaved_exchanges), sending to one neighbour and receiving from the other (the
  // one-way pattern; charging those both ways overpriced a step of pp 4 x v 4 over 4
  // micro-batches, all warm-up, by 3.4 % where TP 8 fills each node and the stages talk
  // over its NICs); charged as such, a micro-batch's share of them (agreement_test.cc). Two
  // per chunk micro-batch, 25 % more at pp 8 x v 4, was within 1.2 % only while each
  // chunk's gradient reduction was waited for at its end. 1F1B: one per micro-batch with
  // each neighbour, as the replayed op lists run it (pipeline_schedule.h: a stage's down
  // exchange sends the activation and takes the gradient back, its up exchange the
  // reverse), so the first and last stages wait for one exchange per micro-batch, not two
  // (charging two overpriced a step 0.5 %, pp 4 of 8 micro-batches in agreement_test.cc).
  const double message =
      pp_p2p_bytes(model_, job.seq_len / ch.cp, ch.micro_batch, fabric_.topology().gpu.element_bytes, ch.tp);
  const double both_ways = pp_p2p_pattern(p).time(message);
  const double one_way = v > 1 ? pp_p2p_pattern(p, false).time(message) : 0;
  std::vector<double> exchange_s(static_cast<size_t>(p));  // each stage's exchanges, per micro-batch
  for (int s = 0; s < p; ++s) {
    double& x = exchange_s[static_cast<size_t>(s)];
    if (v == 1) {
      x = ((s > 0 ? 1 : 0) + (s + 1 < p ? 1 : 0)) * both_ways;
      continue;
    }
    const int64_t all = pp_interleaved_exchanges(p, v, m, s, !fwd_only, warmup);
    const int64_t steady = fwd_only ? 0 : m * v - pp_warmup_forwards(p, v, m, s, true, warmup);
    x = (static_cast<double>(steady) * both_ways + static_cast<double>(all - steady) * one_way) / static_cast<double>(m);
  }
  const double real_layer = real.total() + fsdp_layer, free_layer = free.total();
  double real_sum = 0, real_max = 0, free_sum = 0, free_max = 0, x_sum = 0, x_max = 0;
  PipelineStep out;
  const PipelineLayout layout = pp_layout(model_.layers, ch);
  // Per chunk g = c·p + s (model order): its layers, FSDP's ends (the model's first or last
  // chunk, else a middle one: the op lists gather and scatter per chunk; one per micro-batch
  // undercharged a 256-GPU FSDP step by 3.9 %), the head on the last, and its stage's
  // exchanges shared among the stage's chunks.
  const int S = p * v;
  std::vector<double> real_chunk(static_cast<size_t>(S)), first_excess(static_cast<size_t>(S), 0),
      last_excess(first_excess);
  std::vector<double> real_stage(static_cast<size_t>(p), 0), free_stage(static_cast<size_t>(p), 0);
  std::vector<double> free_chunk(static_cast<size_t>(S));
  bool uneven = false, ends_differ = false;
  for (int g = 0; g < S; ++g) {
    const int s = g % p, n = pp_chunk_layer_count(layout, g);
    uneven = uneven || n != pp_chunk_layer_count(layout, 0);
    // Its layers that prefetch the next one's weights (the last chunk's last, the head's).
    const int prefetching = g == S - 1 ? n : std::max(0, n - 1);
    if (m > 1) {
      first_excess[static_cast<size_t>(g)] =
          prefetching * first_gathers.per_layer + first_gathers.end(g == 0);
      last_excess[static_cast<size_t>(g)] = n * last_backward.per_layer + (g == S - 1 ? last_backward.head : 0);
    }
    const double head = g == S - 1 ? logits : 0;
    const double ends = g == 0 ? fsdp_ends.first : g == S - 1 ? fsdp_ends.last : fsdp_ends.middle;
    real_chunk[static_cast<size_t>(g)] = n * real_layer - (n - prefetching) * first_gathers.mean_per_layer + ends +
                                         head + exchange_s[static_cast<size_t>(s)] / v;
    // The last micro-batch's backward of a chunk leaves its last layer's collectives in
    // flight (LastBackward; with one micro-batch, that is every backward). Charged there,
    // an interleaved zero1 step of pp 4 x 4 chunks on the TPU torus was priced 17 % over
    // its replay; with one micro-batch, a ddp step of pp 4 there 12 %.
    if (g > 0 && n > 0) {
      const double off = g < p ? last_backward.handed_off : last_backward.in_flight;
      (m > 1 ? last_excess : real_chunk)[static_cast<size_t>(g)] -= off;
    }
    // Its lowest layer's backward prefetches nothing (with one micro-batch, above, that
    // layer's whole slot is off the path on every chunk but the first).
    if (n > 0 && (m > 1 || g == 0)) real_chunk[static_cast<size_t>(g)] -= fsdp_ends.unprefetched;
    ends_differ = ends_differ || first_excess[static_cast<size_t>(g)] != 0 || last_excess[static_cast<size_t>(g)] != 0;
    real_stage[static_cast<size_t>(s)] += real_chunk[static_cast<size_t>(g)];
    free_chunk[static_cast<size_t>(g)] = n * free_layer + head;
    free_stage[static_cast<size_t>(s)] += free_chunk[static_cast<size_t>(g)];
  }
  for (int s = 0; s < p; ++s) {
    const double r = real_stage[static_cast<size_t>(s)], f = free_stage[static_cast<size_t>(s)];
    x_sum += exchange_s[static_cast<size_t>(s)];
    x_max = std::max(x_max, exchange_s[static_cast<size_t>(s)]);
    real_sum += r;
    free_sum += f;
    if (r > real_max) out.fsdp_ends = (s == 0 ? fsdp_ends.first : s == p - 1 ? fsdp_ends.last : fsdp_ends.middle) +
                                      (v - 1) * fsdp_ends.middle;
    real_max = std::max(real_max, r);
    free_max = std::max(free_max, f);
    out.layers = std::max(out.layers, pp_stage_layer_count(layout, s));
  }
  // Chunks of equal layers: the closed form (pipeline_parallel.h; the head and the ends'
  // exchanges make the last and the outer stages slower, within 0.3 % of the replayed op
  // lists for 1F1B and 0.4 % interleaved, agreement_test.cc). Uneven splits: the stages'
  // programs run with these times (pp_program_makespan), the micro-batches past its warm-up
  // and cool-down each adding the slowest stage's time.
  const double forward_share =
      real_layer > 0 ? (real.attention_fwd + real.linear_fwd + real.tp_fwd + fsdp_layer / 3) / real_layer : 1.0 / 3;
  // (Megatron interleaves with pp > 2 only; the programs are generated for those.)
  // The free-communication step runs the same program with its chunks' own times.
  const double free_forward_share =
      free_layer > 0 ? (free.attention_fwd + free.linear_fwd + free.tp_fwd) / free_layer : 1.0 / 3;
  PipelineTime rt = pp_step_time(real_sum, real_max, v, m);
  PipelineTime ft = pp_step_time(free_sum, free_max, v, m);
  if ((uneven || ends_differ) && !(v > 1 && p < 3)) {
    const int64_t mm = pp_makespan_microbatches(p, v, m);
    const PipelineMakespan& makespan = pp_makespan(p, v, mm, !fwd_only, warmup);
    // The program's makespan with chunk times `t`, split by `share` into forward and backward.
    auto program = [&](const std::vector<double>& t, double share, std::vector<double>& fwd, std::vector<double>& bwd) {
      fwd.resize(t.size());
      bwd.resize(t.size());
      for (size_t g = 0; g < t.size(); ++g) {
        fwd[g] = (fwd_only ? 1.0 : share) * t[g];
        bwd[g] = t[g] - fwd[g];
      }
      return makespan(fwd, bwd);
    };
    std::vector<double> fwd, bwd;
    const double mean_s = program(real_chunk, forward_share, fwd, bwd) + static_cast<double>(m - mm) * real_max;
    if (uneven) {
      rt.step_s = mean_s;
      std::vector<double> free_fwd, free_bwd;
      ft.step_s = program(free_chunk, free_forward_share, free_fwd, free_bwd) + static_cast<double>(m - mm) * free_max;
    }
    if (ends_differ) {
      // Micro-batch 0's forward gathers lie on the pipeline fill, once per chunk of every
      // stage, where the mean share above charges them v times; the others' forwards pay
      // none of them (the replayed op lists: a chunk's first all-gather is posted when its
      // first activation arrives, as FSDP2's pre-forward hook issues it). Likewise the last
      // micro-batch's backward, where ddp's all-reduces and zero1's reduce-scatters run,
      // lies on the drain, stage after stage (spread as a mean share, a ddp step of pp 4
      // on the TPU torus replayed 14 % slower than priced), the model's last chunk there
      // with the head's beyond a layer's (a 128K vocabulary's all-reduce over PCIe: ddp
      // with pp 2 replayed 11.5 % slower than priced). What that changes in the program's
      // makespan is added to the step.
      std::vector<double> fwd_first(fwd), bwd_last(bwd), steady_stage(static_cast<size_t>(p), 0);
      const double others = static_cast<double>(m - 1);
      for (size_t g = 0; g < fwd.size(); ++g) {
        fwd_first[g] += first_excess[g];
        fwd[g] -= first_excess[g] / others;
        bwd_last[g] += last_excess[g];
        bwd[g] -= last_excess[g] / others;
        steady_stage[g % static_cast<size_t>(p)] += real_chunk[g] - (first_excess[g] + last_excess[g]) / others;
      }
      const double steady_max = *std::max_element(steady_stage.begin(), steady_stage.end());
      rt.step_s += makespan(fwd, bwd, &fwd_first, &bwd_last) +
                   static_cast<double>(m - mm) * steady_max - mean_s;
    }
    rt.bubble_s = std::max(0.0, rt.step_s - static_cast<double>(m) * real_max);
  }
  // Adam on the largest stage's optimizer shard (its TP member's weights over the
  // sharding's GPUs, memory_model.h's state_shards, as the schedule runs it: whole under
  // ddp, where pricing it over cp·dp put gpt3-xl with pp 2 x cp 8 25 % under its replay).
  const ModelSpec& ms = shard(ch.tp);
  double largest = 0;
  for (int s : pp_peak_stage_candidates(p)) largest = std::max(largest, pp_stage_params(ms, layout, s));
  const double opt = fwd_only ? 0 : cost_.optimizer_s(largest / state_shards(ch).optimizer, optimizer_state_bytes(job.optimizer));

  out.time = rt.step_s + fsdp_ends.tail + opt;
  out.free_time = ft.step_s + opt;
  out.bubble = rt.bubble_s;
  out.p2p = pp_step_time(x_sum, x_max, v, m).step_s;  // the exchanges' share, as the step's
  out.head_and_optimizer = static_cast<double>(m) * logits + opt;
  return out;
}

const PipelineMakespan& CostModel::pp_makespan(int pp, int v, int64_t microbatches, bool backward,
                                               InterleavedWarmup warmup) {
  const auto key = std::make_tuple(pp, v, microbatches, backward, warmup);
  auto it = pp_makespans_.find(key);
  if (it == pp_makespans_.end()) {
    it = pp_makespans_.emplace(key, PipelineMakespan(pp_1f1b_program(pp, v, microbatches, backward, warmup), v)).first;
  }
  return it->second;
}

}  // namespace rm
