// load_plan_file: a plan file with its specs, fabric and costs, and the GPU-count check that
// names the plan.
#include <doctest/doctest.h>

#include <filesystem>
#include <numeric>
#include <string>

#include <unistd.h>

#include "planner/input_error.h"
#include "planner/plan_loader.h"
#include "planner/spec_library.h"
#include "tests/temp_path.h"

namespace rm {
namespace {

// A ring plan of the tiny model on cpu-local for `gpus` ranks (cp = gpus, dp = 1).
Plan cpu_plan(int gpus) {
  Plan p;
  p.job.model = "tiny";
  p.job.topology = "cpu-local";
  p.job.gpus = gpus;
  p.job.seq_len = 16 * gpus;
  p.job.batch_tokens = p.job.seq_len;
  p.job.workload = Workload::kAttention;
  p.choice.strategy = Strategy::kRing;
  p.choice.cp = gpus;
  p.choice.dp = 1;
  p.choice.order_name = "node-major";
  p.choice.order.resize(static_cast<size_t>(gpus));
  std::iota(p.choice.order.begin(), p.choice.order.end(), 0);
  p.choice.load_balance = LoadBalance::kContiguous;
  p.choice.block_q = p.choice.block_kv = 16;
  return p;
}

std::string temp_plan(const Plan& p, const std::string& name) {
  const std::string path = rm::test::temp_path(name);
  write_plan_yaml(p, path);
  return path;
}

}  // namespace

TEST_CASE("load_plan_file: the plan, its specs, the fabric for its GPUs and the topology's costs") {
  const std::string path = temp_plan(cpu_plan(2), "ok.yaml");
  const LoadedPlanFile l = load_plan_file(path);
  std::filesystem::remove(path);
  CHECK(l.plan.job.gpus == 2);
  CHECK(l.model.name == "tiny");
  CHECK(l.topology.name == "cpu-local");
  REQUIRE(l.fabric != nullptr);
  CHECK(l.fabric->gpus() == 2);
  CHECK(l.cost.peak_flops == l.topology.gpu.peak_flops);
}

TEST_CASE("load_plan_file: more GPUs than the topology has is the plan's error") {
  const int max = load_topology("cpu-local").max_gpus();
  const std::string path = temp_plan(cpu_plan(max + 1), "too-many.yaml");
  std::string message;
  try {
    load_plan_file(path);
  } catch (const InputError& e) {
    message = e.what();
  }
  std::filesystem::remove(path);
  CHECK(message == path + ": gpus: must be in [1, " + std::to_string(max) +
                       "], the GPUs of topology cpu-local (got " + std::to_string(max + 1) + ")");
}

}  // namespace rm
