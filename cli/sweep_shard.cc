#include "cli/sweep_shard.h"

#include <map>
#include <optional>

#include "planner/input_error.h"

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
  int count = 0;
  size_t total = 0;
  std::string first_file;
  std::map<int, std::string> shard_file;           // K -> the file that held it
  std::vector<std::optional<nlohmann::json>> plans;  // by grid row
  for (const auto& [file, j] : parts) {
    if (!j.is_object() || !j.contains("plans") || !j["plans"].is_array() || !j.contains("shard") ||
        !j["shard"].is_object())
      fail_input(file, "shard", not_a_part);
    const nlohmann::json& s = j["shard"];
    for (const char* key : {"index", "count", "total_rows"})
      if (!s.contains(key) || !s[key].is_number_unsigned())
        fail_input(file, std::string("shard.") + key, "expected a non-negative integer");
    if (!s.contains("rows") || !s["rows"].is_array()) fail_input(file, "shard.rows", "expected an array of row indices");
    if (!s.contains("sweep") || !s["sweep"].is_object()) fail_input(file, "shard.sweep", "expected an object");
    if (!sweep) {
      sweep = s["sweep"];
      count = s["count"].get<int>();
      total = s["total_rows"].get<size_t>();
      first_file = file;
      if (count < 1) fail_input(file, "shard.count", "must be >= 1 (got " + std::to_string(count) + ")");
      plans.assign(total, std::nullopt);
    } else if (s["sweep"] != *sweep) {
      fail_input(file, "shard.sweep",
                 "a part of a different sweep than " + first_file + " (they differ in '" +
                     first_difference(*sweep, s["sweep"]) + "')");
    } else if (s["count"].get<int>() != count || s["total_rows"].get<size_t>() != total) {
      fail_input(file, "shard.count",
                 "split " + std::to_string(s["count"].get<int>()) + " ways over " +
                     std::to_string(s["total_rows"].get<size_t>()) + " rows, but " + first_file + " is split " +
                     std::to_string(count) + " ways over " + std::to_string(total));
    }
    const int index = s["index"].get<int>();
    if (index < 1 || index > count)
      fail_input(file, "shard.index", "must be in 1.." + std::to_string(count) + " (got " + std::to_string(index) + ")");
    if (auto it = shard_file.find(index); it != shard_file.end())
      fail_input(file, "shard.index",
                 "shard " + std::to_string(index) + "/" + std::to_string(count) + " given twice (also " + it->second + ")");
    shard_file[index] = file;
    const nlohmann::json& rows = s["rows"];
    if (rows.size() != j["plans"].size())
      fail_input(file, "shard.rows",
                 std::to_string(rows.size()) + " row indices for " + std::to_string(j["plans"].size()) + " plans");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!rows[i].is_number_unsigned() || rows[i].get<size_t>() >= total)
        fail_input(file, "shard.rows", "expected row indices below " + std::to_string(total));
      const size_t row = rows[i].get<size_t>();
      if (static_cast<int>(row % count) != index - 1)
        fail_input(file, "shard.rows",
                   "row " + std::to_string(row) + " does not belong to shard " + std::to_string(index) + "/" +
                       std::to_string(count));
      if (plans[row]) fail_input(file, "shard.rows", "row " + std::to_string(row) + " given twice");
      plans[row] = j["plans"][i];
    }
  }
  std::string missing;
  for (int k = 1; k <= count; ++k)
    if (!shard_file.count(k)) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
  if (!missing.empty())
    fail_input(kCommandLine, "parts", "shards " + missing + " of " + std::to_string(count) + " missing");
  nlohmann::json merged = nlohmann::json::array();
  for (size_t row = 0; row < total; ++row) {
    if (!plans[row]) fail_input(shard_file[static_cast<int>(row % count) + 1], "shard.rows",
                                "row " + std::to_string(row) + " missing");
    merged.push_back(std::move(*plans[row]));
  }
  return {{"plans", merged}};
}

}  // namespace rm::cli
