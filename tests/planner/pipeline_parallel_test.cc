// Pipeline parallelism (pipeline_parallel.h): the bubble of 1F1B and interleaved 1F1B
// (Narayanan et al. 2021), stage layers and memory (Korthikanti et al. 2022), the
// stage-to-stage bytes and their time, the search's pins and the plan file's keys, each
// against values derived by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <vector>

#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/pipeline_parallel.h"
#include "planner/pipeline_schedule.h"
#include "planner/schedule.h"
#include "planner/search.h"
#include "planner/tensor_parallel.h"
#include "tests/planner/round_specs.h"

using namespace rm;
using rm::test::round_cluster;
using rm::test::round_model;
using rm::test::step_job;

namespace {

ModelSpec eight_layers() {
  ModelSpec m = round_model(8, 8);
  m.layers = 8;
  return m;
}

Job round_step_job(int gpus, int64_t seq, int64_t batch_tokens) {
  return step_job("round", "test", gpus, seq, batch_tokens);
}

}  // namespace

TEST_CASE("the bubble: (p-1)/(m+p-1) for 1F1B, (p-1)/(v·m+p-1) interleaved, from stage times") {
  CHECK(pp_bubble_fraction(4, 1, 8) == doctest::Approx(3.0 / 11));
  CHECK(pp_bubble_fraction(4, 2, 8) == doctest::Approx(3.0 / 19));
  CHECK(pp_bubble_fraction(1, 1, 8) == 0);
  // Equal stages of 1 s per micro-batch: (m + p - 1)·t, and m·t + (p - 1)·t / v.
  const PipelineTime one = pp_step_time({1, 1, 1, 1}, 1, 8);
  CHECK(one.step_s == doctest::Approx(11));
  CHECK(one.bubble_s == doctest::Approx(3));
  CHECK(one.bubble_s / one.step_s == doctest::Approx(pp_bubble_fraction(4, 1, 8)));
  const PipelineTime two = pp_step_time({1, 1, 1, 1}, 2, 8);
  CHECK(two.step_s == doctest::Approx(9.5));
  CHECK(two.bubble_s / two.step_s == doctest::Approx(pp_bubble_fraction(4, 2, 8)));
  // A slower last stage (the head) sets the pace; the others fill and drain once.
  const PipelineTime slow = pp_step_time({1, 1, 1, 2}, 1, 8);
  CHECK(slow.step_s == doctest::Approx(8 * 2 + 3));
}

TEST_CASE("stage layers: uneven splits put the extra layers first, never on the head's stage") {
  CHECK(pp_stage_layers({10, 4, 1}) == std::vector<int>{3, 3, 2, 2});
  CHECK(pp_stage_layers({80, 4, 1}) == std::vector<int>{20, 20, 20, 20});
  CHECK(pp_stage_layers({7, 4, 1}) == std::vector<int>{2, 2, 2, 1});
  CHECK(pp_stage_layers({16, 2, 4}) == std::vector<int>{8, 8});
  CHECK(pp_why_invalid({8, 16, 1}, 16).find("without layers") != std::string::npos);
  CHECK(pp_why_invalid({10, 4, 2}, 8).find("multiple of pp x virtual stages = 8") != std::string::npos);
  // Megatron's interleaved rule: micro-batches a multiple of pp.
  CHECK(pp_why_invalid({16, 4, 2}, 6).find("multiple of pp 4") != std::string::npos);
  CHECK(pp_why_invalid({16, 4, 2}, 8) == "");
  CHECK(pp_why_invalid({16, 1, 2}, 8).find("need pp > 1") != std::string::npos);
}

