// The plan search on the study's cluster (shipped dgx-a100-ib, llama2-7b).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/search.h"
#include "planner/spec_library.h"

using namespace rm;

namespace {

// The study's cluster cut to `gpus` GPUs, and its planner with the topology's default costs.
struct Study {
  explicit Study(int gpus)
      : fabric(topo, gpus), planner(model, fabric, CostParams::from_topology(topo)) {}
  Topology topo = load_topology(kStudyTopology);
  ModelSpec model = load_model(kDefaultModel);
  Fabric fabric;    // refers to topo
  Planner planner;  // refers to model and fabric
};

}  // namespace

TEST_CASE("8K tokens on 128 GPUs: a small ring inside one NVLink node, data parallel for the rest") {
  Study s(128);
  Planner& pl = s.planner;
  // 8K tokens of a 7B model fit on one GPU without checkpointing: the ring is one GPU
  // (a ring only adds steps); 32K do not, and the ring grows, inside one node. (TP is the
  // other way to split a long sequence: with it searched, 32K take TP 2 with sequence
  // parallelism and ZeRO-2, within 3 % of this ring; pinned off here.)
  SearchPins no_tp;
  no_tp.tp = 1;
  for (int64_t n : {int64_t{8192}, int64_t{32768}}) {
    CAPTURE(n);
    const Plan p = pl.plan(study_job(128, n), no_tp);
    CHECK(p.choice.cp <= 8);
    CHECK((n == 8192 || p.choice.cp >= 2));
    CHECK(p.choice.cp * p.choice.dp == 128);
    for (int i = 1; i < p.choice.cp; ++i) {
      CHECK(s.fabric.node_of(p.choice.order[i]) == s.fabric.node_of(p.choice.order[0]));
    }
    CHECK(p.predicted.fits);
    // A 128-GPU ring is far slower for so short a sequence.
    SearchPins big;
    big.cp = 128;
    CHECK(pl.best_ring_plan(study_job(128, n), big).predicted.step_time_s > 1.5 * p.predicted.step_time_s);
  }
}

TEST_CASE("causal masks: striped or zigzag, never contiguous") {
  Study s(64);
  Planner& pl = s.planner;
  for (int64_t n : {int64_t{131072}, int64_t{524288}}) {
    SearchPins pins;
    pins.cp = 16;
    const Plan p = pl.best_ring_plan(study_job(64, n), pins);
    CHECK(p.choice.load_balance != LoadBalance::kContiguous);
    pins.load_balance = LoadBalance::kContiguous;
    const Plan c = pl.best_ring_plan(study_job(64, n), pins);
    CHECK(c.choice.load_balance == LoadBalance::kContiguous);
    CHECK(c.predicted.step_time_s > 1.2 * p.predicted.step_time_s);
  }
}

TEST_CASE("rail-optimised fat tree: flat rings across nodes take the rail-aware order") {
  // Node-major hops from GPU 7 of a node to GPU 0 of the next: rail 7 to rail 0, through
  // the spine. The snake's hops stay on one rail leaf. The study's spine is non-blocking,
  // so both rings stream at the NIC's rate and the node-major one pays the two extra
  // spine crossings' latency each step (and the same NIC contention with FSDP: its
  // bottleneck may be named on a spine link, its bytes still cross the NICs).
  Study s(128);
  Planner& pl = s.planner;
  SearchPins pins;
  pins.cp = 32;
  pins.schedule = Schedule::kFlat;
  const Plan p = pl.best_ring_plan(study_job(128, 262144), pins);
  CHECK(p.choice.order_name == "snake");
  pins.order = "node-major";
  const Plan nm = pl.best_ring_plan(study_job(128, 262144), pins);
  CHECK(nm.predicted.step_time_s > p.predicted.step_time_s);
  CHECK(nm.predicted.fsdp_exposed_s >= p.predicted.fsdp_exposed_s);
  const unsigned spine = 1u << static_cast<int>(LinkClass::kSpine);
  CostModel& cm = pl.cost_model();
  CHECK((cm.ring_patterns(32, 4, Schedule::kFlat, p.choice.order).forward().link_classes & spine) == 0);
  CHECK((cm.ring_patterns(32, 4, Schedule::kFlat, nm.choice.order).forward().link_classes & spine) != 0);
}

