#include "cli/report_content.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/plan_report.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/json_reader.h"
#include "planner/spec_library.h"
#include "planner/units.h"

namespace rm::cli {

using nlohmann::json;

namespace {

// The band drawn around predicted = measured in the accuracy chart: the target for
// every entry (README, accuracy against published runs).
constexpr double kErrorBand = 0.15;

// The table's choice cells, read back into the choice they came from (plan_report.h's cells,
// as sweep prints them).
PlanChoice table_choice(const JsonReader& plan, const std::string& where) {
  PlanChoice c;
  c.strategy = parse_strategy(plan.str("strategy"), where, plan.field("strategy"));
  c.cp = plan.count("cp", kMaxGpus);
  c.dp = plan.count("dp", kMaxGpus);
  c.tp = plan.count_or("tp", 1, kMaxGpus);
  c.pp = plan.count_or("pp", 1, kMaxGpus);
  c.virtual_stages = plan.count_or("virtual_stages", 1, kMaxGpus);
  if (c.strategy == Strategy::kUsp) {  // Megatron's [a2a degree, ring size]
    const char* key = "hierarchical_context_parallel_sizes";
    const std::vector<int64_t> sizes = plan.integers(key, 1, kMaxGpus);
    if (sizes.size() != 2 || sizes[0] * sizes[1] != c.cp)
      plan.fail(key, "expected [a2a degree, ring size] whose product is cp " + std::to_string(c.cp));
    c.cp_a2a = static_cast<int>(sizes[0]);
  }
  c.schedule = parse_schedule(plan.str("schedule"), where, plan.field("schedule"));
  c.load_balance = parse_load_balance(plan.str("load_balance"), where, plan.field("load_balance"));
  c.checkpointing = parse_checkpointing(plan.str("checkpointing"), where, plan.field("checkpointing"));
  return c;
}

// One row per plan, the fields the charts and the table use.
json plan_rows(const std::vector<JsonReader>& plans, const std::string& where) {
  json rows = json::array();
  std::map<std::string, double> limits;  // GiB per topology name: a sweep's rows share one
  for (const JsonReader& p : plans) {
    if (!p.has("predicted") || !p.has("plan"))
      fail_input(where, "plans[]", "expected plan objects (ringmaster plan/sweep --format json)");
    const JsonReader pr = p.object("predicted");
    const JsonReader mem = pr.object("memory_gib");
    json memory = json::object();
    for (const char* k : {"model_states", "layer_buffers", "activations", "working_set", "runtime_reserve", "total"})
      memory[k] = mem.number(k);
    // The topology names the memory line; its own refusal (not shipped, not a file) says
    // which field of which plan named it.
    const std::string topology = p.str("topology");
    auto limit = limits.find(topology);
    if (limit == limits.end()) {
      try {
        limit = limits.emplace(topology, load_topology(topology).gpu.memory_bytes / kGiB).first;
      } catch (const InputError& e) {
        p.fail("topology", e.what());
      }
    }
    const int gpus = p.count("gpus", kMaxGpus);
    const int64_t seq_len = p.integer("seq_len", 1, kMaxSeqTokens);
    const PlanChoice c = table_choice(p.object("plan"), where);
    rows.push_back({{"gpus", gpus},
                    {"seq", format_size(seq_len)},
                    {"seq_len", seq_len},
                    {"tokens_per_s", pr.number("tokens_per_s")},
                    {"mfu_pct", 100 * pr.number("mfu")},
                    {"comm_pct", 100 * pr.number("comm_overhead")},
                    {"memory_gib", memory},
                    {"limit_gib", limit->second},
                    {"fits", pr.boolean("fits")},
                    {"label", std::to_string(gpus) + " GPUs, " + format_size(seq_len)},
                    {"cp_kind", cp_kind_cell(c)},
                    {"layout", layout_cell(c)},
                    {"schedule", schedule_cell(c)},
                    {"load_balance", balance_cell(c)},
                    {"checkpointing", to_string(c.checkpointing)},
                    {"step_time_s", pr.number("step_time_s")}});
  }
  return rows;
}

// A line per `color` value over log2-scaled x: the report's throughput, MFU and exposed
// communication charts.
struct Axis {
  const char* field;
  const char* title;
};
json line_chart(const std::string& title, const json& rows, Axis x, Axis y, Axis color,
                const char* color_order = nullptr) {
  json color_enc = {{"field", color.field}, {"type", "nominal"}, {"title", color.title}};
  if (color_order) color_enc["sort"] = {{"field", color_order}};
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"title", title},
          {"width", 420},
          {"height", 260},
          {"data", {{"values", rows}}},
          {"mark", {{"type", "line"}, {"point", true}}},
          {"encoding",
           {{"x", {{"field", x.field}, {"type", "quantitative"}, {"title", x.title}, {"scale", {{"type", "log"}, {"base", 2}}}}},
            {"y", {{"field", y.field}, {"type", "quantitative"}, {"title", y.title}}},
            {"color", color_enc}}}};
}