TEST_CASE("the split counts the embedding and the loss as layers: Llama 3 405B's 126 layers on pp 16") {
  // The Llama 3 paper (arXiv:2407.21783, Sec. 3.3.2) takes one layer each off the first and
  // the last stage; Megatron-Core's two account_for flags and torchtitan's default cut so.
  const PipelineLayout l1{126, 16, 1, true, true};
  std::vector<int> want(16, 8);
  want.front() = want.back() = 7;
  CHECK(pp_stage_layers(l1) == want);
  CHECK(pp_why_invalid(l1, 16) == "");
  // Interleaved: 128 units in 32 chunks of 4, the model's first and last chunk of 3.
  const PipelineLayout l2{126, 16, 2, true, true};
  CHECK(pp_why_invalid(l2, 32) == "");
  CHECK(pp_stage_layers(l2) == want);
  CHECK(pp_chunk_layer_count(l2, 0) == 3);
  CHECK(pp_chunk_layer_count(l2, 16) == 4);  // stage 0's second chunk
  CHECK(pp_chunk_first_layer(l2, 1) == 3);
  CHECK(pp_chunk_first_layer(l2, 31) == 123);
  CHECK(pp_chunk_first_layer(l2, 31) + pp_chunk_layer_count(l2, 31) == 126);
  // Not counted, 126 layers do not cut into 32 equal chunks.
  CHECK(pp_why_invalid({126, 16, 2}, 32).find("multiple of pp x virtual stages = 32") != std::string::npos);
  CHECK(pp_why_invalid({126, 16, 2, true, false}, 32).find("126 layers + the embedding") != std::string::npos);
  // With a remainder (v = 1) the extra units go first, as torchtitan's
  // generate_llm_fqn_per_model_part gives them: 34 units on 4 stages.
  CHECK(pp_stage_layers({32, 4, 1, true, true}) == std::vector<int>{8, 9, 8, 7});
  CHECK(pp_stage_layers({32, 4, 1, false, true}) == std::vector<int>{9, 8, 8, 7});
  // Every chunk keeps a unit, the embedding or the head alone included (Llama 3's first and
  // last chunk at 8 virtual stages); the accounting is a pipeline's.
  CHECK(pp_why_invalid({126, 16, 8, true, true}, 16) == "");
  CHECK(pp_chunk_layer_count({126, 16, 8, true, true}, 0) == 0);
  CHECK(pp_chunk_layer_count({126, 16, 8, true, true}, 127) == 0);
  CHECK(pp_stage_layers({126, 16, 8, true, true}) == want);
  CHECK(pp_why_invalid({1, 4, 1, true, true}, 4).find("without layers") != std::string::npos);
  CHECK(pp_why_invalid({8, 1, 1, true, false}, 1).find("account_for_embedding_in_pipeline_split needs pp > 1") !=
        std::string::npos);
  // The chunks' layers tile the model in order.
  for (const PipelineLayout& l : {l1, l2, PipelineLayout{126, 16, 8, true, true}, PipelineLayout{32, 4, 1, true, true},
                                  PipelineLayout{40, 4, 2, false, true}}) {
    int next = 0;
    for (int g = 0; g < l.pp * l.virtual_stages; ++g) {
      CHECK(pp_chunk_first_layer(l, g) == next);
      next += pp_chunk_layer_count(l, g);
    }
    CHECK(next == l.layers);
  }
}

