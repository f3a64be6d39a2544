// `ringmaster report FILE.json -o report.html`: one self-contained HTML file (no network at
// view time) with Vega-Lite charts of what `sweep`, `plan` or `validate` printed as JSON:
// throughput and MFU against GPUs per sequence length, memory per GPU broken down against
// the device's memory, exposed communication against sequence length, predicted against
// measured with the error band, and the plan table. The charting libraries (vega, vega-lite,
// vega-embed from npm, put in place by scripts/install-deps) are inlined into the file.
// Steps: read the JSON, build the specs (report_content.h), inline the libraries, write
// (temp file + rename).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/report_content.h"
#include "cli/self_launch.h"
#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"

#ifndef RM_JS_DIR
#define RM_JS_DIR "/usr/local/share/ringmaster/js"
#endif

namespace rm::cli {

namespace {

using nlohmann::json;

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

std::string render_html(const ReportContent& r, const std::string& source) {
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
    const ReportContent r = report_content(j, *in);
    write_file_atomically(*out, render_html(r, *in));
    std::fprintf(stderr, "ringmaster: wrote %s (%zu charts)\n", out->c_str(), r.charts.size());
  });
}

}  // namespace rm::cli