TEST_CASE("1M tokens on 128 A100s: the ring plan fits in 80 GB, FlashAttention + FSDP does not") {
  Study s(128);
  Planner& pl = s.planner;
  const Plan p = pl.plan(study_job(128, 1 << 20));
  CHECK(p.predicted.fits);
  CHECK(p.predicted.memory_bytes_per_gpu <= 80.0 * (1 << 30));
  REQUIRE(p.baselines.size() == 3);
  CHECK(p.baselines[0].strategy == Strategy::kFlashFsdp);
  CHECK_FALSE(p.baselines[0].fits);
  // The study's headline at this size: 8.4 % communication overhead, 0.84x linear.
  CHECK(p.predicted.comm_overhead < 0.084);
  CHECK(p.predicted.scaling_efficiency > 0.84);
  CHECK(p.predicted.mfu > 0.3);
}

TEST_CASE("the plan stores the effective batch: whole sequences, at least one") {
  Study s(16);
  Planner& pl = s.planner;
  const int64_t M = int64_t{1} << 20;
  CHECK(pl.best_ring_plan(study_job(16, M), {}).job.batch_tokens == 2 * M);  // default 2M
  Job j = study_job(16, M);
  j.batch_tokens = 3 * M / 2;  // 1.5 sequences: one
  const Plan one = pl.best_ring_plan(j, {});
  CHECK(one.job.batch_tokens == M);
  CHECK(one.predicted.tokens_per_s * one.predicted.step_time_s == doctest::Approx(M));
  j.batch_tokens = M / 2;  // less than a sequence: still one
  CHECK(pl.best_ring_plan(j, {}).job.batch_tokens == M);
}

TEST_CASE("the search says what it prices next: each kind, stage shape and ring size") {
  Study s(16);
  std::vector<std::string> heard;
  s.planner.set_progress([&](const std::string& line) { heard.push_back(line); });
  s.planner.best_plan(study_job(16, 1 << 17), {});
  auto said = [&](const std::string& line) { return std::find(heard.begin(), heard.end(), line) != heard.end(); };
  CHECK(said("searching p2p plans at pp 1 x tp 1, cp 1 (stage shape 1 of 14)"));
  CHECK(said("searching p2p plans at pp 1 x tp 1, cp 16 (stage shape 1 of 14)"));
  CHECK(said("searching a2a plans at pp 1 x tp 8, cp 2 (stage shape 4 of 14)"));
  CHECK(said("searching a2a+p2p plans at pp 1 x tp 1, cp 8 (stage shape 1 of 14)"));
}

TEST_CASE("a pinned micro-batch is at most a data-parallel replica's share of the batch") {
  Study s(16);
  Job j = study_job(16, 8192);
  j.batch_sequences = 256;
  SearchPins pins;
  pins.micro_batch = 64;  // at most 4 replicas
  const Plan p = s.planner.best_plan(j, pins);
  CHECK(p.choice.micro_batch == 64);
  CHECK(p.choice.dp <= 4);
  CHECK(int64_t{p.choice.dp} * p.choice.micro_batch * p.choice.grad_accum == 256);
  CHECK(micro_batch_why_invalid(j, 64, 8) ==
        "micro_batch 64 is more than the 32 sequences a data-parallel replica has in a step (256 over dp 8)");
  pins.micro_batch = 257;  // more than the batch: priced, it would run sequences the batch lacks
  CHECK_THROWS_WITH_AS(s.planner.best_plan(j, pins),
                       doctest::Contains("micro_batch 257 is more than the 256 sequences of a step's batch"),
                       InputError);
  // The attention and layer workloads run one sequence: a pin of more is refused, not
  // planned (the schedule generator would refuse the plan).
  for (Workload w : {Workload::kAttention, Workload::kLayer}) {
    j.workload = w;
    pins.micro_batch = 2;
    CHECK_THROWS_WITH_AS(s.planner.plan(j, pins), doctest::Contains("micro_batch > 1 applies to step workloads"),
                         InputError);
  }
}

