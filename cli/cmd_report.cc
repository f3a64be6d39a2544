// `ringmaster report FILE.json -o report.html`: one self-contained HTML file (no network at
// view time) with Vega-Lite charts of what `sweep`, `plan` or `validate` printed as JSON:
// throughput and MFU against GPUs per sequence length, memory per GPU broken down against
// the device's memory, exposed communication against sequence length, predicted against
// measured with the error band, and the plan table. The charting libraries (vega, vega-lite,
// vega-embed from npm, put in place by scripts/install-deps) are inlined into the file.
// Steps: read the JSON, build the specs, inline the libraries, write (temp file + rename).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/self_launch.h"
#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/spec_library.h"
#include "planner/units.h"

#ifndef RM_JS_DIR
#define RM_JS_DIR "/usr/local/share/ringmaster/js"
#endif

namespace rm::cli {

namespace {

using nlohmann::json;

// The band drawn around predicted = measured in the accuracy chart: the target for
// every entry (README, accuracy against published runs).
constexpr double kErrorBand = 0.15;

// A library file from the npm packages (RINGMASTER_JS_DIR overrides where they are).
std::string read_library(const std::string& relative) {
  const char* env = std::getenv("RINGMASTER_JS_DIR");
  const std::string path = std::string(env != nullptr ? env : RM_JS_DIR) + "/node_modules/" + relative;
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path + ": missing; run scripts/install-deps (it installs vega, vega-lite and "
                             "vega-embed from npm there) or set RINGMASTER_JS_DIR");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One row per plan, the fields the charts use.
json plan_rows(const json& plans, const std::string& where) {
  json rows = json::array();
  for (const json& p : plans) {
    if (!p.contains("predicted") || !p.contains("plan"))
      fail_input(where, "plans[]", "expected plan objects (ringmaster plan/sweep --format json)");
    const json& pr = p["predicted"];
    const double limit = load_topology(p["topology"].get<std::string>()).gpu.memory_bytes / kGiB;
    rows.push_back({{"gpus", p["gpus"]},
                    {"seq", format_size(p["seq_len"].get<int64_t>())},
                    {"seq_len", p["seq_len"]},
                    {"tokens_per_s", pr["tokens_per_s"]},
                    {"mfu_pct", 100 * pr["mfu"].get<double>()},
                    {"comm_pct", 100 * pr["comm_overhead"].get<double>()},
                    {"memory_gib", pr["memory_gib"]},
                    {"limit_gib", limit},
                    {"fits", pr["fits"]},
                    {"label", std::to_string(p["gpus"].get<int>()) + " GPUs, " + format_size(p["seq_len"].get<int64_t>())},
                    {"cp", p["plan"]["cp"]},
                    {"dp", p["plan"]["dp"]},
                    {"schedule", p["plan"]["schedule"]},
                    {"load_balance", p["plan"]["load_balance"]},
                    {"checkpointing", p["plan"]["checkpointing"]},
                    {"step_time_s", pr["step_time_s"]}});
  }
  return rows;
}

json line_chart(const std::string& title, const json& rows, const std::string& y, const std::string& y_title) {
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"title", title},
          {"width", 420},
          {"height", 260},
          {"data", {{"values", rows}}},
          {"mark", {{"type", "line"}, {"point", true}}},
          {"encoding",
           {{"x", {{"field", "gpus"}, {"type", "quantitative"}, {"title", "GPUs"}, {"scale", {{"type", "log"}, {"base", 2}}}}},
            {"y", {{"field", y}, {"type", "quantitative"}, {"title", y_title}}},
            {"color", {{"field", "seq"}, {"type", "nominal"}, {"title", "sequence"}, {"sort", {{"field", "seq_len"}}}}}}}};
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

json comm_chart(const json& rows) {
  return {{"$schema", "https://vega.github.io/schema/vega-lite/v5.json"},
          {"title", "Exposed communication against sequence length"},
          {"width", 420},
          {"height", 260},
          {"data", {{"values", rows}}},
          {"mark", {{"type", "line"}, {"point", true}}},
          {"encoding",
           {{"x", {{"field", "seq_len"}, {"type", "quantitative"}, {"title", "tokens per sequence"}, {"scale", {{"type", "log"}, {"base", 2}}}}},
            {"y", {{"field", "comm_pct"}, {"type", "quantitative"}, {"title", "exposed communication (% of step)"}}},
            {"color", {{"field", "gpus"}, {"type", "nominal"}, {"title", "GPUs"}}}}}};
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

std::string plan_table(const json& rows) {
  std::string t = "<table><tr><th>GPUs</th><th>seq</th><th>cp x dp</th><th>schedule</th><th>balance</th>"
                  "<th>ckpt</th><th>step (s)</th><th>tokens/s</th><th>MFU %</th><th>comm %</th><th>GiB</th><th>fits</th></tr>\n";
  char buf[512];
  for (const json& r : rows) {
    std::snprintf(buf, sizeof buf,
                  "<tr><td>%d</td><td>%s</td><td>%d x %d</td><td>%s</td><td>%s</td><td>%s</td><td>%.4g</td><td>%.0f</td>"
                  "<td>%.1f</td><td>%.1f</td><td>%.1f</td><td>%s</td></tr>\n",
                  r["gpus"].get<int>(), r["seq"].get<std::string>().c_str(), r["cp"].get<int>(), r["dp"].get<int>(),
                  r["schedule"].get<std::string>().c_str(), r["load_balance"].get<std::string>().c_str(),
                  r["checkpointing"].get<std::string>().c_str(), r["step_time_s"].get<double>(),
                  r["tokens_per_s"].get<double>(), r["mfu_pct"].get<double>(), r["comm_pct"].get<double>(),
                  r["memory_gib"]["total"].get<double>(), r["fits"].get<bool>() ? "yes" : "NO");
    t += buf;
  }
  return t + "</table>\n";
}

struct Report {
  std::string title;
  std::vector<json> charts;
  std::string table;  // HTML
};

Report build_report(const json& in, const std::string& where) {
  Report r;
  if (in.contains("entries")) {  // validate --published
    json pts = json::array();
    for (const json& e : in["entries"]) {
      if (!e["modelled"].get<bool>()) continue;
      pts.push_back({{"name", e["id"]}, {"measured", e["published"]}, {"predicted", e["predicted"]},
                     {"unit", e["unit"]}, {"error_pct", 100 * e["error"].get<double>()}});
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
    const json rows = plan_rows(json::array({in}), where);
    r.title = "ringmaster plan";
    r.charts = {memory_chart(rows)};
    r.table = plan_table(rows);
    return r;
  }
  if (!in.contains("plans") || !in["plans"].is_array() || in["plans"].empty())
    fail_input(where, "plans", "expected the JSON of ringmaster sweep, plan or validate (--format json)");
  if (in["plans"][0].contains("measured_s")) {  // validate
    json pts = json::array();
    for (const json& p : in["plans"])
      pts.push_back({{"name", p["plan"]}, {"measured", p["measured_s"]}, {"predicted", p["predicted_s"]},
                     {"unit", "s per step"}, {"error_pct", 100 * p["error"].get<double>()}});
    r.title = "ringmaster validate";
    r.charts = {accuracy_chart(pts)};
    return r;
  }
  const json rows = plan_rows(in["plans"], where);  // sweep
  r.title = "ringmaster sweep";
  r.charts = {line_chart("Throughput against GPUs", rows, "tokens_per_s", "tokens/s"),
              line_chart("MFU against GPUs", rows, "mfu_pct", "MFU (%)"), memory_chart(rows), comm_chart(rows)};
  r.table = plan_table(rows);
  return r;
}

std::string render_html(const Report& r, const std::string& source) {
  std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape_html(r.title) +
                  "</title>\n<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
                  "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}.chart{margin:16px 0}</style>\n";
  for (const char* lib : {"vega/build/vega.min.js", "vega-lite/build/vega-lite.min.js", "vega-embed/build/vega-embed.min.js"}) {
    std::string js = read_library(lib);
    // Inside <script>, "</script" would end the element early.
    for (size_t at = js.find("</script"); at != std::string::npos; at = js.find("</script", at + 2)) js.replace(at, 2, "<\\/");
    h += "<script>\n" + js + "\n</script>\n";
  }
  h += "</head><body>\n<h1>" + escape_html(r.title) + "</h1>\n<p>from " + escape_html(source) + "</p>\n";
  json specs = json::array();
  for (size_t i = 0; i < r.charts.size(); ++i) {
    h += "<div class=\"chart\" id=\"chart" + std::to_string(i) + "\"></div>\n";
    specs.push_back(r.charts[i]);
  }
  h += r.table;
  std::string spec_text = specs.dump();
  for (size_t at = spec_text.find("</"); at != std::string::npos; at = spec_text.find("</", at + 2)) spec_text.replace(at, 2, "<\\/");
  // The title says whether every chart rendered, for people and for the headless test.
  h += "<script>\nconst specs = " + spec_text +
       ";\nwindow.onerror = (m) => { document.title = 'error: ' + m; };\n"
       "Promise.all(specs.map((s, i) => vegaEmbed('#chart' + i, s, {renderer: 'svg', actions: false})))\n"
       "  .then(() => { document.title = 'rendered ' + specs.length + ' charts'; })\n"
       "  .catch((e) => { document.title = 'error: ' + e; });\n</script>\n</body></html>\n";
  return h;
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "report", "An HTML report with charts of a sweep, plan or validate JSON (self-contained, works offline)");
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  cmd->add_option("json", *in, "sweep.json, plan.json or validate.json (--format json)")->required();
  cmd->add_option("-o,--output", *out, "the HTML file to write")->required();
  cmd->callback([in, out] {
    check_output_path(*out, "--output");
    const std::string text = read_input_file(*in, InputKind::kToolOutput);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::exception& e) {
      fail_input(*in, "file", std::string("expected JSON from ringmaster --format json (") + e.what() + ")");
    }
    const Report r = build_report(j, *in);
    write_file_atomically(*out, render_html(r, *in));
    std::fprintf(stderr, "ringmaster: wrote %s (%zu charts)\n", out->c_str(), r.charts.size());
  });
}

}  // namespace rm::cli
