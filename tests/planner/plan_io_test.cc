// plan.yaml round trip, the plan JSON contract, enum spellings.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "planner/input_error.h"
#include "planner/plan.h"
#include "planner/units.h"
#include "tests/temp_path.h"

namespace {

rm::Plan sample_plan() {
  rm::Plan p;
  p.job.model = "llama2-7b";
  p.job.topology = "dgx-a100-ib";
  p.job.gpus = 16;
  p.job.seq_len = 1 << 20;
  p.job.batch_tokens = 2 << 20;
  p.job.causal = true;
  p.job.workload = rm::Workload::kLayer;
  p.job.passes = rm::Passes::kForward;
  p.choice.strategy = rm::Strategy::kRing;
  p.choice.cp = 8;
  p.choice.dp = 2;
  p.choice.schedule = rm::Schedule::kTwoLevel;
  p.choice.order_name = "snake";
  p.choice.order.resize(16);
  std::iota(p.choice.order.rbegin(), p.choice.order.rend(), 0);  // 15, 14, ..., 0
  p.choice.load_balance = rm::LoadBalance::kStriped;
  p.choice.block_q = 64;
  p.choice.block_kv = 128;
  p.choice.kv_subblocks = 4;
  p.choice.checkpointing = rm::Checkpointing::kSelective;
  p.choice.grad_accum = 3;
  p.predicted.step_time_s = 12.5;
  p.predicted.tokens_per_s = 167772.16;
  p.predicted.mfu = 0.41;
  p.predicted.fits = true;
  p.predicted.memory_bytes_per_gpu = 61.5 * rm::kGiB;
  p.predicted.memory.activations = 40 * rm::kGiB;
  p.predicted.why_not = "";
  rm::Baseline b;
  b.strategy = rm::Strategy::kUlysses;
  b.feasible = false;
  b.why_not = "32 kv heads do not split over 16 GPUs' ... ";
  p.baselines.push_back(b);
  return p;
}

// Writes to `path` a minimal 2-rank ring plan whose top level also holds `entry` ("key:
// value\n", or ""), reads it back, and returns the InputError's message ("" when it reads;
// `out` then holds the plan).
std::string read_minimal_plan(const std::string& path, const std::string& entry, rm::Plan* out = nullptr) {
  std::ofstream(path) << "model: tiny\ntopology: cpu-local\ngpus: 2\nseq_len: 8k\n" << entry
                      << "plan: {strategy: ring, tp: 1, cp: 2, dp: 1, schedule: flat, order: [0, 1],\n"
                         "       load_balance: zigzag, block_q: 64, block_kv: 64, kv_subblocks: 1,\n"
                         "       checkpointing: none}\n";
  try {
    const rm::Plan p = rm::read_plan_yaml(path);
    if (out) *out = p;
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every enum spelling round-trips, bad ones list the valid spellings") {
  using namespace rm;
  for (auto v : {Strategy::kRing, Strategy::kFlashFsdp, Strategy::kAllGatherCp, Strategy::kUlysses}) {
    CHECK(parse_strategy(to_string(v), "w", "f") == v);
  }
  for (auto v : {Schedule::kFlat, Schedule::kBidirectional, Schedule::kTwoLevel}) {
    CHECK(parse_schedule(to_string(v), "w", "f") == v);
  }
  for (auto v : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    CHECK(parse_load_balance(to_string(v), "w", "f") == v);
  }
  for (auto v : {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull}) {
    CHECK(parse_checkpointing(to_string(v), "w", "f") == v);
  }
  for (auto v : {Workload::kAttention, Workload::kLayer, Workload::kStep}) {
    CHECK(parse_workload(to_string(v), "w", "f") == v);
  }
  for (auto v : {Passes::kForward, Passes::kForwardBackward}) CHECK(parse_passes(to_string(v), "w", "f") == v);
  for (auto v : {Framework::kAny, Framework::kMegatron, Framework::kPytorch}) {
    CHECK(parse_framework(to_string(v), "w", "f") == v);
  }
  CHECK_THROWS_WITH_AS(parse_framework("jax", "p.yaml:3", "framework"),
                       "p.yaml:3: framework: expected one of any, megatron, pytorch (got 'jax')", InputError);
  CHECK(std::string(to_string(Strategy::kAllGatherCp)) == "allgather-cp");
  CHECK(std::string(to_string(Passes::kForwardBackward)) == "forward-backward");
  CHECK_THROWS_WITH_AS(parse_schedule("ring", "--schedule", "schedule"),
                       "--schedule: schedule: expected one of flat, bidirectional, two-level (got 'ring')",
                       InputError);
}

TEST_CASE("plan.yaml round trip") {
  const rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("a.yaml");
  rm::write_plan_yaml(p, path);
  const rm::Plan q = rm::read_plan_yaml(path);
  std::filesystem::remove(path);
  CHECK(q.job.model == p.job.model);
  CHECK(q.job.topology == p.job.topology);
  CHECK(q.job.gpus == 16);
  CHECK(q.job.seq_len == 1048576);
  CHECK(q.job.batch_tokens == 2097152);
  CHECK(q.job.workload == rm::Workload::kLayer);
  CHECK(q.job.passes == rm::Passes::kForward);
  CHECK(q.choice.order == p.choice.order);
  CHECK(q.choice.order_name == "snake");
  CHECK(q.choice.schedule == rm::Schedule::kTwoLevel);
  CHECK(q.choice.load_balance == rm::LoadBalance::kStriped);
  CHECK(q.choice.checkpointing == rm::Checkpointing::kSelective);
  CHECK(q.choice.block_q == 64);
  CHECK(q.choice.block_kv == 128);
  CHECK(q.choice.kv_subblocks == 4);
  CHECK(q.choice.grad_accum == 3);
  CHECK(q.predicted.step_time_s == doctest::Approx(12.5));
  CHECK(q.predicted.memory_bytes_per_gpu == doctest::Approx(61.5 * rm::kGiB).epsilon(1e-5).scale(0));
  CHECK(q.predicted.memory.activations == doctest::Approx(40 * rm::kGiB).epsilon(1e-5).scale(0));
  CHECK(q.predicted.fits);
  REQUIRE(q.baselines.size() == 1);
  CHECK(q.baselines[0].strategy == rm::Strategy::kUlysses);
  CHECK_FALSE(q.baselines[0].feasible);
  CHECK(q.baselines[0].why_not == p.baselines[0].why_not);
  // Writing what was read gives the same text.
  CHECK(rm::plan_to_yaml_string(q) == rm::plan_to_yaml_string(p));
}

TEST_CASE("a plan without predictions reads: sizes may be written 1M") {
  const std::string path = rm::test::temp_path("b.yaml");
  std::ofstream(path) << "model: tiny\ntopology: cpu-local\ngpus: 2\nseq_len: 8k\n"
                         "plan: {strategy: ring, cp: 2, dp: 1, schedule: flat, order: [1, 0],\n"
                         "       load_balance: zigzag, block_q: 64, block_kv: 64, kv_subblocks: 1,\n"
                         "       checkpointing: none}\n";
  const rm::Plan q = rm::read_plan_yaml(path);
  std::filesystem::remove(path);
  CHECK(q.job.seq_len == 8192);
  CHECK(q.job.batch_tokens == 0);
  CHECK(q.job.workload == rm::Workload::kStep);
  CHECK(q.choice.order == std::vector<int>{1, 0});
  CHECK(q.choice.order_name == "custom");
  CHECK(q.choice.grad_accum == 1);
}

TEST_CASE("write_plan_yaml into a missing folder is an InputError and leaves nothing") {
  CHECK_THROWS_AS(rm::write_plan_yaml(sample_plan(), "/nonexistent-dir/plan.yaml"), rm::InputError);
}

TEST_CASE("plan JSON carries the contract's keys") {
  const nlohmann::json j = rm::plan_to_json(sample_plan());
  for (const char* k : {"model", "topology", "gpus", "seq_len", "plan", "predicted", "baselines",
                        "batch_tokens", "causal", "workload", "passes", "attention_kernel"}) {
    CHECK_MESSAGE(j.contains(k), k);
  }
  for (const char* k : {"strategy", "cp", "dp", "schedule", "order", "load_balance", "block_q", "block_kv",
                        "kv_subblocks", "checkpointing", "grad_accum", "order_name"}) {
    CHECK_MESSAGE(j["plan"].contains(k), k);
  }
  for (const char* k : {"step_time_s", "tokens_per_s", "mfu", "comm_overhead", "memory_gib_per_gpu", "fits",
                        "scaling_efficiency", "memory_gib"}) {
    CHECK_MESSAGE(j["predicted"].contains(k), k);
  }
  for (const char* k : {"strategy", "feasible", "fits", "memory_gib_per_gpu", "tokens_per_s", "step_time_s",
                        "cp", "dp", "why_not"}) {
    CHECK_MESSAGE(j["baselines"][0].contains(k), k);
  }
  CHECK(j["plan"]["order"][0] == 15);
  CHECK(j["plan"]["schedule"] == "two-level");
  CHECK(j["predicted"]["memory_gib_per_gpu"].get<double>() == doctest::Approx(61.5));
  CHECK(j["seq_len"] == 1048576);
}

TEST_CASE("the two-level ring's first spelling 'hierarchical' is still read") {
  CHECK(rm::parse_schedule("hierarchical", "x", "schedule") == rm::Schedule::kTwoLevel);
  CHECK(rm::parse_schedule("two-level", "x", "schedule") == rm::Schedule::kTwoLevel);
  CHECK(std::string(rm::to_string(rm::Schedule::kTwoLevel)) == "two-level");
}

TEST_CASE("tp_comm_overlap: written, read back strictly, false in plans from before it") {
  rm::Plan p = sample_plan();
  p.choice.schedule = rm::Schedule::kFlat;
  p.choice.tp = 2;
  p.choice.cp = 4;
  p.choice.tp_comm_overlap = true;
  const std::string path = rm::test::temp_path("tpo.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).choice.tp_comm_overlap);
  CHECK(rm::plan_to_json(p)["plan"]["tp_comm_overlap"] == true);
  auto read_with = [&](const std::string& entry, int tp) {
    std::ofstream(path) << "model: tiny\ntopology: cpu-local\ngpus: 2\nseq_len: 8k\n"
                           "plan: {strategy: ring, tp: " << tp << ", cp: " << 2 / tp
                        << ", dp: 1, schedule: flat, order: [0, 1],\n"
                           "       load_balance: zigzag, block_q: 64, block_kv: 64, kv_subblocks: 1,\n"
                           "       checkpointing: none" << entry << "}\n";
    return rm::read_plan_yaml(path);
  };
  CHECK_FALSE(read_with("", 2).choice.tp_comm_overlap);  // written before the key existed
  CHECK(read_with(", tp_comm_overlap: true", 2).choice.tp_comm_overlap);
  std::string why;
  try {
    read_with(", tp_comm_overlap: sometimes", 2);
  } catch (const rm::InputError& e) {
    why = e.what();
  }
  CHECK(why.find("plan.tp_comm_overlap") != std::string::npos);
  CHECK(why.find("expected true or false") != std::string::npos);
  why.clear();
  try {
    read_with(", tp_comm_overlap: true", 1);
  } catch (const rm::InputError& e) {
    why = e.what();
  }
  CHECK(why.find("expected false with tp 1") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("grad_reduce_in_fp32: written when true, read back strictly, false in plans from before it") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("grads.yaml");
  rm::write_plan_yaml(p, path);
  CHECK_FALSE(rm::read_plan_yaml(path).job.grad_reduce_in_fp32);  // the default is not written
  CHECK(rm::plan_to_json(p)["grad_reduce_in_fp32"] == false);
  p.job.grad_reduce_in_fp32 = true;
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).job.grad_reduce_in_fp32);
  CHECK(rm::plan_to_json(p)["grad_reduce_in_fp32"] == true);
  const std::string why = read_minimal_plan(path, "grad_reduce_in_fp32: 2\n");
  CHECK(why.find("grad_reduce_in_fp32") != std::string::npos);
  CHECK(why.find("expected true or false") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("fp8_recipe: written when set, read back strictly, none in plans from before it") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("fp8.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).job.fp8_recipe == rm::Fp8Recipe::kNone);  // bf16 is not written
  CHECK(rm::plan_to_json(p)["fp8_recipe"] == "none");
  for (rm::Fp8Recipe r : {rm::Fp8Recipe::kTensorwise, rm::Fp8Recipe::kDelayed, rm::Fp8Recipe::kCurrent}) {
    CAPTURE(rm::to_string(r));
    p.job.fp8_recipe = r;
    rm::write_plan_yaml(p, path);
    CHECK(rm::read_plan_yaml(path).job.fp8_recipe == r);
    CHECK(rm::plan_to_json(p)["fp8_recipe"] == rm::to_string(r));
  }
  const std::string why = read_minimal_plan(path, "fp8_recipe: e4m3\n");
  CHECK(why.find("fp8_recipe") != std::string::npos);
  CHECK(why.find("expected one of tensorwise, delayed, current (got 'e4m3')") != std::string::npos);
  CHECK(read_minimal_plan(path, "fp8_recipe: none\n").find("expected one of") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("optimizer states: written when not fp32, read back strictly, fp32 in plans from before it") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("optimizer.yaml");
  rm::write_plan_yaml(p, path);
  const rm::OptimizerStates plain = rm::read_plan_yaml(path).job.optimizer;  // fp32 is not written
  CHECK(plain.main_params_dtype == rm::StateDtype::kFp32);
  CHECK_FALSE(plain.store_param_remainders);
  CHECK(plain.exp_avg_dtype == rm::StateDtype::kFp32);
  CHECK(plain.exp_avg_sq_dtype == rm::StateDtype::kFp32);
  CHECK(rm::plan_to_json(p)["exp_avg_dtype"] == "fp32");
  CHECK(rm::plan_to_json(p)["store_param_remainders"] == false);
  p.job.optimizer = {rm::StateDtype::kFp32, true, rm::StateDtype::kBf16, rm::StateDtype::kFp8};
  rm::write_plan_yaml(p, path);
  const rm::OptimizerStates back = rm::read_plan_yaml(path).job.optimizer;
  CHECK(back.store_param_remainders);
  CHECK(back.exp_avg_dtype == rm::StateDtype::kBf16);
  CHECK(back.exp_avg_sq_dtype == rm::StateDtype::kFp8);
  const nlohmann::json j = rm::plan_to_json(p);
  CHECK(j["main_params_dtype"] == "fp32");
  CHECK(j["store_param_remainders"] == true);
  CHECK(j["exp_avg_dtype"] == "bf16");
  CHECK(j["exp_avg_sq_dtype"] == "fp8");
  std::string why = read_minimal_plan(path, "exp_avg_dtype: fp4\n");
  CHECK(why.find("exp_avg_dtype") != std::string::npos);
  CHECK(why.find("expected one of fp32, fp16, bf16, fp8 (got 'fp4')") != std::string::npos);
  why = read_minimal_plan(path, "main_params_dtype: bf16\n");  // Megatron-LM's choices: fp32, fp16
  CHECK(why.find("expected one of fp32, fp16 (got 'bf16')") != std::string::npos);
  why = read_minimal_plan(path, "main_params_dtype: fp16\nstore_param_remainders: true\n");
  CHECK(why.find("store_param_remainders") != std::string::npos);
  CHECK(why.find("needs main_params_dtype fp32") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("chunked_loss: written when false, read back strictly, true in plans from before it") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("loss.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).job.chunked_loss);  // the default is not written
  CHECK(rm::plan_to_json(p)["chunked_loss"] == true);
  p.job.chunked_loss = false;
  rm::write_plan_yaml(p, path);
  CHECK_FALSE(rm::read_plan_yaml(path).job.chunked_loss);
  CHECK(rm::plan_to_json(p)["chunked_loss"] == false);
  rm::Plan read;
  REQUIRE(read_minimal_plan(path, "", &read) == "");
  CHECK(read.job.chunked_loss);
  REQUIRE(read_minimal_plan(path, "chunked_loss: false\n", &read) == "");
  CHECK_FALSE(read.job.chunked_loss);
  const std::string why = read_minimal_plan(path, "chunked_loss: maybe\n");
  CHECK(why.find("chunked_loss") != std::string::npos);
  CHECK(why.find("expected true or false") != std::string::npos);
  std::filesystem::remove(path);
}

TEST_CASE("pipeline_buffers: written when a stage holds receive buffers, 0 in plans from before it, in the JSON always") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("buffers.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).predicted.memory.pipeline_buffers == 0);
  CHECK(rm::plan_to_json(p)["predicted"]["memory_gib"]["pipeline_buffers"] == 0.0);
  p.predicted.memory.pipeline_buffers = 2.5 * (1 << 30);
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).predicted.memory.pipeline_buffers == doctest::Approx(2.5 * (1 << 30)));
  CHECK(rm::plan_to_json(p)["predicted"]["memory_gib"]["pipeline_buffers"] == doctest::Approx(2.5));
  std::filesystem::remove(path);
}

TEST_CASE("lockstep_wait_s: written when a jitter priced one, 0 in plans from before it, in the JSON always") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("lockstep.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::plan_to_yaml_string(p).find("lockstep_wait_s") == std::string::npos);
  CHECK(rm::read_plan_yaml(path).predicted.lockstep_wait_s == 0);
  CHECK(rm::plan_to_json(p)["predicted"]["lockstep_wait_s"] == 0.0);
  p.predicted.lockstep_wait_s = 0.75;
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).predicted.lockstep_wait_s == doctest::Approx(0.75));
  CHECK(rm::plan_to_json(p)["predicted"]["lockstep_wait_s"] == doctest::Approx(0.75));
  std::filesystem::remove(path);
}

TEST_CASE("framework: written when one is named, any in plans from before it, in the JSON always") {
  rm::Plan p = sample_plan();
  const std::string path = rm::test::temp_path("framework.yaml");
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).job.framework == rm::Framework::kAny);
  CHECK(rm::plan_to_json(p)["framework"] == "any");
  p.job.framework = rm::Framework::kMegatron;
  rm::write_plan_yaml(p, path);
  CHECK(rm::read_plan_yaml(path).job.framework == rm::Framework::kMegatron);
  CHECK(rm::plan_to_json(p)["framework"] == "megatron");
  std::filesystem::remove(path);
}