TEST_CASE("uneven stages: running the programs, equal ones: the closed form, and few micro-batches price many") {
  // Per-chunk times t, a third forward (the closed form's assumption does not matter here).
  auto run = [](int pp, int v, int64_t m, const std::vector<double>& t) {
    std::vector<double> f(t.size()), b(t.size());
    for (size_t g = 0; g < t.size(); ++g) {
      f[g] = t[g] / 3;
      b[g] = t[g] - f[g];
    }
    return pp_program_makespan(pp_1f1b_program(pp, v, m, true, InterleavedWarmup::kMegatron), v, f, b);
  };
  // Equal stages: (m + p - 1)·T, the closed form.
  CHECK(run(4, 1, 8, {1, 1, 1, 1}) == doctest::Approx(pp_step_time({1, 1, 1, 1}, 1, 8).step_s));
  CHECK(run(4, 2, 8, std::vector<double>(8, 0.5)) == doctest::Approx(pp_step_time({1, 1, 1, 1}, 2, 8).step_s));
  // 8, 9, 8, 7 layers over 8 micro-batches: 92 layer-times, where the closed form says 95.
  CHECK(run(4, 1, 8, {8, 9, 8, 7}) == doctest::Approx(92));
  CHECK(pp_step_time({8, 9, 8, 7}, 1, 8).step_s == doctest::Approx(95));
  // Past the warm-up and cool-down each micro-batch adds the slowest stage's time: the
  // cost model runs pp_makespan_microbatches of them and extrapolates.
  struct Case {
    int pp, v;
    int64_t m;
    std::vector<double> t;
  };
  for (const Case& c : {Case{4, 1, 64, {8, 9, 8, 7.6}}, Case{8, 1, 100, {7, 8, 8, 8, 8, 8, 8, 9.3}},
                        Case{3, 1, 40, {2, 3, 2.5}}, Case{4, 2, 48, {3, 4, 4, 4, 4, 4, 4, 3.5}},
                        Case{4, 4, 64, {0.2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1.4}}}) {
    CAPTURE(c.pp);
    CAPTURE(c.v);
    const int64_t few = pp_makespan_microbatches(c.pp, c.v, c.m);
    REQUIRE(few < c.m);
    std::vector<double> stage(static_cast<size_t>(c.pp), 0);
    for (size_t g = 0; g < c.t.size(); ++g) stage[g % static_cast<size_t>(c.pp)] += c.t[g];
    const double slowest = *std::max_element(stage.begin(), stage.end());
    const double whole = run(c.pp, c.v, c.m, c.t);
    CHECK(run(c.pp, c.v, few, c.t) + static_cast<double>(c.m - few) * slowest == doctest::Approx(whole).epsilon(0.005).scale(0));
    CHECK(whole < pp_step_time(stage, c.v, c.m).step_s * (1 + 1e-12));  // never above the closed form
  }
}

TEST_CASE("micro-batch 0's forwards lie on the pipeline fill, the last one's backwards on its drain: what each chunk's adds, it adds once per chunk") {
  // A pipeline's weight all-gathers in micro-batch 0 and its gradient reduction in the last
  // (ddp's all-reduces; CostModel::pipeline_step): an extra e on micro-batch 0's forward, or
  // on the last micro-batch's backward, of every chunk delays the step by e for each chunk
  // of the fill or the drain, p·v of them, where a mean share of e / m per micro-batch adds v·e.
  for (const auto& shape : {std::pair{4, 1}, std::pair{4, 2}, std::pair{8, 4}}) {
    const int pp = shape.first, v = shape.second;  // not a structured binding: CAPTURE takes it in a lambda
    CAPTURE(pp);
    CAPTURE(v);
    const int64_t m = 2 * pp;
    const size_t chunks = static_cast<size_t>(pp * v);
    const std::vector<double> f(chunks, 1.0), b(chunks, 2.0);
    const double e = 0.01;
    std::vector<double> first(f), last(b);
    for (double& x : first) x += e;
    for (double& x : last) x += e;
    const PipelineProgram program = pp_1f1b_program(pp, v, m, true, InterleavedWarmup::kMegatron);
    const double base = pp_program_makespan(program, v, f, b);
    CHECK(pp_program_makespan(program, v, f, b, &first) - base == doctest::Approx(pp * v * e));
    CHECK(pp_program_makespan(program, v, f, b, nullptr, &last) - base == doctest::Approx(pp * v * e));
    CHECK(pp_program_makespan(program, v, f, b, &f, &b) == doctest::Approx(base));
  }
}