json memory_chart(const json& rows) {
  json parts = json::array();
  for (const json& r : rows)
    for (const char* k : {"model_states", "layer_buffers", "activations", "working_set", "runtime_reserve"})
      parts.push_back({{"label", r["label"]}, {"part", k}, {"gib", r["memory_gib"][k]}, {"limit_gib", r["limit_gib"]}});
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"title", "Memory per GPU against the device's memory"},
          {"width", 420},
          {"data", {{"values", parts}}},
          {"layer",
           json::array({{{"mark", "bar"},
                         {"encoding",
                          {{"y", {{"field", "label"}, {"type", "nominal"}, {"title", nullptr}, {"sort", nullptr}}},
                           {"x", {{"field", "gib"}, {"type", "quantitative"}, {"aggregate", "sum"}, {"title", "GiB per GPU"}}},
                           {"color", {{"field", "part"}, {"type", "nominal"}, {"title", "part"}}}}}},
                        {{"mark", {{"type", "tick"}, {"color", "red"}, {"thickness", 2}}},
                         {"encoding",
                          {{"y", {{"field", "label"}, {"type", "nominal"}, {"sort", nullptr}}},
                           {"x", {{"field", "limit_gib"}, {"type", "quantitative"}, {"aggregate", "max"}}}}}}})}};
}

// Predicted against measured (validate) or published (validate --published), with y = x
// and the band of +-kErrorBand around it.
json accuracy_chart(const json& points) {
  double hi = 0;
  for (const json& p : points) hi = std::max({hi, p["measured"].get<double>(), p["predicted"].get<double>()});
  const json diag = json::array({{{"m", 0.0}, {"lo", 0.0}, {"hi", 0.0}},
                                 {{"m", hi * 1.05}, {"lo", hi * 1.05 / (1 + kErrorBand)}, {"hi", hi * 1.05 / (1 - kErrorBand)}}});
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"title", "Predicted against measured (band: measured within 15 % of predicted)"},
          {"width", 360},
          {"height", 360},
          {"layer",
           json::array({{{"data", {{"values", diag}}},
                         {"mark", {{"type", "area"}, {"opacity", 0.2}}},
                         {"encoding",
                          {{"x", {{"field", "m"}, {"type", "quantitative"}, {"title", "measured"}}},
                           {"y", {{"field", "lo"}, {"type", "quantitative"}}},
                           {"y2", {{"field", "hi"}}}}}},
                        {{"data", {{"values", diag}}},
                         {"mark", "line"},
                         {"encoding",
                          {{"x", {{"field", "m"}, {"type", "quantitative"}}}, {"y", {{"field", "m"}, {"type", "quantitative"}, {"title", "predicted"}}}}}},
                        {{"data", {{"values", points}}},
                         {"mark", {{"type", "point"}, {"filled", true}}},
                         {"encoding",
                          {{"x", {{"field", "measured"}, {"type", "quantitative"}}},
                           {"y", {{"field", "predicted"}, {"type", "quantitative"}}},
                           {"color", {{"field", "unit"}, {"type", "nominal"}}},
                           {"tooltip", json::array({{{"field", "name"}}, {{"field", "error_pct"}, {"title", "error % (meas-pred)/pred"}}})}}}}})}};
}

