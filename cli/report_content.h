// What `ringmaster report` draws from the JSON of `sweep`, `plan` or `validate` (with or
// without --published): Vega-Lite chart specs and the plan table. cmd_report.cc inlines the
// charting libraries around them and writes the file; tests/fuzz/report_fuzz.cc reads
// through here.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rm::cli {

struct ReportContent {
  std::string title;
  std::vector<nlohmann::json> charts;  // one Vega-Lite spec each
  std::string table;                   // HTML, empty for validate
};

// The report of `in`. Throws InputError naming `where` and the field when `in` is not the
// JSON of one of those commands (a field missing or of the wrong type included).
ReportContent report_content(const nlohmann::json& in, const std::string& where);

// `s` with <, > and & escaped for HTML text.
std::string escape_html(const std::string& s);

}  // namespace rm::cli
