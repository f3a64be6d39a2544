// How close the shipped constants come to published runs (validation/published.yaml): the
// summaries `validate --published` prints, and the track record `plan` and `sweep` print (and
// the Python module returns) for the GPU type and workload they price, so a prediction says how
// far such predictions have been off.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "planner/published_corpus.h"
#include "planner/published_prediction.h"
#include "planner/topology.h"

namespace rm {

struct PricedEntry {
  const PublishedEntry* entry;
  PublishedCheck check;
};

// Median and worst |error| of modelled entries.
struct ErrorSummary {
  int count = 0;
  double median = 0, worst = 0;
  std::string worst_id;
};

// The modelled rows' summary, of one split and one GPU type when given.
ErrorSummary summarize(const std::vector<PricedEntry>& rows, std::optional<Split> split, const std::string& gpu = "");

// The shipped corpus's entries of one GPU type and workload that measure time (not memory),
// priced now with the shipped constants.
struct TrackRecord {
  std::string gpu;          // corpus GPU type
  Workload workload = Workload::kStep;
  // Whose runs: the framework asked for where the corpus has modelled runs of it on this GPU
  // type and workload, else kAny (every framework's).
  Framework framework = Framework::kAny;
  ErrorSummary all, heldout;
  int own = 0;  // of all.count, the project's own timings (own_measurement), not published runs
};

// The track record of `gpu` for `workload` (and `framework`'s runs where there are some), or
// nullopt when the GPU is not a corpus type as shipped (corpus_gpu_type), or the corpus has
// no modelled entry of that workload on it.
std::optional<TrackRecord> track_record(const GpuSpec& gpu, Workload workload, Framework framework = Framework::kAny);

// The record of a plan's GPU (its topology as shipped), workload and framework, as `plan`
// and `sweep` print it; nullopt when the plan is priced with a calibrated profile (`calibrated`: its fit
// reports its own error).
std::optional<TrackRecord> plan_track_record(const Job& job, bool calibrated);

// A published run like a plan, priced with the shipped constants.
struct ClosestRun {
  const PublishedEntry* entry;
  double error;     // (published - predicted) / predicted, as validate --published prints it
  double distance;  // closest_runs' measure: 0 = the run's own configuration
};

// The `n` modelled runs of the corpus closest to `plan` (same workload, measuring time),
// whatever their GPU type: what the prediction is worth where the track record's GPU type
// holds nothing like the plan (a torchtitan ring of 8 on H100 80 GB: the corpus's torchtitan
// CP runs are on the 96 GB part). Distance: the log2 ratios of sequence length, ring size
// (cp) and model parameters, half those of GPU count, tp and pp, and one each for another
// framework (where both name one), GPU type, linear-layer precision (fp8 or not), mask
// (causal or not) or passes (forward alone or with the backward); closest first, file order
// on ties.
// Empty, as the track record, when the plan is priced with a calibrated profile
// (`calibrated`) or its GPU is not a corpus type as shipped (corpus_gpu_type).
std::vector<ClosestRun> closest_runs(const Plan& plan, bool calibrated, int n = 3);

// The JSON `closest_published_runs`: [{"id", "gpu", "error", "distance"}] (empty for a GPU
// no corpus type describes), or null when calibrated.
nlohmann::json closest_runs_json(const std::vector<ClosestRun>& runs, bool calibrated);

// A plan's JSON `track_record`: {"gpu", "workload", "framework", "entries",
// "median_abs_error", "max_abs_error", "worst_entry", "heldout_entries",
// "heldout_median_abs_error"}, or null.
nlohmann::json track_record_json(const std::optional<TrackRecord>& t);

// A plan's JSON gains both, `track_record` and `closest_published_runs`, as `plan --format
// json`, each row of `sweep --format json` and the Python module print them; `record`: the
// track record JSON a sweep prices once for its whole grid (one GPU type and workload).
void add_accuracy_json(nlohmann::json& plan_json, const Plan& plan, bool calibrated,
                       const std::optional<nlohmann::json>& record = std::nullopt);

}  // namespace rm