TEST_CASE("micro-batches in flight: p - s for 1F1B, Megatron's warmup + 1 interleaved") {
  const InterleavedWarmup mg = InterleavedWarmup::kMegatron;
  CHECK(pp_in_flight(4, 1, 8, 0, mg) == 4);
  CHECK(pp_in_flight(4, 1, 8, 3, mg) == 1);
  CHECK(pp_in_flight(4, 1, 2, 0, mg) == 2);  // fewer micro-batches than stages
  // 2·(p - 1) + (v - 1)·p + 1 = 6 + 4 + 1 chunk micro-batches on the first stage.
  CHECK(pp_in_flight(4, 2, 8, 0, mg) == 11);
  CHECK(pp_in_flight(4, 2, 8, 3, mg) == 5);
  // As many micro-batches as stages: every forward first, so every stage holds all m·v.
  CHECK(pp_in_flight(4, 2, 4, 3, mg) == 8);
  CHECK(pp_in_flight(4, 2, 4, 0, mg) == 8);
  // torch's ScheduleInterleaved1F1B keeps its count: 2·(p - s - 1) + (v - 1)·p + 1.
  CHECK(pp_in_flight(4, 2, 4, 3, InterleavedWarmup::kTorch) == 5);
  CHECK(pp_in_flight(4, 2, 4, 1, InterleavedWarmup::kTorch) == 8);  // 9, capped
  // What the stages' programs run: the forwards before each stage's first backward.
  struct Shape {
    int p, v, m;
  };
  for (const InterleavedWarmup rule : {mg, InterleavedWarmup::kTorch})
  for (const Shape sh : {Shape{4, 1, 8}, Shape{4, 2, 4}, Shape{4, 2, 8}, Shape{8, 4, 16}}) {
    const int p = sh.p, v = sh.v, m = sh.m;
    const PipelineProgram program = pp_1f1b_program(p, v, m, true, rule);
    for (int s = 0; s < p; ++s) {
      int64_t forwards = 0;
      for (const PipelineAction& a : program.stages[static_cast<size_t>(s)]) {
        if (a.kind == PipelineAction::kBackward) break;
        forwards += a.kind == PipelineAction::kForward;
      }
      CAPTURE(p);
      CAPTURE(v);
      CAPTURE(m);
      CAPTURE(s);
      CAPTURE(static_cast<int>(rule));
      CHECK(forwards == pp_in_flight(p, v, m, s, rule));
    }
  }
}

TEST_CASE("held in flight: one round of the steady state stands for all of it, the head where the last chunk runs") {
  // The whole order walked, against pp_held_in_flight (which stops after one round of p·v).
  auto walk = [](int p, int v, int64_t m, int s, InterleavedWarmup w, const std::vector<double>& bytes, bool at_head) {
    const int64_t warm = pp_in_flight(p, v, m, s, w) - 1, total = m * v, group = int64_t{p} * v;
    auto fwd = [&](int64_t k) { return static_cast<int>((k % group) / p); };
    double held = 0, most = 0;
    int64_t b = 0;
    for (int64_t f = 0; f < total; ++f) {
      held += bytes[static_cast<size_t>(fwd(f))];
      if (!at_head || fwd(f) == v - 1) most = std::max(most, held);
      if (f >= warm) held -= bytes[static_cast<size_t>(v - 1 - fwd(b++))];
    }
    return most;
  };
  for (const InterleavedWarmup w : {InterleavedWarmup::kMegatron, InterleavedWarmup::kTorch}) {
    for (int p : {4, 8}) {
      for (int v : {2, 3, 4}) {
        for (int64_t m : {int64_t{p}, int64_t{2} * p, int64_t{8} * p}) {
          PlanChoice ch;
          ch.pp = p;
          ch.virtual_stages = v;
          const PipelineLayout l = pp_layout(p * v * 2, ch);
          for (int s : {0, 1, p - 1}) {
            std::vector<double> bytes;
            for (int c = 0; c < v; ++c) bytes.push_back(1.0 + 0.37 * ((c * 7 + s) % 5));
            CAPTURE(p);
            CAPTURE(v);
            CAPTURE(m);
            CAPTURE(s);
            CHECK(pp_held_in_flight(l, m, s, w, bytes) == doctest::Approx(walk(p, v, m, s, w, bytes, false)));
            CHECK(pp_held_in_flight(l, m, s, w, bytes, true) == doctest::Approx(walk(p, v, m, s, w, bytes, true)));
          }
          // Alike chunks: the last stage's head runs at its peak.
          const std::vector<double> alike(static_cast<size_t>(v), 1.0);
          CHECK(walk(p, v, m, p - 1, w, alike, true) == doctest::Approx(walk(p, v, m, p - 1, w, alike, false)));
        }
      }
    }
  }
}

