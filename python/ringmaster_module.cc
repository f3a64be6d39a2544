// The Python module `ringmaster`: plan, sweep, simulate and export from the C++ library the
// CLI is built on, returning what `--format json` prints (docs/plan_format.md) as dicts.
//
//   import ringmaster
//   p = ringmaster.plan(model="llama2-7b", topology="dgx-a100-ib", gpus=16, seq="1M", output="plan.yaml")
//   ringmaster.export(plan="plan.yaml", to="torchtitan")      # the TOML text
//
// Bad input raises ringmaster.InputError (a ValueError) with the CLI's message; sizes are
// given as the CLI takes them ("1M", 1048576).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "cli/job_options.h"
#include "planner/export_megatron.h"
#include "planner/export_slurm.h"
#include "planner/export_target.h"
#include "planner/export_torchtitan.h"
#include "planner/input_error.h"
#include "planner/plan_loader.h"
#include "planner/published_accuracy.h"
#include "planner/search.h"
#include "simulator/simulate.h"

namespace py = pybind11;

namespace {

constexpr const char* kWhere = "ringmaster.plan";

// The JSON contract as Python objects (the same text json.loads would read from the CLI).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// A size as the CLI takes it: "1M", "128000" or an int.
std::string size_text(const py::object& v) {
  if (py::isinstance<py::int_>(v)) return std::to_string(v.cast<long long>());
  return v.cast<std::string>();
}

// Adam's states as the CLI's --main-params-dtype, --store-param-remainders, --exp-avg-dtype,
// --exp-avg-sq-dtype take them ("" = fp32).
struct OptimizerArgs {
  std::string main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype;
  bool store_param_remainders = false;
};

rm::cli::JobOptions job_options(const std::string& model, const std::string& topology, const py::object& seq,
                                const py::object& batch_tokens, const std::string& workload,
                                const std::string& profile, const std::string& fp8, const OptimizerArgs& opt) {
  rm::cli::JobOptions o;
  o.model = model;
  o.topology = topology;
  o.seq = size_text(seq);
  if (!batch_tokens.is_none()) o.batch_tokens = size_text(batch_tokens);
  o.workload = workload;
  o.profile = profile;
  o.fp8 = fp8;
  o.main_params_dtype = opt.main_params_dtype;
  o.store_param_remainders = opt.store_param_remainders;
  o.exp_avg_dtype = opt.exp_avg_dtype;
  o.exp_avg_sq_dtype = opt.exp_avg_sq_dtype;
  return o;
}

rm::Plan plan_one(const rm::cli::JobOptions& o, int gpus, const std::string& target) {
  rm::cli::ResolvedJob r = rm::cli::resolve_job(o, gpus);
  rm::Planner planner(r.model, *r.fabric, r.cost);
  if (target.empty()) return planner.plan(r.job, r.pins);
  return rm::cli::plan_job_for_target(planner, r, o, r.job, target, kWhere);
}

py::object plan(const std::string& model, const std::string& topology, int gpus, const py::object& seq,
                const py::object& batch_tokens, const std::string& workload, const std::string& target,
                const std::string& profile, const std::string& output, const std::string& fp8,
                const std::string& main_params_dtype, bool store_param_remainders, const std::string& exp_avg_dtype,
                const std::string& exp_avg_sq_dtype) {
  const OptimizerArgs opt{main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype, store_param_remainders};
  const rm::Plan p =
      plan_one(job_options(model, topology, seq, batch_tokens, workload, profile, fp8, opt), gpus, target);
  if (!output.empty()) rm::write_plan_yaml(p, output);
  nlohmann::json j = rm::plan_to_json(p);
  rm::add_accuracy_json(j, p, !profile.empty());
  return to_python(j);
}

py::object sweep(const std::string& model, const std::string& topology, const std::vector<int>& gpus,
                 const std::vector<py::object>& seqs, const py::object& batch_tokens, const std::string& workload,
                 const std::string& profile, const std::string& fp8, const std::string& main_params_dtype,
                 bool store_param_remainders, const std::string& exp_avg_dtype, const std::string& exp_avg_sq_dtype) {
  const OptimizerArgs opt{main_params_dtype, exp_avg_dtype, exp_avg_sq_dtype, store_param_remainders};
  nlohmann::json plans = nlohmann::json::array();
  nlohmann::json record;  // one GPU type and workload for the whole grid, as `ringmaster sweep`
  for (int g : gpus)
    for (const py::object& n : seqs) {
      const rm::Plan p = plan_one(job_options(model, topology, n, batch_tokens, workload, profile, fp8, opt), g, "");
      if (plans.empty()) record = rm::track_record_json(rm::plan_track_record(p.job, !profile.empty()));
      plans.push_back(rm::plan_to_json(p));
      rm::add_accuracy_json(plans.back(), p, !profile.empty(), record);
    }
  return to_python(nlohmann::json{{"plans", plans}});
}

py::object simulate(const std::string& plan_path, int layers, const std::string& profile) {
  const rm::LoadedPlanFile lp = rm::load_plan_file(plan_path, profile);
  rm::sim::SimulateOptions so;
  so.max_layers = layers;
  const rm::sim::Simulation s = rm::sim::simulate_plan(lp.plan, lp.model, *lp.fabric, lp.cost, so, plan_path);
  nlohmann::json j = rm::plan_to_json(lp.plan);
  j["simulated"] = rm::sim::simulation_to_json(s, true);
  return to_python(j);
}

std::string export_plan(const std::string& plan_path, const std::string& to) {
  const rm::ExportTarget target = rm::parse_export_target(to, "ringmaster.export", "to");
  const rm::LoadedPlanFile lp = rm::load_plan_file(plan_path);
  const int gpn = lp.topology.gpus_per_node;
  if (target == rm::ExportTarget::kSlurm) {  // the `ringmaster run` script (the CLI's --launch run)
    rm::SlurmLaunch launch;
    launch.backend = lp.topology.intra.kind == rm::IntraKind::kSharedMemory ? "cpu" : "cuda";
    const std::string why = rm::run_refusal(lp.plan, lp.model, lp.topology, launch.backend);
    if (!why.empty()) throw rm::InputError(plan_path + ": " + why);
    return rm::slurm_export(lp.plan, lp.topology, plan_path, launch);
  }
  const std::string why = rm::export_refusal(lp.plan, lp.model, gpn, target);
  if (!why.empty()) throw rm::InputError(plan_path + ": " + why);
  return target == rm::ExportTarget::kMegatron ? rm::megatron_export(lp.plan, lp.model, gpn, plan_path)
                                               : rm::torchtitan_export(lp.plan, lp.model, gpn, plan_path);
}

}  // namespace

