// The corpus's error summaries and the track record a plan carries: which GPU a topology's
// spec is, what counts towards its record, and the medians as validate --published takes them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "planner/published_accuracy.h"
#include "planner/published_corpus.h"
#include "planner/published_prediction.h"
#include "planner/spec_library.h"

namespace {

rm::PublishedEntry entry(const std::string& id, const std::string& gpu, rm::Split split) {
  rm::PublishedEntry e;
  e.id = id;
  e.gpu = gpu;
  e.split = split;
  return e;
}

rm::PublishedCheck priced(double error, bool modelled = true) {
  rm::PublishedCheck c;
  c.modelled = modelled;
  c.error = error;
  return c;
}

}  // namespace

TEST_CASE("summarize: median and worst |error| of the modelled rows, by split and GPU type") {
  const rm::PublishedEntry a = entry("a", "a100-80gb", rm::Split::kFit);
  const rm::PublishedEntry b = entry("b", "a100-80gb", rm::Split::kHeldout);
  const rm::PublishedEntry c = entry("c", "h100-80gb", rm::Split::kHeldout);
  const rm::PublishedEntry d = entry("d", "a100-80gb", rm::Split::kFit);
  const rm::PublishedEntry e = entry("e", "a100-80gb", rm::Split::kFit);
  const std::vector<rm::PricedEntry> rows = {
      {&a, priced(0.02)}, {&b, priced(-0.10)}, {&c, priced(0.30)}, {&d, priced(-0.05)}, {&e, priced(0.90, false)}};

  const rm::ErrorSummary all = rm::summarize(rows, std::nullopt);
  CHECK(all.count == 4);  // e is not modelled
  CHECK(all.median == doctest::Approx(0.10));  // the upper middle of 0.02 0.05 0.10 0.30
  CHECK(all.worst == doctest::Approx(0.30));
  CHECK(all.worst_id == "c");

  const rm::ErrorSummary a100 = rm::summarize(rows, std::nullopt, "a100-80gb");
  CHECK(a100.count == 3);
  CHECK(a100.median == doctest::Approx(0.05));
  CHECK(a100.worst_id == "b");

  const rm::ErrorSummary held = rm::summarize(rows, rm::Split::kHeldout, "a100-80gb");
  CHECK(held.count == 1);
  CHECK(held.worst == doctest::Approx(0.10));
  CHECK(rm::summarize(rows, rm::Split::kFit, "h100-80gb").count == 0);
}

