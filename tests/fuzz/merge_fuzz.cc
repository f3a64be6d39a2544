// libFuzzer target: the parts of a sharded sweep as `ringmaster merge` joins them
// (cli/sweep_shard.h merge_sweep_parts). The input is up to four parts, separated by lines of
// "---": parts of one sweep must agree with each other, so one input carries several. Any
// input must give the merged sweep or an rm::InputError; a crash, hang, sanitizer report or
// other exception is a bug. Text that is not JSON is refused before merge (cmd_merge.cc).
// Seeds: tests/fuzz/seeds/merge/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/sweep_shard.h"
#include "planner/input_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::pair<std::string, nlohmann::json>> parts;
  for (size_t start = 0; start <= text.size() && parts.size() < 4;) {
    size_t end = text.find("\n---\n", start);
    if (end == std::string::npos) end = text.size();
    nlohmann::json j = nlohmann::json::parse(text.substr(start, end - start), nullptr, false);
    if (j.is_discarded()) return 0;
    parts.emplace_back("part" + std::to_string(parts.size() + 1) + ".json", std::move(j));
    start = end + 5;
  }
  try {
    rm::cli::merge_sweep_parts(parts);
  } catch (const rm::InputError&) {
  }
  return 0;
}