TEST_CASE("a batch in sequences (Megatron's --global-batch-size) holds at every length") {
  Study s(16);
  Planner& pl = s.planner;
  for (int64_t n : {int64_t{8192}, int64_t{1} << 20}) {
    Job j = study_job(16, n);
    j.batch_tokens = 1 << 30;  // not read when the batch is in sequences
    j.batch_sequences = 3;
    CHECK(sequences_per_step(j) == 3);
    const Plan p = pl.plan(j);
    CHECK(p.job.batch_tokens == 3 * n);  // the plan file's effective batch
    CHECK(p.predicted.tokens_per_s * p.predicted.step_time_s == doctest::Approx(3.0 * n));
  }
}

TEST_CASE("pins: impossible ones are explained, memory-bound ones are kept and say why") {
  Study s(16);
  Planner& pl = s.planner;
  SearchPins bad;
  bad.cp = 2;
  bad.schedule = Schedule::kBidirectional;
  CHECK_THROWS_WITH_AS(pl.best_ring_plan(study_job(16, 65536), bad), doctest::Contains("bidirectional"), InputError);
  // 16,008 tokens do not split over a pinned ring of 16 with any load balance.
  SearchPins odd;
  odd.cp = 16;
  CHECK_THROWS_WITH_AS(pl.best_ring_plan(study_job(16, 16 * 1000 + 8), odd), doctest::Contains("multiple"), InputError);
  SearchPins searched;
  searched.cp = 16;
  searched.schedule = Schedule::kTwoLevel;
  searched.order = "searched";
  CHECK_THROWS_WITH_AS(pl.best_ring_plan(study_job(16, 65536), searched),
                       doctest::Contains("searched order is for flat and bidirectional"), InputError);
  SearchPins tile;
  tile.block_q = 256;
  tile.block_kv = 256;
  CHECK_THROWS_WITH_AS(pl.best_ring_plan(study_job(16, 65536), tile), doctest::Contains("on-chip"), InputError);
  // The p2p ring's search refuses another kind's pin rather than price a ring in its place.
  SearchPins a2a;
  a2a.cp_comm_type = Strategy::kUlysses;
  CHECK_THROWS_WITH_AS(pl.best_ring_plan(study_job(16, 65536), a2a), doctest::Contains("--cp-comm-type a2a"), InputError);
  a2a.cp_comm_type = Strategy::kRing;
  CHECK_NOTHROW(pl.best_ring_plan(study_job(16, 65536), a2a));
  SearchPins one;
  one.cp = 1;
  one.tp = 1;  // a whole sequence per GPU (a TP group of 8 would hold it)
  const Plan p = pl.best_ring_plan(study_job(16, 1 << 20), one);
  CHECK(p.choice.cp == 1);
  CHECK_FALSE(p.predicted.fits);
  CHECK(p.predicted.why_not.find("GiB") != std::string::npos);
}

TEST_CASE("the search prices candidates bare and returns its pick explained, as predict() would") {
  Study s(16);
  Planner& pl = s.planner;
  CostModel cost(s.model, s.fabric, CostParams::from_topology(s.topo));
  // A ring plan: the overlap threshold is a reader's field, filled for the pick only.
  SearchPins flat;
  flat.tp = 1;  // a ring over all 1M tokens (tp 8 would hold them in one TP group)
  flat.pp = 1;
  const Plan ring = pl.best_ring_plan(study_job(16, 1 << 20), flat);
  const Prediction ring_again = cost.predict(ring.job, ring.choice);
  CHECK(ring.choice.cp > 1);
  CHECK(ring.predicted.overlap_threshold_tokens > 0);
  CHECK(ring.predicted.overlap_threshold_tokens == doctest::Approx(ring_again.overlap_threshold_tokens));
  CHECK(ring.predicted.why_not == ring_again.why_not);
  // A collective kind that does not fit under unsharded weights says so, with fsdp's figure.
  SearchPins zero1;
  zero1.sharding = Sharding::kZero1;
  zero1.tp = 1;
  zero1.pp = 1;
  const Plan ag = pl.best_collective_cp_plan(Strategy::kAllGatherCp, study_job(16, 1 << 20), zero1);
  REQUIRE_FALSE(ag.predicted.fits);
  CHECK(ag.predicted.why_not.find("zero1's model states and layer buffers take") != std::string::npos);
  CHECK(ag.predicted.why_not == cost.predict(ag.job, ag.choice).why_not);
}