TEST_CASE("corpus_gpu_type: a shipped topology's GPU as shipped, and nothing for one changed") {
  CHECK(rm::corpus_gpu_type(rm::load_topology("dgx-a100-ib").gpu) == "a100-80gb");
  CHECK(rm::corpus_gpu_type(rm::load_topology("a100-nvlink-box").gpu) == "a100-80gb");
  CHECK(rm::corpus_gpu_type(rm::load_topology("dgx-h100-superpod").gpu) == "h100-80gb");
  CHECK(rm::corpus_gpu_type(rm::load_topology("llama3-h100-roce").gpu) == "h100-80gb");
  CHECK(rm::corpus_gpu_type(rm::load_topology("grand-teton-h100-96gb").gpu) == "h100-96gb");
  CHECK(rm::corpus_gpu_type(rm::load_topology("h800-nvlink-box").gpu) == "h800");
  CHECK(rm::corpus_gpu_type(rm::load_topology("dgx-b200-ib").gpu) == "b200");
  CHECK(rm::corpus_gpu_type(rm::load_topology("dgx-gb200-nvl72").gpu) == "gb200");
  CHECK_FALSE(rm::corpus_gpu_type(rm::load_topology("cpu-local").gpu));
  CHECK_FALSE(rm::corpus_gpu_type(rm::load_topology("tpu-v4-torus").gpu));

  // Any field changed makes it a GPU no published run has checked (same_gpu_spec reads each).
  const rm::GpuSpec a100 = rm::load_topology("dgx-a100-ib").gpu;
  const std::vector<void (*)(rm::GpuSpec&)> changes = {
      [](rm::GpuSpec& g) { g.name += "x"; },
      [](rm::GpuSpec& g) { g.memory_bytes *= 2; },
      [](rm::GpuSpec& g) { g.peak_flops *= 2; },
      [](rm::GpuSpec& g) { g.hbm_bytes_per_s *= 2; },
      [](rm::GpuSpec& g) { g.runtime_reserve_bytes *= 2; },
      [](rm::GpuSpec& g) { g.gemm_efficiency += 0.01; },
      [](rm::GpuSpec& g) { g.gemm_half_flops *= 2; },
      [](rm::GpuSpec& g) { g.element_bytes = 4; },
      [](rm::GpuSpec& g) { g.attention_kernels["flash_attn_3"] = 1.7; },
      [](rm::GpuSpec& g) { g.fp8_peak_flops = 1e15; },
      [](rm::GpuSpec& g) { g.fp8_gemm_efficiency = 0.5; },
      [](rm::GpuSpec& g) { g.attention.max_efficiency += 0.01; },
      [](rm::GpuSpec& g) { g.attention.half_flops *= 2; },
      [](rm::GpuSpec& g) { g.attention.tile_bytes_limit *= 2; },
      [](rm::GpuSpec& g) { g.attention.backward_factor = 2.5; },
      [](rm::GpuSpec& g) { g.attention.merge_bytes += 1; },
      [](rm::GpuSpec& g) { g.attention.dq_merge_bytes += 1; },
      [](rm::GpuSpec& g) { g.attention.slice_merge_bytes += 1; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    CAPTURE(i);
    rm::GpuSpec g = a100;
    changes[i](g);
    CHECK_FALSE(rm::corpus_gpu_type(g));
  }
}

TEST_CASE("track_record: the GPU type's entries of the plan's workload that measure time") {
  const rm::PublishedCorpus corpus = rm::load_published_corpus();
  const rm::GpuSpec a100 = rm::load_topology("dgx-a100-ib").gpu;
  for (rm::Workload w : {rm::Workload::kStep, rm::Workload::kAttention}) {
    CAPTURE(rm::to_string(w));
    int count = 0;
    double worst = 0;
    for (const rm::PublishedEntry& e : corpus.entries) {
      if (e.gpu != "a100-80gb" || e.workload != w || e.metric == rm::Metric::kGibPerGpu) continue;
      const rm::PublishedCheck c = rm::check_published(e);
      if (!c.modelled) continue;
      ++count;
      worst = std::max(worst, std::abs(c.error));
    }
    const auto t = rm::track_record(a100, w);
    REQUIRE(t);
    CHECK(t->gpu == "a100-80gb");
    CHECK(t->all.count == count);
    CHECK(t->all.worst == doctest::Approx(worst));
    CHECK(t->all.median <= t->all.worst);
    CHECK(t->heldout.count < t->all.count);
  }
  // A framework's own runs where the corpus has them on the GPU type, else every framework's.
  const rm::GpuSpec h100 = rm::load_topology("dgx-h100-ib").gpu;
  int megatron = 0;
  for (const rm::PublishedEntry& e : corpus.entries)
    megatron += e.gpu == "h100-80gb" && e.workload == rm::Workload::kStep && e.framework == rm::Framework::kMegatron &&
                rm::check_published(e).modelled;
  const auto own = rm::track_record(h100, rm::Workload::kStep, rm::Framework::kMegatron);
  REQUIRE(own);
  CHECK(own->framework == rm::Framework::kMegatron);
  CHECK(own->all.count == megatron);
  CHECK(own->all.count < rm::track_record(h100, rm::Workload::kStep)->all.count);
  const auto fallback = rm::track_record(a100, rm::Workload::kStep, rm::Framework::kMegatron);  // no Megatron run on A100
  REQUIRE(fallback);
  CHECK(fallback->framework == rm::Framework::kAny);
  CHECK(fallback->all.count == rm::track_record(a100, rm::Workload::kStep)->all.count);
  // h800's entries are attention kernels only; a GPU no entry names has no record.
  CHECK_FALSE(rm::track_record(rm::load_topology("h800-nvlink-box").gpu, rm::Workload::kStep));
  CHECK(rm::track_record(rm::load_topology("h800-nvlink-box").gpu, rm::Workload::kAttention));
  CHECK_FALSE(rm::track_record(rm::load_topology("cpu-local").gpu, rm::Workload::kStep));
  CHECK_FALSE(rm::track_record(a100, rm::Workload::kLayer));
}

TEST_CASE("closest_runs: the corpus's runs most like a plan, whatever their GPU type, priced as validate prices them") {
  // torchtitan's Llama 3 8B on a ring of 8 at 256K on one Grand Teton host: its own row is at
  // distance 0; the next ones differ in length, ring, GPUs or type.
  rm::Plan plan;
  plan.job.model = "llama3-8b";
  plan.job.topology = "grand-teton-h100-96gb";
  plan.job.gpus = 8;
  plan.job.seq_len = 262144;
  plan.job.workload = rm::Workload::kStep;
  plan.job.framework = rm::Framework::kPytorch;
  plan.job.fp8_recipe = rm::Fp8Recipe::kTensorwise;  // torchtitan's float8, as the row ran
  plan.choice.cp = 8;
  const std::vector<rm::ClosestRun> runs = rm::closest_runs(plan, false);
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].entry->id == "torchtitan-h100-llama3-8b-cp8-256k");
  CHECK(runs[0].distance == 0);
  for (size_t i = 0; i < runs.size(); ++i) {
    CAPTURE(runs[i].entry->id);
    if (i > 0) CHECK(runs[i].distance >= runs[i - 1].distance);
    CHECK(runs[i].entry->workload == rm::Workload::kStep);
    CHECK(runs[i].entry->metric != rm::Metric::kGibPerGpu);  // time, not memory
    const rm::PublishedCheck c = rm::check_published(*runs[i].entry);
    REQUIRE(c.modelled);
    CHECK(runs[i].error == doctest::Approx(c.error));
  }
  // One doubling of the sequence and the ring: CP 4 at 128K is then 2 apart, and comes after
  // the exact row.
  const auto cp4 = std::find_if(runs.begin(), runs.end(),
                                [](const rm::ClosestRun& r) { return r.entry->id == "torchtitan-h100-llama3-8b-cp4-128k"; });
  REQUIRE(cp4 != runs.end());
  CHECK(cp4->distance == doctest::Approx(2.0));
  // The same plan in bf16: every fp8 run one further.
  rm::Plan bf16 = plan;
  bf16.job.fp8_recipe = rm::Fp8Recipe::kNone;
  CHECK(rm::closest_runs(bf16, false)[0].distance == doctest::Approx(1.0));
  // The JSON, and none with a calibrated profile or on a GPU no corpus type describes.
  const nlohmann::json j = rm::closest_runs_json(runs, false);
  CHECK(j.size() == 3);
  CHECK(j[0]["id"] == "torchtitan-h100-llama3-8b-cp8-256k");
  CHECK(j[0]["gpu"] == "h100-96gb");
  CHECK(rm::closest_runs(plan, true).empty());
  CHECK(rm::closest_runs_json({}, true).is_null());
  plan.job.topology = "cpu-local";
  CHECK(rm::closest_runs(plan, false).empty());
  // An attention plan gets attention runs only.
  plan.job.topology = "h800-nvlink-box";
  plan.job.workload = rm::Workload::kAttention;
  plan.job.seq_len = 65536;
  for (const rm::ClosestRun& r : rm::closest_runs(plan, false)) CHECK(r.entry->workload == rm::Workload::kAttention);
}