std::string plan_table(const json& rows) {
  std::string t = "<table><tr><th>GPUs</th><th>seq</th><th>cp kind</th><th>cp x dp</th><th>schedule</th>"
                  "<th>balance</th><th>ckpt</th><th>step (s)</th><th>tokens/s</th><th>MFU %</th><th>comm %</th>"
                  "<th>GiB</th><th>fits</th></tr>\n";
  char buf[640];
  for (const json& r : rows) {
    std::snprintf(buf, sizeof buf,
                  "<tr><td>%d</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%.4g</td>"
                  "<td>%.0f</td><td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%s</td></tr>\n",
                  r["gpus"].get<int>(), r["seq"].get<std::string>().c_str(), r["cp_kind"].get<std::string>().c_str(),
                  r["layout"].get<std::string>().c_str(), r["schedule"].get<std::string>().c_str(),
                  r["load_balance"].get<std::string>().c_str(), r["checkpointing"].get<std::string>().c_str(),
                  r["step_time_s"].get<double>(), r["tokens_per_s"].get<double>(), r["mfu_pct"].get<double>(),
                  r["comm_pct"].get<double>(), r["memory_gib"]["total"].get<double>(),
                  r["fits"].get<bool>() ? "yes" : "NO");
    t += buf;
  }
  return t + "</table>\n";
}

}  // namespace

std::string escape_html(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

ReportContent report_content(const json& in, const std::string& where) {
  ReportContent r;
  const JsonReader doc(in, where);
  if (in.contains("entries")) {  // validate --published
    json pts = json::array();
    for (const JsonReader& e : doc.objects("entries")) {
      if (!e.boolean("modelled")) continue;
      pts.push_back({{"name", e.str("id")}, {"measured", e.number("published")}, {"predicted", e.number("predicted")},
                     {"unit", e.str("unit")}, {"error_pct", 100 * e.number("error")}});
    }
    r.title = "ringmaster validate --published";
    // Units differ (tokens/s, TFLOP/s, it/s): one chart per unit keeps the axes readable.
    std::vector<std::string> units;
    for (const json& p : pts)
      if (std::find(units.begin(), units.end(), p["unit"].get<std::string>()) == units.end())
        units.push_back(p["unit"].get<std::string>());
    for (const std::string& u : units) {
      json sub = json::array();
      for (const json& p : pts)
        if (p["unit"] == u) sub.push_back(p);
      json c = accuracy_chart(sub);
      c["title"] = "Published against predicted, " + u + " (band: within 15 % of predicted)";
      r.charts.push_back(c);
    }
    return r;
  }
  if (!in.contains("plans") && in.contains("predicted")) {  // plan
    const json rows = plan_rows({doc}, where);
    r.title = "ringmaster plan";
    r.charts = {memory_chart(rows)};
    r.table = plan_table(rows);
    return r;
  }
  if (!in.contains("plans") || !in["plans"].is_array() || in["plans"].empty())
    fail_input(where, "plans", "expected the JSON of ringmaster sweep, plan or validate (--format json)");
  const std::vector<JsonReader> plans = doc.objects("plans");
  if (plans[0].has("measured_s")) {  // validate
    json pts = json::array();
    for (const JsonReader& p : plans)
      pts.push_back({{"name", p.str("plan")},
                     {"measured", p.number("measured_s")},
                     {"predicted", p.number("predicted_s")},
                     {"unit", "s per step"},
                     {"error_pct", 100 * p.number("error")}});
    r.title = "ringmaster validate";
    r.charts = {accuracy_chart(pts)};
    return r;
  }
  const json rows = plan_rows(plans, where);  // sweep
  r.title = "ringmaster sweep";
  const Axis gpus{"gpus", "GPUs"}, seq{"seq", "sequence"};
  r.charts = {line_chart("Throughput against GPUs", rows, gpus, {"tokens_per_s", "tokens/s"}, seq, "seq_len"),
              line_chart("MFU against GPUs", rows, gpus, {"mfu_pct", "MFU (%)"}, seq, "seq_len"), memory_chart(rows),
              line_chart("Exposed communication against sequence length", rows, {"seq_len", "tokens per sequence"},
                         {"comm_pct", "exposed communication (% of step)"}, gpus)};
  r.table = plan_table(rows);
  return r;
}

}  // namespace rm::cli
