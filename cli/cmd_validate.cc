// `ringmaster validate --profile p.yaml plan.yaml [more plans] [--iters K] [--format
// table|json|csv]`: how well the calibrated cost model predicts real runs.
//
// For each plan: predict it with the profile (the planner's cost model, CostParams from
// the plan's topology then the profile), run it with `ringmaster run --measurements`
// (a child process with its own mpirun), and compare per iteration summary
// (measurements.h): step time, compute, exposed communication (the time a rank waits:
// with pp > 1 the pipeline's bubble too, which the executor waits out in its exchanges,
// so the prediction's column adds predicted.pp_bubble_s). The measured figure is
// the median over the K timed iterations (planner/stats.h; one noisy iteration on a
// shared machine should not decide the verdict). error = (measured - predicted) / predicted,
// the one sign convention of every ringmaster error: positive when the run is slower.
//
// --format json prints exactly
//   {"plans": [{"plan": <path>, "predicted_s": ..., "measured_s": ..., "error": ...}],
//    "mean_abs_error": ..., "max_abs_error": ...}
// with errors as fractions (0.05 = 5 %).
//
// `ringmaster validate --published [FILE]` instead compares the shipped, uncalibrated
// predictions with published measurements (cli/validate_published.h).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "cli/table.h"
#include "cli/validate_published.h"
#include "executor/measurements.h"
#include "planner/cost_model.h"
#include "planner/input_error.h"
#include "planner/plan_loader.h"
#include "planner/profile.h"
#include "planner/stats.h"

namespace rm::cli {
namespace {

struct ValidateOptions {
  std::string profile;
  std::vector<std::string> plans;
  int iters = 5;
  std::string format = "table";
  std::string keep;  // folder to keep each run's measurements in
};

struct Figures {
  double step_s = 0, compute_s = 0, exposed_s = 0;
};

struct Row {
  std::string plan;
  Figures predicted, measured;
  double error() const { return (measured.step_s - predicted.step_s) / predicted.step_s; }
};

Figures predict(const std::string& plan_path, const std::string& profile_path) {
  const LoadedPlanFile l = load_plan_file(plan_path, profile_path);
  // `run` executes attention plans and whole training steps (executor/train.h, its
  // "step" records span the step), not a single layer.
  if (l.plan.job.workload == Workload::kLayer)
    fail_input(plan_path, "workload",
               "validate compares attention and step plans (got 'layer'); re-plan with "
               "--workload step or attention");
  const Prediction p = CostModel(l.model, *l.fabric, l.cost).predict(l.plan.job, l.plan.choice);
  return {p.step_time_s, p.attention_compute_s + p.linear_compute_s, p.exposed_comm_s + p.pp_bubble_s};
}

// A private scratch folder for the runs' files, removed at the end.
struct Scratch {
  std::string dir;
  Scratch() {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t ? t : "/tmp") + "/ringmaster-validate-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a folder under " + tmpl);
    dir = tmpl;
  }
  ~Scratch() {
    for (const char* f : {"/m.jsonl", "/run.log"}) std::remove((dir + f).c_str());
    rmdir(dir.c_str());
  }
};

Figures measure(const std::string& plan_path, const ValidateOptions& o, const Scratch& s, int index) {
  const std::string m = o.keep.empty() ? s.dir + "/m.jsonl"
                                       : o.keep + "/" + std::to_string(index) + ".jsonl";
  const std::string log = s.dir + "/run.log";
  const int code = run_child({"run", "--plan", plan_path, "--iters", std::to_string(o.iters),
                              "--measurements", m},
                             log);
  if (code != 0) {
    std::ifstream in(log);
    std::fprintf(stderr, "%s", std::string(std::istreambuf_iterator<char>(in), {}).c_str());
    if (code == kExitBadInput) throw InputError(plan_path + ": `ringmaster run` refused the plan (see above)");
    throw std::runtime_error(plan_path + ": `ringmaster run` failed with exit status " + std::to_string(code));
  }
  const auto rows = exec::summarize(exec::read_measurements_jsonl(m));
  if (rows.empty()) throw std::runtime_error(plan_path + ": the run wrote no measurements");
  std::vector<double> step, compute, exposed;
  for (const auto& r : rows) {
    step.push_back(r.step_s);
    compute.push_back(r.compute_s);
    exposed.push_back(r.exposed_comm_s);
  }
  return {median(step), median(compute), median(exposed)};
}

std::string ms(double s) { return fixed(s * 1e3, 2); }

