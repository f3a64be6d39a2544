#include "planner/published_accuracy.h"

#include <cmath>

#include "planner/spec_library.h"
#include "planner/stats.h"

namespace rm {

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
  static const PublishedCorpus corpus = load_published_corpus();
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

}  // namespace rm