TEST_CASE("a PyTorch pipeline stage's receive buffers: every micro-batch's input and output gradient, held all step") {
  // torch.distributed.pipelining's PipelineStage: _prepare_forward_infra and
  // _prepare_backward_infra allocate one per micro-batch; fwd_cache keeps each output.
  PlanChoice ch;
  ch.pp = 4;
  ch.virtual_stages = 2;
  const PipelineLayout l = pp_layout(32, ch);
  const PipelineStageBuffers first = pipeline_stage_buffers(l, 0, Framework::kPytorch, true, 8, 1.0, 5.0);
  CHECK(first.persistent == 8 + 16);  // chunk 0 (the model's first): gradients only; chunk 4: both
  CHECK(first.boundary == 0);
  CHECK(first.held_output == std::vector<double>{1, 1});
  CHECK(first.shared_input == std::vector<double>{0, 1});
  const PipelineStageBuffers last = pipeline_stage_buffers(l, 3, Framework::kPytorch, true, 8, 1.0, 5.0);
  CHECK(last.persistent == 16 + 8);  // chunk 3: both; chunk 7 (the model's last): inputs only
  CHECK(last.held_output == std::vector<double>{1, 0});
  CHECK(last.shared_input == std::vector<double>{1, 1});
  CHECK(last.boundary == 5);  // the final hidden state
  CHECK(pipeline_stage_buffers(l, 3, Framework::kPytorch, false, 8, 1.0, 5.0).persistent == 16);  // forwards only
  // Megatron's stage: one boundary activation; the last holds its final hidden state.
  const PipelineStageBuffers megatron = pipeline_stage_buffers(l, 1, Framework::kMegatron, true, 8, 1.0, 5.0);
  CHECK(megatron.persistent == 0);
  CHECK(megatron.boundary == 1);
  CHECK(megatron.held_output == std::vector<double>{0, 0});
  CHECK(pipeline_stage_buffers(l, 3, Framework::kAny, true, 8, 1.0, 5.0).boundary == 5);
}

TEST_CASE("interleaved exchanges: what the stages' programs wait for, m·v + warm-up in a training step, within two") {
  struct Case {
    int p, v;
    int64_t m;
  };
  for (const Case& c : {Case{4, 2, 8}, Case{8, 4, 16}, Case{4, 4, 4}, Case{3, 2, 9}}) {
    const int p = c.p, v = c.v;
    const int64_t m = c.m;
    for (bool bwd : {true, false}) {
      CAPTURE(p);
      CAPTURE(v);
      CAPTURE(bwd);
      const PipelineProgram prog = pp_1f1b_program(p, v, m, bwd, InterleavedWarmup::kMegatron);
      for (int s = 0; s < p; ++s) {
        const auto& acts = prog.stages[static_cast<size_t>(s)];
        const auto n = std::count_if(acts.begin(), acts.end(),
                                     [](const PipelineAction& a) { return a.kind == PipelineAction::kExchange; });
        CHECK(std::abs(n - pp_interleaved_exchanges(p, v, m, s, bwd, InterleavedWarmup::kMegatron)) <= 2);  // the ends' receives and sends
      }
    }
  }
  // pp 8 x v 4 over 16 micro-batches, the first stage: 64 computes' worth and 38 warm-up ones.
  CHECK(pp_interleaved_exchanges(8, 4, 16, 0, true, InterleavedWarmup::kMegatron) == 64 + 2 * 7 + 3 * 8);
}

