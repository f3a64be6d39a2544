// The sharding levels (planner/data_parallel.h): which collectives each micro-step runs,
// hsdp's groups, the all-reduce's price, and the search's pick per level.
#include <doctest/doctest.h>

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/schedule.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "tests/planner/round_specs.h"

namespace rm {
namespace {

TEST_CASE("collectives per micro-step and level (data_parallel.h's table)") {
  // 3 micro-steps: first, middle, last.
  auto at = [](Sharding s, int k) { return micro_step_collectives(s, k, 3, 16); };
  CHECK(at(Sharding::kFsdp, 1).forward_gather);
  CHECK(at(Sharding::kFsdp, 1).backward_gather);
  CHECK(at(Sharding::kFsdp, 1).reduce_scatter);
  CHECK(!at(Sharding::kFsdp, 2).all_reduce);
  CHECK(at(Sharding::kHsdp, 2).all_reduce);
  CHECK(!at(Sharding::kHsdp, 1).all_reduce);
  CHECK(at(Sharding::kZero2, 0).forward_gather);
  CHECK(!at(Sharding::kZero2, 1).forward_gather);
  CHECK(at(Sharding::kZero2, 1).reduce_scatter);
  CHECK(!at(Sharding::kZero2, 0).backward_gather);
  CHECK(!at(Sharding::kZero1, 1).any());
  CHECK(at(Sharding::kZero1, 2).reduce_scatter);
  CHECK(!at(Sharding::kDdp, 0).any());
  CHECK(at(Sharding::kDdp, 2).all_reduce);
  CHECK(!at(Sharding::kDdp, 2).reduce_scatter);
  // One data-parallel GPU: nothing to shard or reduce.
  CHECK(!micro_step_collectives(Sharding::kDdp, 0, 1, 1).any());
  // One micro-step is first and last.
  const MicroStepCollectives z1 = micro_step_collectives(Sharding::kZero1, 0, 1, 8);
  CHECK((z1.forward_gather && z1.reduce_scatter && !z1.backward_gather));
}

TEST_CASE("the GEMM size curve is the framework's, and FSDP's where none is named") {
  PlanChoice fsdp;
  fsdp.sharding = Sharding::kFsdp;
  fsdp.dp = 8;
  PlanChoice zero1 = fsdp;
  zero1.sharding = Sharding::kZero1;
  PlanChoice one_gpu = fsdp;
  one_gpu.dp = 1;
  Job job;
  CHECK(pays_gemm_size_curve(job, fsdp));
  CHECK_FALSE(pays_gemm_size_curve(job, zero1));
  CHECK_FALSE(pays_gemm_size_curve(job, one_gpu));  // nothing to regather
  job.framework = Framework::kMegatron;  // Megatron-Bridge's FSDP run reaches the limit
  CHECK_FALSE(pays_gemm_size_curve(job, fsdp));
  CHECK_FALSE(pays_gemm_size_curve(job, zero1));
  job.framework = Framework::kPytorch;  // FlashAttention-2's DDP + ZeRO-1 run pays it
  CHECK(pays_gemm_size_curve(job, zero1));
  CHECK(pays_gemm_size_curve(job, one_gpu));
}

TEST_CASE("a PyTorch pipeline runs fsdp and zero2 as zero1, with fp32 gradients") {
  PlanChoice ch;
  ch.dp = 4;
  ch.pp = 2;
  Job job;
  for (Sharding s : kShardingLevels) {
    ch.sharding = s;
    CAPTURE(std::string(to_string(s)));
    CHECK(sharding_as_run(job, ch) == s);  // no framework named: the level as asked
    CHECK(grad_element_bytes(job, ch, 2) == 2);
  }
  job.framework = Framework::kPytorch;
  job.grad_reduce_in_fp32 = true;  // torchtitan's mixed_precision_reduce = "float32"
  for (Sharding s : {Sharding::kFsdp, Sharding::kZero2, Sharding::kZero1}) {
    ch.sharding = s;
    CHECK(sharding_as_run(job, ch) == Sharding::kZero1);
    CHECK(as_run(job, ch).sharding == Sharding::kZero1);
    CHECK(grad_element_bytes(job, ch, 2) == 4);
    CHECK(grad_element_bytes(job, as_run(job, ch), 2) == 4);  // the same asked of as_run
    job.grad_reduce_in_fp32 = false;  // mixed_precision_reduce = "bfloat16": held in bf16
    CHECK(grad_element_bytes(job, ch, 2) == 2);
    job.grad_reduce_in_fp32 = true;
  }
  ch.sharding = Sharding::kDdp;
  CHECK(sharding_as_run(job, ch) == Sharding::kDdp);
  CHECK(grad_element_bytes(job, ch, 2) == 2);
  ch.sharding = Sharding::kFsdp;
  ch.pp = 1;  // FSDP2 without a pipeline reshards every micro-step
  CHECK(sharding_as_run(job, ch) == Sharding::kFsdp);
  CHECK(grad_element_bytes(job, ch, 2) == 2);  // its fp32 shards: in the 2 + 2 + 12 already
  CHECK(grad_reduce_element_bytes(job, 2) == 4);  // but it reduce-scatters fp32
  job.framework = Framework::kMegatron;
  ch.pp = 2;
  CHECK(sharding_as_run(job, ch) == Sharding::kFsdp);
  CHECK(grad_element_bytes(job, ch, 2) == 4);  // main_grad in fp32, whatever the level
  job.grad_reduce_in_fp32 = false;  // --grad-reduce-in-bf16
  CHECK(grad_element_bytes(job, ch, 2) == 2);
  CHECK(grad_reduce_element_bytes(job, 2) == 2);
  CHECK(grad_reduce_element_bytes(job, 4) == 4);  // an fp32 GPU's are fp32 either way
}

TEST_CASE("the frameworks reduce a bf16 run's gradients in fp32 by default") {
  CHECK(framework_grad_reduce_in_fp32(Framework::kMegatron));  // Megatron-LM with --bf16
  CHECK(framework_grad_reduce_in_fp32(Framework::kPytorch));   // torchtitan, Composer
  CHECK_FALSE(framework_grad_reduce_in_fp32(Framework::kAny));  // ZeRO's 2 + 2 + 12
}

TEST_CASE("the framework changes a plan's GEMM time by the curve and nothing else") {
  const ModelSpec m = load_model("llama2-7b");
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 64);
  const CostParams cost = CostParams::from_topology(topo);
  const Job job = test::step_job("llama2-7b", "dgx-a100-ib", 64, 8192);
  SearchPins pins;
  pins.cp = 1;
  pins.tp = 1;
  pins.sharding = Sharding::kZero1;
  auto priced = [&](Framework f) {
    Job j = job;
    j.framework = f;
    Planner planner(m, fabric, cost);
    return planner.plan(j, pins);
  };
  const Plan any = priced(Framework::kAny), megatron = priced(Framework::kMegatron), pytorch = priced(Framework::kPytorch);
  CHECK(megatron.predicted.step_time_s == doctest::Approx(any.predicted.step_time_s));  // whole weights: the limit
  CHECK(pytorch.predicted.linear_compute_s > 1.1 * any.predicted.linear_compute_s);
  CHECK(pytorch.predicted.attention_compute_s == doctest::Approx(any.predicted.attention_compute_s));
}

TEST_CASE("hsdp groups: shard groups inside a node, replicas across") {
  // tp 1, cp 2, dp 8 on 16 GPUs in order 0..15; dp_shard 4: shard groups of cp·4 = 8 GPUs.
  std::vector<int> order(16);
  for (int i = 0; i < 16; ++i) order[i] = i;
  const auto shard = hsdp_shard_groups(order, 1, 2, 4);
  REQUIRE(shard.size() == 2);
  CHECK(shard[0] == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(shard[1] == std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15});
  const auto repl = hsdp_replicate_groups(order, 1, 2, 4);
  REQUIRE(repl.size() == 8);
  CHECK(repl[0] == std::vector<int>{0, 8});
  CHECK(repl[3] == std::vector<int>{3, 11});
  CHECK(hsdp_dp_shard(1, 2, 8, 8) == 4);
  CHECK(hsdp_dp_shard(8, 1, 2, 8) == 1);
  CHECK(hsdp_dp_shard(1, 1, 8, 8) == 0);  // one node: no second replica
}

TEST_CASE("an all-reduce is a reduce-scatter then an all-gather: twice the bytes and ring steps") {
  const Topology topo = load_topology("dgx-a100-ib");
  const Fabric fabric(topo, 32);
  CostModel cm(load_model("llama2-7b"), fabric, CostParams::from_topology(topo));
  const GroupCollective& g = cm.fsdp_collective(1);
  const double shard = 16e6;
  // time(b) = max(lat + b·s per ring) + (steps - 1)·lat of the slower; all-reduce: 2b and 2·steps - 1.
  const double ag = std::max(g.rail.time(shard), g.node.time(shard)) +
                    std::max((g.rail_steps - 1) * g.rail.latency_s, (g.node_steps - 1) * g.node.latency_s);
  const double ar = std::max(g.rail.time(2 * shard), g.node.time(2 * shard)) +
                    std::max((2 * g.rail_steps - 1) * g.rail.latency_s, (2 * g.node_steps - 1) * g.node.latency_s);
  CHECK(g.time(shard) == doctest::Approx(ag));
  CHECK(g.all_reduce_time(shard) == doctest::Approx(ar));
  CHECK(g.all_reduce_time(shard) > 1.9 * g.time(shard));
}

TEST_CASE("the search prices every level: a pin that does not fit says by how much") {
  const Topology topo = load_topology("dgx-a100-ib");
  const ModelSpec m = load_model("llama2-7b");
  const Fabric fabric(topo, 64);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  const Job job = test::step_job("llama2-7b", "dgx-a100-ib", 64, 8192);
  SearchPins pins;
  pins.tp = 1;
  // Levels priced on the same plan otherwise: more sharding, less memory (ZeRO Fig. 1).
  pins.cp = 1;
  pins.micro_batch = 1;
  pins.checkpointing = Checkpointing::kFull;
  double last = 1e30;
  for (Sharding s : {Sharding::kDdp, Sharding::kZero1, Sharding::kZero2, Sharding::kFsdp}) {
    CAPTURE(std::string(to_string(s)));
    pins.sharding = s;
    const Plan p = planner.best_plan(job, pins);
    CHECK(p.choice.sharding == s);
    CHECK(p.predicted.memory_bytes_per_gpu < last);
    last = p.predicted.memory_bytes_per_gpu;
  }
  // ddp holds 16 B/param of 6.7B parameters on every GPU: it cannot fit in 80 GB (without
  // pipeline stages, which would split the states: pp 2 fits).
  pins.sharding = Sharding::kDdp;
  pins.pp = 1;
  const Plan ddp = planner.best_plan(job, pins);
  CHECK(!ddp.predicted.fits);
  CHECK(ddp.predicted.why_not.find("GiB over") != std::string::npos);
  // Unpinned, the pick fits and is one of the levels.
  const Plan any = planner.best_plan(job, {});
  CHECK(any.predicted.fits);
}

TEST_CASE("hsdp is searched only where the schedule generator runs it: not with a2a+p2p") {
  // Llama 3 70B at 128K on 64 H100s, a2a+p2p pinned: hsdp (fsdp inside the ring's nodes,
  // replicated across) was its pick, a plan `simulate` then refused.
  const Topology topo = load_topology("dgx-h100-superpod");
  const ModelSpec m = load_model("llama3-70b");
  const Fabric fabric(topo, 64);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  Job job = test::step_job("llama3-70b", "dgx-h100-superpod", 64, 131072);
  job.workload = Workload::kLayer;
  SearchPins pins;
  pins.cp_comm_type = Strategy::kUsp;
  const Plan usp = planner.best_plan(job, pins);
  CHECK(usp.choice.strategy == Strategy::kUsp);
  CHECK(usp.choice.sharding != Sharding::kHsdp);
  CHECK(generate_schedule(usp, m, fabric).ranks.size() > 0);
  pins.sharding = Sharding::kHsdp;
  try {
    planner.best_plan(job, pins);
    FAIL("hsdp with a2a+p2p was planned");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("hsdp with a2a+p2p is not generated yet") != std::string::npos);
  }
}

}  // namespace
}  // namespace rm
