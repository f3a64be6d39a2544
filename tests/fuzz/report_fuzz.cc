// libFuzzer target: the JSON `ringmaster report` draws from (cli/report_content.h): what
// sweep, plan and validate (with or without --published) print with --format json. Any
// input must give the report's charts and table or an rm::InputError; a crash, hang,
// sanitizer report or other exception is a bug. Text that is not JSON is refused before
// (cmd_report.cc). Seeds: tests/fuzz/seeds/report/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/report_content.h"
#include "planner/input_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    rm::cli::report_content(j, "fuzz.json");
  } catch (const rm::InputError&) {
  }
  return 0;
}
