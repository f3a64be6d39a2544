#include "planner/published_accuracy.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "planner/spec_library.h"
#include "planner/stats.h"

namespace rm {

namespace {

// The shipped corpus, read once for the track records and closest runs of every plan.
const PublishedCorpus& shipped_corpus() {
  static const PublishedCorpus corpus = load_published_corpus();
  return corpus;
}

}  // namespace

ErrorSummary summarize(const std::vector<PricedEntry>& rows, std::optional<Split> split, const std::string& gpu) {
  ErrorSummary s;
  std::vector<double> errors;
  for (const PricedEntry& r : rows) {
    if (!r.check.modelled || (split && r.entry->split != *split) || (!gpu.empty() && r.entry->gpu != gpu)) continue;
    const double e = std::abs(r.check.error);
    errors.push_back(e);
    if (e >= s.worst) s.worst = e, s.worst_id = r.entry->id;
  }
  s.count = static_cast<int>(errors.size());
  if (!errors.empty()) s.median = median(errors);
  return s;
}

std::optional<TrackRecord> track_record(const GpuSpec& gpu, Workload workload, Framework framework) {
  const std::optional<std::string> type = corpus_gpu_type(gpu);
  if (!type) return std::nullopt;
  const PublishedCorpus& corpus = shipped_corpus();
  std::vector<PricedEntry> rows, of_framework;
  for (const PublishedEntry& e : corpus.entries) {
    if (e.gpu != *type || e.workload != workload || e.metric == Metric::kGibPerGpu) continue;
    rows.push_back({&e, check_published(e)});
    if (framework != Framework::kAny && e.framework == framework) of_framework.push_back(rows.back());
  }
  const bool framework_runs = summarize(of_framework, std::nullopt).count > 0;
  const std::vector<PricedEntry>& used = framework_runs ? of_framework : rows;
  TrackRecord t{*type, workload, framework_runs ? framework : Framework::kAny, summarize(used, std::nullopt),
                summarize(used, Split::kHeldout)};
  if (t.all.count == 0) return std::nullopt;
  for (const PricedEntry& r : used) t.own += r.check.modelled && own_measurement(*r.entry);
  return t;
}

std::optional<TrackRecord> plan_track_record(const Job& job, bool calibrated) {
  if (calibrated) return std::nullopt;
  return track_record(load_topology(job.topology).gpu, job.workload, job.framework);
}

std::vector<ClosestRun> closest_runs(const Plan& plan, bool calibrated, int n) {
  if (calibrated) return {};
  const PublishedCorpus& corpus = shipped_corpus();
  const Job& job = plan.job;
  const std::optional<std::string> type = corpus_gpu_type(load_topology(job.topology).gpu);
  if (!type) return {};
  const double params = load_model(job.model).params();
  auto apart = [](double a, double b) { return std::abs(std::log2(a / b)); };
  std::map<std::string, double> params_of;  // the corpus names a few models many times
  std::vector<ClosestRun> near;
  for (const PublishedEntry& e : corpus.entries) {
    if (e.workload != job.workload || e.metric == Metric::kGibPerGpu) continue;
    auto [it, added] = params_of.try_emplace(e.model, 0.0);
    if (added) it->second = load_model(e.model).params();
    const double d = apart(e.seq_len, job.seq_len) + apart(e.cp, plan.choice.cp) + apart(it->second, params) +
                     0.5 * (apart(e.gpus, job.gpus) + apart(e.tp, plan.choice.tp) + apart(e.pp, plan.choice.pp)) +
                     (job.framework != Framework::kAny && e.framework != Framework::kAny && e.framework != job.framework) +
                     (e.gpu != *type) + ((e.precision == Precision::kFp8) != (job.fp8_recipe != Fp8Recipe::kNone)) +
                     (e.causal != job.causal) + (e.passes != job.passes);
    near.push_back({&e, 0, d});
  }
  std::stable_sort(near.begin(), near.end(), [](const ClosestRun& a, const ClosestRun& b) { return a.distance < b.distance; });
  // Priced only as picked: the whole corpus would cost a plan more than its own search.
  std::vector<ClosestRun> picked;
  for (ClosestRun& r : near) {
    if (static_cast<int>(picked.size()) == n) break;
    const PublishedCheck c = check_published(*r.entry);
    if (!c.modelled) continue;
    r.error = c.error;
    picked.push_back(r);
  }
  return picked;
}

nlohmann::json closest_runs_json(const std::vector<ClosestRun>& runs, bool calibrated) {
  if (calibrated) return nullptr;
  nlohmann::json a = nlohmann::json::array();
  for (const ClosestRun& r : runs)
    a.push_back({{"id", r.entry->id}, {"gpu", r.entry->gpu}, {"error", r.error}, {"distance", r.distance}});
  return a;
}

nlohmann::json track_record_json(const std::optional<TrackRecord>& t) {
  if (!t) return nullptr;
  const bool held = t->heldout.count > 0;
  return {{"gpu", t->gpu},
          {"workload", to_string(t->workload)},
          {"framework", to_string(t->framework)},
          {"entries", t->all.count},
          {"median_abs_error", t->all.median},
          {"max_abs_error", t->all.worst},
          {"worst_entry", t->all.worst_id},
          {"heldout_entries", t->heldout.count},
          {"heldout_median_abs_error", held ? nlohmann::json(t->heldout.median) : nlohmann::json(nullptr)},
          {"own_measurements", t->own}};
}

void add_accuracy_json(nlohmann::json& plan_json, const Plan& plan, bool calibrated,
                       const std::optional<nlohmann::json>& record) {
  plan_json["track_record"] = record ? *record : track_record_json(plan_track_record(plan.job, calibrated));
  plan_json["closest_published_runs"] = closest_runs_json(closest_runs(plan, calibrated), calibrated);
}

}  // namespace rm
