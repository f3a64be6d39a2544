// `ringmaster validate --published [FILE] [--format table|json|csv] [--max-abs-error X]`: the
// shipped, uncalibrated predictions against the published-measurement corpus
// (planner/published_corpus.h; the shipped validation/published.yaml unless FILE is given).
//
// For people: a table of the modelled entries (entry, gpu, metric, published, predicted,
// ratio = published / predicted, error % = (published - predicted) / predicted, split: the
// published figure is the measured one of the one sign convention, and the header says
// so), the entries not modelled yet with their reasons, the defaults taken where a source
// is silent, and a summary: how many are modelled, median and worst
// |error| over all modelled entries and over the fit and heldout splits.
//
// --format json prints exactly
//   {"entries": [{"id", "published", "predicted", "unit", "error", "split", "modelled",
//                 "reason"}],
//    "median_abs_error", "max_abs_error", "heldout_median_abs_error",
//    "heldout_max_abs_error", "modelled", "not_modelled"}
// with errors as fractions (0.05 = 5 %), `unit` the entry's metric, predicted and error
// null when not modelled, reason null when modelled, the summary errors null when no entry
// (of the split) is modelled, and the counts as numbers. The median is rm::median's (the
// upper middle for an even count).
//
// Exit 0 whatever the errors are; with --max-abs-error X, exit 1 (after printing) when a
// modelled entry's |error| exceeds X, for CI. A bad corpus exits 2 naming file, entry, field.
//
// --entry ID shows one entry instead: its source, the published and predicted figures,
// what was assumed or why it is not modelled, and the plan it was priced with as `plan`
// prints one (--format json: {"id", "source", "published", "predicted", "unit", "error",
// "split", "modelled", "reason", "assumed", "plan"}, plan as plan --format json gives it,
// null when not modelled). An id not in the corpus exits 2, naming the closest ids.
#pragma once

#include <optional>
#include <string>

namespace rm::cli {

struct PublishedOptions {
  std::string file;  // empty: the shipped corpus
  std::string format = "table";
  std::optional<double> max_abs_error;
  std::string entry;  // --entry: show this one entry and its plan
};

void run_validate_published(const PublishedOptions& o);

}  // namespace rm::cli