TEST_CASE("pipelined gradient reduction: a chunk's last reduce-scatter runs behind the stage's next compute") {
  // zero2 reduce-scatters every micro-batch's grads. Each chunk's last one stays in flight
  // into the stage's next action (Megatron's and FSDP's asynchronous reduction), so no chunk
  // but the program's last waits for it before computing again; the cost model then
  // charges the reduction per layer, not at every chunk's end.
  const ModelSpec m = eight_layers();
  const Topology topo = round_cluster(8, 2);
  const Fabric fabric(topo, 16);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  SearchPins pins;
  pins.pp = 4;
  pins.virtual_stages = 2;
  pins.tp = 1;
  pins.cp = 1;
  pins.sharding = Sharding::kZero2;
  pins.micro_batch = 1;
  const Plan plan = planner.best_plan(round_step_job(16, 4096, int64_t{32} * 4096), pins);
  REQUIRE(plan.choice.dp == 4);
  const OpSchedule sched = generate_schedule(plan, m, fabric);
  for (int g = 0; g < 16; ++g) {
    CAPTURE(g);
    const auto& ops = sched.ranks[static_cast<size_t>(g)].ops;
    std::map<int, size_t> posted;  // reduce-scatter request -> its op's index
    int waited_after_compute = 0, waited_at_once = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind == OpKind::kCollective && op.collective == CollectiveKind::kReduceScatter) posted[op.request] = i;
      if (op.kind != OpKind::kWait) continue;
      const auto it = posted.find(op.request);
      if (it == posted.end()) continue;
      const bool computed = std::any_of(ops.begin() + static_cast<std::ptrdiff_t>(it->second), ops.begin() + static_cast<std::ptrdiff_t>(i),
                                        [](const Op& o) { return o.kind == OpKind::kCompute; });
      ++(computed ? waited_after_compute : waited_at_once);
      posted.erase(it);
    }
    CHECK(posted.empty());  // every reduce-scatter is waited for, before the step ends
    // At once: on the first stage (GPUs 0-3) the embedding's scatter waits for layer 0's,
    // each micro-batch; and the program's last one; every other one behind compute.
    CHECK(waited_at_once <= (g < 4 ? plan.choice.grad_accum + 1 : 1));
    CHECK(waited_after_compute > 0);
  }
  // Less than waiting for one reduce-scatter at each of the stage's v chunk ends, each
  // micro-batch (what a chunk waiting for its own would cost).
  CostModel cm(m, fabric, CostParams::from_topology(topo));
  const double layer_rs = cm.fsdp_collective(1, 4).time(m.layer_params() * topo.gpu.element_bytes / 4);
  CHECK(plan.predicted.fsdp_exposed_s < plan.choice.grad_accum * plan.choice.virtual_stages * layer_rs);
}

