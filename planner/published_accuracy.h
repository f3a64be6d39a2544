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

// A plan's JSON `track_record`: {"gpu", "workload", "framework", "entries",
// "median_abs_error", "max_abs_error", "worst_entry", "heldout_entries",
// "heldout_median_abs_error"}, or null.
nlohmann::json track_record_json(const std::optional<TrackRecord>& t);

}  // namespace rm