TEST_CASE("Ulysses is infeasible when no ring size divides the heads, and says so") {
  Study s(16);
  ModelSpec m = s.model;
  m.heads = 3;
  m.kv_heads = 3;
  m.hidden = 3 * 128;
  Planner pl(m, s.fabric, CostParams::from_topology(s.topo));
  const auto b = pl.baselines(study_job(16, 65536));
  REQUIRE(b.size() == 3);
  CHECK(b[2].strategy == Strategy::kUlysses);
  CHECK_FALSE(b[2].feasible);
  CHECK(b[2].why_not.find("heads") != std::string::npos);
}

TEST_CASE("capacity search: the longest sequence that fits") {
  Study s(16);
  Planner& pl = s.planner;
  const Plan p = pl.max_seq(study_job(16, 0));
  CHECK(p.predicted.fits);
  CHECK(p.job.seq_len % 32 == 0);
  CHECK(p.job.seq_len >= 1 << 20);  // 16 A100s hold at least 1M tokens of a 7B model
  CHECK_FALSE(pl.best_ring_plan(study_job(16, p.job.seq_len + 2 * 16 * 64), {}).predicted.fits);
}

TEST_CASE("the search covers the whole space and stays fast enough to count") {
  Study s(128);
  Planner& pl = s.planner;
  SearchStats st;
  pl.best_ring_plan(study_job(128, 1 << 20), {}, &st);
  CHECK(st.candidates > 4000);  // 2 x 2 tile sizes (kTileSizes) x orders x schedules x ...
  CHECK(st.evaluated > 0);
  CHECK(st.evaluated <= st.candidates);
}

TEST_CASE("every CP kind is searched as a plan, and --cp-comm-type pins one") {
  Study s(64);
  Planner& pl = s.planner;
  const Job job = study_job(64, 524288);
  const Plan best = pl.plan(job);
  // The pick is the best of the kinds: at least as fast as each baseline that fits.
  for (const Baseline& b : best.baselines) {
    if (b.feasible && b.fits) CHECK(best.predicted.tokens_per_s >= b.tokens_per_s * (1 - 1e-9));
  }
  for (Strategy kind : {Strategy::kRing, Strategy::kAllGatherCp, Strategy::kUlysses}) {
    SearchPins pins;
    pins.cp_comm_type = kind;
    const Plan p = pl.best_plan(job, pins);
    CHECK(p.choice.strategy == kind);
    CHECK(p.choice.cp >= 2);
    CHECK(p.predicted.tokens_per_s <= best.predicted.tokens_per_s * (1 + 1e-9));
  }
  // a2a splits the 32 heads: cp 64 cannot.
  SearchPins a2a64;
  a2a64.cp_comm_type = Strategy::kUlysses;
  a2a64.cp = 64;
  CHECK_THROWS_WITH_AS(pl.best_plan(study_job(64, 1 << 20), a2a64),
                       doctest::Contains("no a2a plan can run this job with --cp-comm-type a2a --cp 64: Ulysses "
                                         "needs cp to divide the 32 query heads"),
                       InputError);
  // The ring's own choices do not apply to the other kinds.
  SearchPins mixed;
  mixed.cp_comm_type = Strategy::kAllGatherCp;
  mixed.schedule = Schedule::kBidirectional;
  CHECK_THROWS_WITH_AS(pl.best_plan(job, mixed), doctest::Contains("choices of the p2p ring"), InputError);
  // A ring pin alone keeps the search on p2p.
  SearchPins flat;
  flat.schedule = Schedule::kFlat;
  CHECK(pl.best_plan(job, flat).choice.strategy == Strategy::kRing);
  CHECK(parse_cp_comm_type("all_gather", "x", "f") == Strategy::kAllGatherCp);
  CHECK(parse_cp_comm_type("a2a+p2p", "x", "f") == Strategy::kUsp);
  CHECK_THROWS_WITH_AS(parse_cp_comm_type("ring", "x", "--cp-comm-type"), doctest::Contains("a2a+p2p"), InputError);
}