TEST_CASE("stage memory: 1F1B's first stage holds L layers' activations, interleaved L·(1 + (p-1)/(p·v))") {
  const ModelSpec m = eight_layers();
  GpuSpec gpu = round_cluster(8, 2).gpu;
  gpu.runtime_reserve_bytes = 0;
  PlanChoice ch;
  ch.cp = 4;
  ch.dp = 1;
  ch.pp = 4;
  ch.grad_accum = 8;
  const int64_t N = 32768, c = N / 4;
  const double per_layer = c * activation_bytes_per_token_layer(m, Checkpointing::kNone, 2);
  const double final_hidden = c * m.hidden * 2.0;
  const double table = static_cast<double>(m.vocab) * m.hidden;
  MemoryBreakdown mem = memory_breakdown(m, ch, N, gpu);
  CHECK(mem.activations == doctest::Approx(8 * per_layer + final_hidden));  // 4 in flight x 2 layers
  // The first stage's states: its 2 layers and the embedding, over its cp·dp = 4 GPUs.
  CHECK(mem.model_states == doctest::Approx(16 * (2 * m.layer_params() + table) / 4));
  ch.virtual_stages = 2;  // 11 chunk micro-batches of one layer: 8·(1 + 3/8)
  mem = memory_breakdown(m, ch, N, gpu);
  CHECK(mem.activations == doctest::Approx(8 * (1 + 3.0 / 8) * per_layer + final_hidden));
  // Without a pipeline, every layer's and all states over the cp·dp GPUs.
  PlanChoice flat;
  flat.cp = 4;
  flat.dp = 4;
  mem = memory_breakdown(m, flat, N, gpu);
  CHECK(mem.activations == doctest::Approx(8 * per_layer + final_hidden));
  CHECK(mem.model_states == doctest::Approx(16 * m.params() / 16));
  // A stage's parameters: the head on the last, a tied table at both ends.
  CHECK(pp_stage_params(m, {8, 4, 1}, 3) == doctest::Approx(2 * m.layer_params() + table));
  CHECK(pp_stage_params(m, {8, 4, 1}, 1) == doctest::Approx(2 * m.layer_params()));
  // Counting the embedding and the loss cuts 10 units as 2, 3, 2, 1 layers: the second
  // stage's 3 layers x 3 in flight outweigh the first's 2 x 4.
  ch.virtual_stages = 1;
  ch.account_for_embedding_in_pipeline_split = ch.account_for_loss_in_pipeline_split = true;
  mem = memory_breakdown(m, ch, N, gpu);
  CHECK(mem.activations == doctest::Approx(9 * per_layer + final_hidden));
  CHECK(mem.model_states == doctest::Approx(16 * 3 * m.layer_params() / 4));
}

TEST_CASE("p2p: micro_batch·c·hidden·e/tp bytes per boundary, over the NIC between node-sized stages") {
  const ModelSpec m = eight_layers();
  CHECK(pp_p2p_bytes(m, 4096, 2, 2, 4) == doctest::Approx(2.0 * 4096 * 1024 * 2 / 4));
  // Two nodes of 8, pp 2: stage s is node s, GPU g sends to g + 8 over its own 10 GB/s NIC
  // (rail-optimised, both ways at once on full-duplex links: nothing shared).
  const Topology topo = round_cluster(8, 2);
  const Fabric fabric(topo, 16);
  CostModel cm(m, fabric, CostParams::from_topology(topo));
  const PatternCost& x = cm.pp_p2p_pattern(2);
  const double bytes = pp_p2p_bytes(m, 8192, 1, 2, 1);  // 16 MiB
  CHECK(x.time(bytes) == doctest::Approx(bytes / 10e9 + x.latency_s).scale(0));
  CHECK(x.latency_s < 1e-4);

  // The plan's exposed p2p, 1F1B: one exchange per micro-batch with each neighbour (the
  // down one sends the activation and takes the gradient back), so each of 2 stages waits
  // for one, through m micro-batches and the p - 1 fill: x·(m + p - 1).
  Job job = round_step_job(16, 65536, int64_t{8} * 65536);
  PlanChoice ch;
  ch.cp = 8;
  ch.dp = 1;
  ch.pp = 2;
  ch.grad_accum = 8;
  ch.order = tp_order(1, 8, 2);
  REQUIRE(cm.why_invalid(job, ch) == "");
  const Prediction p = cm.predict(job, ch);
  CHECK(p.pp_p2p_s == doctest::Approx(x.time(bytes) * (8 + 1)));
  CHECK(p.pp_bubble_s > 0);
  CHECK(p.pp_bubble_s < p.step_time_s * pp_bubble_fraction(2, 1, 8) * 1.1);
  ch.virtual_stages = 2;
  ch.grad_accum = 7;
  CHECK(cm.why_invalid(job, ch).find("multiple of pp 2") != std::string::npos);
}