PYBIND11_MODULE(ringmaster, m) {
  m.doc() = "ringmaster: plan, simulate and export ring-attention plans for long-context training";
  py::register_exception<rm::InputError>(m, "InputError", PyExc_ValueError);
  using namespace pybind11::literals;
  m.def("plan", &plan, "The fastest plan (the dict `ringmaster plan --format json` prints); output= writes plan.yaml",
        "model"_a = "", "topology"_a = "", "gpus"_a, "seq"_a, "batch_tokens"_a = py::none(), "workload"_a = "step",
        "target"_a = "", "profile"_a = "", "output"_a = "", "fp8"_a = "", "main_params_dtype"_a = "",
        "store_param_remainders"_a = false, "exp_avg_dtype"_a = "", "exp_avg_sq_dtype"_a = "");
  m.def("sweep", &sweep, "Plans for every GPU count x sequence length: {'plans': [...]}", "model"_a = "",
        "topology"_a = "", "gpus"_a, "seqs"_a, "batch_tokens"_a = py::none(), "workload"_a = "step", "profile"_a = "",
        "fp8"_a = "", "main_params_dtype"_a = "", "store_param_remainders"_a = false, "exp_avg_dtype"_a = "",
        "exp_avg_sq_dtype"_a = "");
  m.def("simulate", &simulate, "Replay a plan file on SimGrid: the plan dict with 'simulated'", "plan"_a,
        "layers"_a = 16, "profile"_a = "");
  m.def("export", &export_plan, "A plan file as megatron arguments, a torchtitan TOML or a Slurm script (text)",
        "plan"_a, "to"_a);
}