void print_table(const std::vector<Row>& rows, bool csv) {
  Table t({{"plan", "", Align::kLeft},
           {"step pred", "ms", Align::kRight},
           {"step meas", "ms", Align::kRight},
           {"error", "% (meas-pred)/pred", Align::kRight},
           {"compute pred", "ms", Align::kRight},
           {"compute meas", "ms", Align::kRight},
           {"exposed pred", "ms", Align::kRight},
           {"exposed meas", "ms", Align::kRight}});
  Figures tp, tm;
  for (const Row& r : rows) {
    t.add_row({r.plan, ms(r.predicted.step_s), ms(r.measured.step_s), pct(r.error()),
               ms(r.predicted.compute_s), ms(r.measured.compute_s), ms(r.predicted.exposed_s),
               ms(r.measured.exposed_s)});
    tp.step_s += r.predicted.step_s;
    tp.compute_s += r.predicted.compute_s;
    tp.exposed_s += r.predicted.exposed_s;
    tm.step_s += r.measured.step_s;
    tm.compute_s += r.measured.compute_s;
    tm.exposed_s += r.measured.exposed_s;
  }
  t.add_row({"total", ms(tp.step_s), ms(tm.step_s), pct((tm.step_s - tp.step_s) / tp.step_s),
             ms(tp.compute_s), ms(tm.compute_s), ms(tp.exposed_s), ms(tm.exposed_s)});
  std::fputs(csv ? t.csv().c_str() : t.render().c_str(), stdout);
}

void run_validate(const ValidateOptions& o) {
  if (o.profile.empty()) fail_input(kCommandLine, "--profile", "required to validate plans (or use --published)");
  if (o.plans.empty()) fail_input(kCommandLine, "plans", "name at least one plan.yaml to validate");
  read_profile(o.profile);  // a bad profile fails before any run
  if (!o.keep.empty()) check_output_path(o.keep + "/x", "--keep-measurements");
  Scratch scratch;
  std::vector<Row> rows;
  for (size_t i = 0; i < o.plans.size(); ++i) {
    Row r;
    r.plan = o.plans[i];
    r.predicted = predict(r.plan, o.profile);
    std::fprintf(stderr, "validate: [%zu/%zu] running %s (predicted %.2f ms)\n", i + 1,
                 o.plans.size(), r.plan.c_str(), r.predicted.step_s * 1e3);
    r.measured = measure(r.plan, o, scratch, static_cast<int>(i));
    std::fprintf(stderr, "validate: [%zu/%zu] measured %.2f ms (error %+.1f %%)\n", i + 1,
                 o.plans.size(), r.measured.step_s * 1e3, r.error() * 100);
    rows.push_back(r);
  }
  double sum = 0, worst = 0;
  for (const Row& r : rows) {
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
  }
  const double mean = sum / rows.size();
  if (o.format == "json") {
    nlohmann::json plans = nlohmann::json::array();
    for (const Row& r : rows)
      plans.push_back({{"plan", r.plan},
                       {"predicted_s", r.predicted.step_s},
                       {"measured_s", r.measured.step_s},
                       {"error", r.error()}});
    nlohmann::json out = {{"plans", plans}, {"mean_abs_error", mean}, {"max_abs_error", worst}};
    std::printf("%s\n", out.dump(2).c_str());
  } else if (o.format == "csv") {
    print_table(rows, true);
  } else {
    print_table(rows, false);
    std::printf("\nstep time error over %zu plans: mean |error| %.1f %%, max |error| %.1f %%\n",
                rows.size(), mean * 100, worst * 100);
  }
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "validate", "Run plans and compare the calibrated prediction with what they measure");
  auto o = std::make_shared<ValidateOptions>();
  auto published = std::make_shared<PublishedOptions>();
  cmd->add_option("--profile", o->profile, "calibrated profile (ringmaster calibrate)");
  cmd->add_option("plans", o->plans, "plan.yaml files (ringmaster plan/tune -o)");
  auto* corpus = cmd->add_option("--published", published->file,
                                 "compare the uncalibrated predictions with published measurements "
                                 "(FILE: a corpus of your own; default the shipped validation/published.yaml)")
                     ->expected(0, 1)
                     ->excludes("--profile")
                     ->excludes("plans");
  cmd->add_option("--max-abs-error", published->max_abs_error,
                  "with --published: exit 1 when a modelled entry's |error| exceeds this fraction")
      ->check(finite_in(0, 1000))
      ->needs(corpus);
  cmd->add_option("--entry", published->entry,
                  "with --published: show this entry, what was assumed for it and the plan it was priced with")
      ->needs(corpus)
      ->excludes("--max-abs-error");
  cmd->add_option("--iters", o->iters, "timed iterations per run (the median is compared)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--format", o->format, "table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  cmd->add_option("--keep-measurements", o->keep,
                  "folder to keep each run's measurements in (<index>.jsonl), e.g. for calibrate --from");
  cmd->callback([o, published, corpus] {
    if (corpus->count() == 0) return run_validate(*o);
    published->format = o->format;
    run_validate_published(*published);
  });
}

}  // namespace rm::cli
