#include "cli/sweep_shard.h"

#include <limits>
#include <map>
#include <optional>

#include "planner/input_error.h"
#include "planner/json_reader.h"

namespace rm::cli {

SweepShard parse_shard(const std::string& text, const std::string& option) {
  const std::string expected = "expected K/N with 1 <= K <= N, e.g. 3/8 (got '" + text + "')";
  const size_t slash = text.find('/');
  auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      fail_input(kCommandLine, option, expected);
    return std::stoi(s);
  };
  if (slash == std::string::npos) fail_input(kCommandLine, option, expected);
  SweepShard s;
  s.index = number(text.substr(0, slash));
  s.count = number(text.substr(slash + 1));
  if (s.index < 1 || s.index > s.count) fail_input(kCommandLine, option, expected);
  return s;
}

nlohmann::json shard_to_json(const SweepShard& shard, const std::vector<size_t>& rows, size_t total_rows,
                             const nlohmann::json& sweep) {
  return {{"index", shard.index}, {"count", shard.count}, {"rows", rows},
          {"total_rows", total_rows}, {"sweep", sweep}};
}

namespace {

// The first top-level key whose values differ, for the message.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b) {
  for (const auto& [key, value] : a.items())
    if (!b.contains(key) || b[key] != value) return key;
  for (const auto& [key, value] : b.items())
    if (!a.contains(key)) return key;
  return "?";
}

}  // namespace

nlohmann::json merge_sweep_parts(const std::vector<std::pair<std::string, nlohmann::json>>& parts) {
  if (parts.empty()) fail_input(kCommandLine, "parts", "expected at least one part file");
  const std::string not_a_part = "not a part of a sharded sweep (expected the JSON of `ringmaster sweep --shard "
                                 "K/N --format json`, with 'plans' and 'shard')";
  std::optional<nlohmann::json> sweep;
  int64_t count = 0, total = 0;
  std::string first_file;
  std::map<int64_t, std::string> shard_file;  // K -> the file that held it
  // By grid row. A map, not a vector of total_rows: a part's count and total_rows are read
  // from the file, and rows must be present to merge, so nothing is sized by the claim.
  std::map<int64_t, nlohmann::json> plans;
  for (const auto& [file, j] : parts) {
    if (!j.is_object() || !j.contains("plans") || !j["plans"].is_array() || !j.contains("shard") ||
        !j["shard"].is_object())
      fail_input(file, "shard", not_a_part);
    const JsonReader s = JsonReader(j, file).object("shard");
    // K and N as sweep --shard takes them (at most 9 digits).
    const int64_t part_count = s.integer("count", 1, kMaxShards);
    const int64_t part_total = s.integer("total_rows", 0, std::numeric_limits<int64_t>::max());
    const int64_t index = s.integer("index", 1, kMaxShards);
    const std::vector<int64_t> rows = s.integers("rows", 0, std::numeric_limits<int64_t>::max());
    s.object("sweep");  // an object, compared whole below
    const nlohmann::json& part_sweep = j["shard"]["sweep"];
    if (!sweep) {
      sweep = part_sweep;
      count = part_count;
      total = part_total;
      first_file = file;
    } else if (part_sweep != *sweep) {
      fail_input(file, "shard.sweep",
                 "a part of a different sweep than " + first_file + " (they differ in '" +
                     first_difference(*sweep, part_sweep) + "')");
    } else if (part_count != count || part_total != total) {
      fail_input(file, "shard.count",
                 "split " + std::to_string(part_count) + " ways over " + std::to_string(part_total) + " rows, but " +
                     first_file + " is split " + std::to_string(count) + " ways over " + std::to_string(total));
    }
    if (index > count)
      fail_input(file, "shard.index", "must be in 1.." + std::to_string(count) + " (got " + std::to_string(index) + ")");
    if (auto it = shard_file.find(index); it != shard_file.end())
      fail_input(file, "shard.index",
                 "shard " + std::to_string(index) + "/" + std::to_string(count) + " given twice (also " + it->second + ")");
    shard_file[index] = file;
    if (rows.size() != j["plans"].size())
      fail_input(file, "shard.rows",
                 std::to_string(rows.size()) + " row indices for " + std::to_string(j["plans"].size()) + " plans");
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t row = rows[i];
      if (row >= total) fail_input(file, "shard.rows", "expected row indices below " + std::to_string(total));
      if (row % count != index - 1)
        fail_input(file, "shard.rows",
                   "row " + std::to_string(row) + " does not belong to shard " + std::to_string(index) + "/" +
                       std::to_string(count));
      if (plans.count(row)) fail_input(file, "shard.rows", "row " + std::to_string(row) + " given twice");
      plans[row] = j["plans"][i];
    }
  }
  if (static_cast<int64_t>(shard_file.size()) < count) {
    // The first few missing shards; walking past the ones given is bounded by the files.
    std::string missing;
    int listed = 0;
    for (int64_t k = 1; k <= count && listed < 8; ++k)
      if (!shard_file.count(k)) missing += (listed++ == 0 ? "" : ", ") + std::to_string(k);
    const int64_t more = count - static_cast<int64_t>(shard_file.size()) - listed;
    if (more > 0) missing += " and " + std::to_string(more) + " more";
    fail_input(kCommandLine, "parts", "shards " + missing + " of " + std::to_string(count) + " missing");
  }
  nlohmann::json merged = nlohmann::json::array();
  for (int64_t row = 0; row < total; ++row) {  // stops at the first missing row: at most the plans given
    auto it = plans.find(row);
    if (it == plans.end())
      fail_input(shard_file[row % count + 1], "shard.rows", "row " + std::to_string(row) + " missing");
    merged.push_back(std::move(it->second));
  }
  return {{"plans", merged}};
}

}  // namespace rm::cli
