#include "planner/pipeline_parallel.h"

#include <algorithm>

#include "planner/cost_model.h"

namespace rm {

int pp_stage_layer_count(int layers, int pp, int v, int stage) {
  if (pp < 1) return 0;
  return layers / pp + (v == 1 && stage < layers % pp ? 1 : 0);
}

std::vector<int> pp_stage_layers(int layers, int pp, int v) {
  std::vector<int> out(static_cast<size_t>(std::max(1, pp)), 0);
  for (int s = 0; s < pp; ++s) out[static_cast<size_t>(s)] = pp_stage_layer_count(layers, pp, v, s);
  return out;
}

std::string pp_why_invalid(int layers, int pp, int v, int64_t microbatches) {
  auto str = [](auto x) { return std::to_string(x); };
  if (pp < 1) return "pp must be >= 1 (got " + str(pp) + ")";
  if (pp > layers) return "pp " + str(pp) + " leaves a stage without layers (the model has " + str(layers) + ")";
  if (v < 1) return "virtual_stages must be >= 1 (got " + str(v) + ")";
  if (v == 1) return "";
  if (pp == 1) return "virtual stages " + str(v) + " need pp > 1 (the interleaved schedule is a pipeline's)";
  if (layers % (pp * v) != 0)
    return "virtual stages " + str(v) + " need the " + str(layers) + " layers to be a multiple of pp x virtual stages = " +
           str(pp * v);
  if (microbatches % pp != 0)
    return "the interleaved schedule needs the micro-batches per pipeline (" + str(microbatches) +
           ") to be a multiple of pp " + str(pp) + " (Megatron's rule)";
  return "";
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

int64_t pp_in_flight(int pp, int v, int64_t m, int stage) {
  // Megatron's warmup micro-batches plus the one in its forward (module docs).
  const int64_t warmup = v > 1 ? int64_t{2} * (pp - stage - 1) + int64_t{v - 1} * pp : pp - stage - 1;
  return std::min(warmup + 1, m * std::max(1, v));
}

double pp_p2p_bytes(const ModelSpec& m, int64_t c, int micro_batch, int element_bytes, int tp) {
  return static_cast<double>(micro_batch) * static_cast<double>(c) * m.hidden * element_bytes / std::max(1, tp);
}

double pp_stage_params(const ModelSpec& m, int pp, int v, int stage) {
  const double table = static_cast<double>(m.vocab) * m.hidden;
  double p = pp_stage_layer_count(m.layers, pp, v, stage) * m.layer_params();
  if (pp == 1) return p + (m.tied_embeddings ? 1.0 : 2.0) * table;
  if (stage == 0 || stage == pp - 1) p += table;  // embedding / head (a tied table is held at both ends)
  return p;
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
                                                 const PipelineEnds& fsdp_ends, double logits, int64_t m) {
  const int p = ch.pp, v = ch.virtual_stages;
  const bool fwd_only = job.passes == Passes::kForward;
  // Interleaved: one exchange after each chunk's forward and one after its backward
  // (module docs). The replayed op lists exchange with both neighbours at once, once per
  // forward-backward pair in the steady state but after every compute in the warm-up and
  // the cool-down, each waiting on both neighbours: within 1.2 % of this charge
  // (agreement_test.cc), where one per chunk fell 2.5 % short (pp 8, v 4, 1 layer per
  // chunk). 1F1B: one per micro-batch with each neighbour, as the replayed op lists
  // run it (pipeline_schedule.h: a stage's down exchange sends the activation and takes the
  // gradient back, its up exchange the reverse), so the first and last stages wait for one
  // exchange per micro-batch, not two (charging two overpriced a step 0.5 %, pp 4 of 8
  // micro-batches in agreement_test.cc).
  auto exchanges = [&](int s) { return v > 1 ? (fwd_only ? 1 : 2) * v : (s > 0 ? 1 : 0) + (s + 1 < p ? 1 : 0); };
  const double x = pp_p2p_pattern(p).time(
      pp_p2p_bytes(model_, job.seq_len / ch.cp, ch.micro_batch, fabric_.topology().gpu.element_bytes, ch.tp));
  const double real_layer = real.total() + fsdp_layer, free_layer = free.total();
  double real_sum = 0, real_max = 0, free_sum = 0, free_max = 0, x_sum = 0, x_max = 0;
  PipelineStep out;
  for (int s = 0; s < p; ++s) {
    const double head = s == p - 1 ? logits : 0;
    const int n = pp_stage_layer_count(model_.layers, p, v, s);
    // Interleaved, each of the stage's v chunks starts and ends on its own collectives (the
    // op lists gather and scatter per chunk): the model's first or last chunk, and v - 1
    // others (one per micro-batch undercharged a 256-GPU FSDP step by 3.9 %).
    const double ends =
        (s == 0 ? fsdp_ends.first : s == p - 1 ? fsdp_ends.last : fsdp_ends.middle) + (v - 1) * fsdp_ends.middle;
    const double r = n * real_layer + ends + head + exchanges(s) * x, f = n * free_layer + head;
    x_sum += exchanges(s) * x;
    x_max = std::max(x_max, exchanges(s) * x);
    real_sum += r;
    free_sum += f;
    if (r > real_max) out.fsdp_ends = ends;
    real_max = std::max(real_max, r);
    free_max = std::max(free_max, f);
    out.layers = std::max(out.layers, n);
  }
  // Adam on the largest stage's shard (its TP member's weights over its cp·dp GPUs): the
  // first (the most layers, the embedding) or the last (the head).
  const ModelSpec& ms = shard(ch.tp);
  const double opt =
      fwd_only ? 0
               : cost_.optimizer_s(std::max(pp_stage_params(ms, p, v, 0), pp_stage_params(ms, p, v, p - 1)) /
                                   (ch.cp * ch.dp));
  const PipelineTime rt = pp_step_time(real_sum, real_max, v, m), ft = pp_step_time(free_sum, free_max, v, m);
  out.time = rt.step_s + opt;
  out.free_time = ft.step_s + opt;
  out.bubble = rt.bubble_s;
  out.p2p = pp_step_time(x_sum, x_max, v, m).step_s;  // the exchanges' share, as the step's
  out.head_and_optimizer = static_cast<double>(m) * logits + opt;
  return out;
}

}  // namespace rm