TEST_CASE("search: --pp and --virtual-stages pins, and pins that cannot work explained") {
  const ModelSpec m = eight_layers();
  const Topology topo = round_cluster(8, 2);
  const Fabric fabric(topo, 16);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  const Job job = round_step_job(16, 16384, int64_t{32} * 16384);
  SearchPins pins;
  pins.pp = 2;
  Plan p = planner.best_plan(job, pins);
  CHECK(p.choice.pp == 2);
  CHECK(p.choice.tp * p.choice.cp * p.choice.dp * p.choice.pp == 16);
  CHECK(p.predicted.pp_bubble_s > 0);
  pins.virtual_stages = 2;
  p = planner.best_plan(job, pins);
  CHECK(p.choice.virtual_stages == 2);
  CHECK(p.choice.grad_accum % 2 == 0);
  SearchPins bad;
  bad.pp = 3;
  CHECK_THROWS_WITH_AS(planner.best_plan(job, bad), doctest::Contains("does not divide the 16 GPUs"), InputError);
  bad.pp = 16;  // 8 layers
  CHECK_THROWS_WITH_AS(planner.best_plan(job, bad), doctest::Contains("without layers"), InputError);
  SearchPins odd;  // one sequence per pipeline: m = 1 is no multiple of pp 2
  odd.pp = 2;
  odd.virtual_stages = 2;
  odd.cp = 8;
  CHECK_THROWS_WITH_AS(planner.best_plan(round_step_job(16, 16384, 16384), odd), doctest::Contains("multiple of pp 2"),
                       InputError);
}

TEST_CASE("plan.yaml carries pp and virtual_stages back, strictly") {
  const ModelSpec m = eight_layers();
  const Topology topo = round_cluster(8, 2);
  const Fabric fabric(topo, 16);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  SearchPins pins;
  pins.pp = 2;
  pins.virtual_stages = 2;
  Plan p = planner.best_plan(round_step_job(16, 16384, int64_t{32} * 16384), pins);
  p.job.model = "llama2-7b";  // a shipped name; the reader does not load it
  p.job.topology = "dgx-a100-ib";
  const std::string text = plan_to_yaml_string(p);
  const Plan back = parse_plan_yaml(text, "plan.yaml");
  CHECK(back.choice.pp == 2);
  CHECK(back.choice.virtual_stages == 2);
  CHECK(back.predicted.pp_bubble_s == doctest::Approx(p.predicted.pp_bubble_s).epsilon(1e-3).scale(0));
  std::string wrong = text;
  wrong.replace(wrong.find("pp: 2"), 5, "pp: 4");
  CHECK_THROWS_WITH_AS(parse_plan_yaml(wrong, "plan.yaml"), doctest::Contains("tp * cp * dp * pp"), InputError);
  // The split's accounting: written always, read back, refused with pp 1 naming the key.
  CHECK(text.find("account_for_loss_in_pipeline_split: false") != std::string::npos);
  Plan counted = p;
  counted.choice.virtual_stages = 1;
  counted.choice.account_for_embedding_in_pipeline_split = counted.choice.account_for_loss_in_pipeline_split = true;
  const Plan counted_back = parse_plan_yaml(plan_to_yaml_string(counted), "plan.yaml");
  CHECK(counted_back.choice.account_for_embedding_in_pipeline_split);
  CHECK(counted_back.choice.account_for_loss_in_pipeline_split);
  Plan flat = counted;
  flat.choice.pp = 1;
  flat.choice.dp *= 2;
  flat.choice.account_for_embedding_in_pipeline_split = false;
  CHECK_THROWS_WITH_AS(parse_plan_yaml(plan_to_yaml_string(flat), "plan.yaml"),
                       doctest::Contains("plan.account_for_loss_in_pipeline_split: expected false with pp 1"), InputError);
}