TEST_CASE("sliding window: the flat ring over contiguous chunks, cut to the steps the window needs") {
  Study s(16);
  ModelSpec m = s.model;
  m.sliding_window = 4096;
  Planner pl(m, s.fabric, CostParams::from_topology(s.topo));
  SearchPins ring;
  ring.cp_comm_type = Strategy::kRing;
  ring.cp = 16;
  const Plan p = pl.best_plan(study_job(16, 131072), ring);
  CHECK(p.choice.schedule == Schedule::kFlat);
  CHECK(p.choice.load_balance == LoadBalance::kContiguous);
  // c = 8K >= W: the own block and the previous one; attention costs a fraction of full
  // causal attention's.
  Planner full(s.model, s.fabric, CostParams::from_topology(s.topo));
  const Plan f = full.best_plan(study_job(16, 131072), ring);
  CHECK(p.predicted.attention_compute_s < 0.25 * f.predicted.attention_compute_s);
  SearchPins bidi = ring;
  bidi.schedule = Schedule::kBidirectional;
  CHECK_THROWS_WITH_AS(pl.best_plan(study_job(16, 131072), bidi), doctest::Contains("sliding window (4096 tokens)"),
                       InputError);
  // A window as long as the sequence changes nothing.
  const Plan same = pl.best_plan(study_job(16, 4096), {});
  const Plan same_full = full.best_plan(study_job(16, 4096), {});
  CHECK(same.predicted.step_time_s == doctest::Approx(same_full.predicted.step_time_s));
}

TEST_CASE("sliding window: all_gather gathers only the window's blocks") {
  Study s(16);
  ModelSpec m = s.model;
  m.sliding_window = 4096;
  Planner pl(m, s.fabric, CostParams::from_topology(s.topo));
  Planner full(s.model, s.fabric, CostParams::from_topology(s.topo));
  SearchPins ag;
  ag.cp_comm_type = Strategy::kAllGatherCp;
  ag.cp = 16;
  Job job = study_job(16, 131072);
  job.workload = Workload::kAttention;
  const Plan w = pl.best_plan(job, ag);
  CHECK(w.choice.load_balance == LoadBalance::kContiguous);
  // c = 8K: the own block and one more instead of all 16, in memory and on the wire.
  const Plan f = full.best_plan(job, ag);
  CHECK(w.predicted.memory.working_set < f.predicted.memory.working_set);
  CHECK(w.predicted.exposed_comm_s < 0.2 * f.predicted.exposed_comm_s);
}

TEST_CASE("a --dp pin fixes the data-parallel degree: cp follows from tp and pp, one that cannot split is explained") {
  Study s(64);
  const Job job = study_job(64, 131072);
  SearchPins pins;
  pins.dp = 4;
  const Plan p = s.planner.plan(job, pins);
  CHECK(p.choice.dp == 4);
  CHECK(p.choice.tp * p.choice.cp * p.choice.pp * p.choice.dp == 64);
  pins.tp = 2;
  pins.pp = 1;
  const Plan q = s.planner.plan(job, pins);
  CHECK(q.choice.dp == 4);
  CHECK(q.choice.cp == 8);
  // A pinned cp that does not make up the groups with dp, and a kind dp leaves no ring for.
  pins.cp = 4;
  try {
    s.planner.plan(job, pins);
    FAIL("tp 2 x cp 4 x dp 4 on 64 GPUs with pp 1 was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("cp 4 x dp 4 is not the 32 TP groups") != std::string::npos);
  }
  SearchPins a2a;
  a2a.dp = 64;
  a2a.cp_comm_type = Strategy::kUlysses;
  try {
    s.planner.plan(job, a2a);
    FAIL("a2a with dp 64 on 64 GPUs was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("a2a needs cp >= 2 (dp 64 leaves cp 1 of 64 TP groups)") != std::string::npos);
  }
}
