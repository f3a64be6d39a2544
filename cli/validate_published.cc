#include "cli/validate_published.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/plan_report.h"
#include "cli/table.h"
#include "planner/input_error.h"
#include "planner/published_corpus.h"
#include "planner/published_accuracy.h"
#include "planner/published_prediction.h"

namespace rm::cli {
namespace {

const char* metric_label(Metric m) {
  switch (m) {
    case Metric::kTokensPerSPerGpu: return "tok/s/GPU";
    case Metric::kIterationsPerS: return "it/s";
    case Metric::kMfu: return "MFU %";
    case Metric::kTflopsPerGpu: return "TFLOP/s/GPU";
    case Metric::kGibPerGpu: return "GiB/GPU";
  }
  return "?";
}

// At least four significant digits, the whole integer part, no trailing zeros.
std::string figure(double v) {
  const int magnitude = v > 0 ? static_cast<int>(std::floor(std::log10(v))) : 0;
  std::string s = fixed(v, std::max(0, 3 - magnitude));
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

// The source's short name for the table: its repository's name ("mosaicml/llm-foundry
// scripts/..." -> "llm-foundry") or its paper ("arXiv:2407.21783, Section ..." ->
// "arXiv:2407.21783"). --format json carries the whole source text.
std::string source_label(const std::string& source) {
  std::string s = source.substr(0, source.find_first_of(" \t"));
  while (!s.empty() && (s.back() == ',' || s.back() == ':' || s.back() == ';')) s.pop_back();
  if (s.rfind("arXiv:", 0) != 0 && s.find('/') != std::string::npos) s = s.substr(s.rfind('/') + 1);
  return s;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : "; ") + i;
  return s;
}


// One GPU type's summaries: all its modelled entries, and its held-out ones.
struct GpuSummary {
  std::string gpu;
  ErrorSummary all, heldout;
};

// Each GPU type of the modelled entries, in first-seen order (one set of constants per type).
std::vector<GpuSummary> by_gpu_type(const std::vector<PricedEntry>& rows) {
  std::vector<GpuSummary> out;
  for (const PricedEntry& r : rows) {
    const std::string& gpu = r.entry->gpu;
    if (!r.check.modelled ||
        std::any_of(out.begin(), out.end(), [&](const GpuSummary& g) { return g.gpu == gpu; }))
      continue;
    out.push_back({gpu, summarize(rows, std::nullopt, gpu), summarize(rows, Split::kHeldout, gpu)});
  }
  return out;
}

void print_summary_line(const char* what, const ErrorSummary& s) {
  if (s.count == 0) {
    std::printf("  %-8s no entry modelled\n", what);
    return;
  }
  std::printf("  %-8s %2d entries: median |error| %5.1f %%, worst %5.1f %% (%s)\n", what, s.count,
              s.median * 100, s.worst * 100, s.worst_id.c_str());
}

void print_table(const std::vector<PricedEntry>& rows, bool csv) {
  Table t({{"entry", "", Align::kLeft},
           {"source", "", Align::kLeft},
           {"gpu", "", Align::kLeft},
           {"metric", "", Align::kLeft},
           {"published", "", Align::kRight},
           {"predicted", "", Align::kRight},
           {"ratio", "pub/pred", Align::kRight},
           {"error %", "(pub-pred)/pred", Align::kRight},
           {"split", "", Align::kLeft}});
  for (const PricedEntry& r : rows) {
    if (!r.check.modelled) continue;
    const PublishedEntry& e = *r.entry;
    std::string err = pct(r.check.error);
    if (r.check.error >= 0) err = "+" + err;
    t.add_row({e.id, source_label(e.source), e.gpu, metric_label(e.metric), figure(e.published), figure(r.check.predicted),
               fixed(e.published / r.check.predicted, 2), err, to_string(e.split)});
  }
  if (csv) {
    std::fputs(t.csv().c_str(), stdout);
    return;
  }
  std::fputs(t.render().c_str(), stdout);

  auto section = [&rows](const char* title, auto lines_of) {
    std::vector<std::pair<std::string, std::string>> lines;
    for (const PricedEntry& r : rows) {
      const std::string text = lines_of(r);
      if (!text.empty()) lines.emplace_back(r.entry->id, text);
    }
    if (lines.empty()) return;
    std::printf("\n%s (%zu):\n", title, lines.size());
    for (const auto& [id, text] : lines) std::printf("  %s: %s\n", id.c_str(), text.c_str());
  };
  section("not modelled yet", [](const PricedEntry& r) { return r.check.modelled ? "" : joined(r.check.not_modelled); });
  section("assumed where the source is silent", [](const PricedEntry& r) { return joined(r.check.assumed); });
  section("predicted not to fit in GPU memory (priced anyway)", [](const PricedEntry& r) {
    const Prediction& p = r.check.plan.predicted;
    const bool step = r.entry->workload == Workload::kStep;  // a kernel benchmark holds no model
    return r.check.modelled && step && !p.fits ? p.why_not : std::string();
  });

  const ErrorSummary all = summarize(rows, std::nullopt);
  std::printf("\n%d of %zu entries modelled\n", all.count, rows.size());
  print_summary_line("all", all);
  print_summary_line("fit", summarize(rows, Split::kFit));
  print_summary_line("heldout", summarize(rows, Split::kHeldout));
  // One set of constants per GPU type: how each type fares, its held-out entries apart.
  std::printf("\nby GPU type:\n");
  for (const GpuSummary& t : by_gpu_type(rows)) {
    const ErrorSummary& h = t.heldout;
    const std::string held = h.count == 0 ? "no held-out entry"
                                          : "held out " + std::to_string(h.count) + ": median " + fixed(h.median * 100, 1) + " %";
    std::printf("  %-10s %2d entries: median |error| %5.1f %%, worst %5.1f %%; %s\n", t.gpu.c_str(), t.all.count,
                t.all.median * 100, t.all.worst * 100, held.c_str());
  }
}

nlohmann::json or_null(bool have, double v) { return have ? nlohmann::json(v) : nlohmann::json(nullptr); }

// One entry as the JSON's "entries" list holds it.
nlohmann::json entry_json(const PricedEntry& r) {
  const bool m = r.check.modelled;
  return {{"id", r.entry->id},
          {"source", r.entry->source},
          {"published", r.entry->published},
          {"predicted", or_null(m, r.check.predicted)},
          {"unit", to_string(r.entry->metric)},
          {"error", or_null(m, r.check.error)},
          {"split", to_string(r.entry->split)},
          {"modelled", m},
          {"reason", m ? nlohmann::json(nullptr) : nlohmann::json(joined(r.check.not_modelled))}};
}

void print_json(const std::vector<PricedEntry>& rows) {
  nlohmann::json entries = nlohmann::json::array();
  for (const PricedEntry& r : rows) entries.push_back(entry_json(r));
  const ErrorSummary all = summarize(rows, std::nullopt);
  const ErrorSummary heldout = summarize(rows, Split::kHeldout);
  nlohmann::json by_gpu = nlohmann::json::object();
  for (const GpuSummary& t : by_gpu_type(rows)) {
    const ErrorSummary& h = t.heldout;
    by_gpu[t.gpu] = {{"modelled", t.all.count},
                     {"median_abs_error", t.all.median},
                     {"max_abs_error", t.all.worst},
                     {"heldout_modelled", h.count},
                     {"heldout_median_abs_error", or_null(h.count > 0, h.median)},
                     {"heldout_max_abs_error", or_null(h.count > 0, h.worst)}};
  }
  const nlohmann::json out = {{"entries", entries},
                              {"median_abs_error", or_null(all.count > 0, all.median)},
                              {"max_abs_error", or_null(all.count > 0, all.worst)},
                              {"heldout_median_abs_error", or_null(heldout.count > 0, heldout.median)},
                              {"heldout_max_abs_error", or_null(heldout.count > 0, heldout.worst)},
                              {"modelled", all.count},
                              {"not_modelled", static_cast<int>(rows.size()) - all.count},
                              {"by_gpu", by_gpu}};
  std::printf("%s\n", out.dump(2).c_str());
}

// --entry: the entry, what was assumed for it (or why it is not modelled), and the plan it
// was priced with, as `plan` shows one.
void print_entry(const PricedEntry& r, const std::string& format) {
  const PublishedEntry& e = *r.entry;
  const PublishedCheck& c = r.check;
  if (format == "json") {
    nlohmann::json j = entry_json(r);
    j["assumed"] = c.assumed;
    j["plan"] = c.modelled ? plan_to_json(c.plan) : nlohmann::json(nullptr);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("entry %s (%s split)\n  source: %s\n", e.id.c_str(), to_string(e.split), e.source.c_str());
  if (!c.modelled) {
    std::printf("  published %s %s; not modelled: %s\n", figure(e.published).c_str(), metric_label(e.metric),
                joined(c.not_modelled).c_str());
    return;
  }
  std::printf("  published %s %s, predicted %s: error %+.1f %% ((published - predicted) / predicted)\n",
              figure(e.published).c_str(), metric_label(e.metric), figure(c.predicted).c_str(), 100 * c.error);
  for (const std::string& a : c.assumed) std::printf("  assumed: %s\n", a.c_str());
  if (!e.note.empty()) std::printf("  note: %s\n", e.note.c_str());
  std::printf("\n%s", plan_report(c.plan, c.priced_topology, c.cost, c.model, false).c_str());
}

// The corpus entry named `id`, or an InputError naming the ids that share the most of it.
const PublishedEntry& find_entry(const PublishedCorpus& corpus, const std::string& id, const std::string& file) {
  std::vector<std::pair<size_t, std::string>> near;
  for (const PublishedEntry& e : corpus.entries) {
    if (e.id == id) return e;
    size_t k = 0;
    while (k < id.size() && k < e.id.size() && id[k] == e.id[k]) ++k;
    near.emplace_back(k, e.id);
  }
  std::stable_sort(near.begin(), near.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string ids;
  for (size_t i = 0; i < near.size() && i < 3; ++i) {
    if (i > 0) ids += ", ";
    ids += near[i].second;
  }
  fail_input(kCommandLine, "--entry",
             "no entry '" + id + "' in " + (file.empty() ? std::string("the shipped corpus") : file) +
                 (ids.empty() ? std::string() : " (closest: " + ids + ")"));
}

}  // namespace

void run_validate_published(const PublishedOptions& o) {
  const PublishedCorpus corpus = load_published_corpus(o.file);
  if (!o.entry.empty()) {
    if (o.format == "csv") fail_input(kCommandLine, "--entry", "shows one entry as a table or json (got --format csv)");
    const PublishedEntry& e = find_entry(corpus, o.entry, o.file);
    print_entry({&e, check_published(e)}, o.format);
    return;
  }
  std::vector<PricedEntry> rows;
  for (const PublishedEntry& e : corpus.entries) rows.push_back({&e, check_published(e)});
  if (o.format == "json") print_json(rows);
  else print_table(rows, o.format == "csv");

  if (!o.max_abs_error) return;
  std::vector<std::string> outside;
  for (const PricedEntry& r : rows)
    if (r.check.modelled && std::abs(r.check.error) > *o.max_abs_error) outside.push_back(r.entry->id);
  if (outside.empty()) return;
  std::string ids;
  for (const auto& id : outside) ids += (ids.empty() ? "" : ", ") + id;
  throw std::runtime_error(std::to_string(outside.size()) + " modelled entries have |error| above " +
                           sig(*o.max_abs_error) + " (--max-abs-error): " + ids);
}

}  // namespace rm::cli
