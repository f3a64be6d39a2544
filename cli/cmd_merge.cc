// `ringmaster merge parts/*.json [-o FILE]`: join the parts of a sharded sweep
// (`sweep --shard K/N --format json`) into the JSON the unsharded sweep prints, byte for byte.
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/sweep_shard.h"
#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"

namespace rm::cli {

namespace {

struct MergeOptions {
  std::vector<std::string> parts;
  std::string output;  // empty = stdout
};

nlohmann::json read_part(const std::string& path) {
  const std::string text = read_input_file(path, InputKind::kToolOutput);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail_input(path, "json", std::string("not valid JSON (") + e.what() + "); a shard that did not finish?");
  }
}

void run_merge(const MergeOptions& o) {
  std::vector<std::pair<std::string, nlohmann::json>> parts;
  for (const std::string& path : o.parts) parts.emplace_back(path, read_part(path));
  const nlohmann::json merged = merge_sweep_parts(parts);
  const std::string text = merged.dump(2) + "\n";  // as `sweep --format json` prints it
  if (o.output.empty()) {
    std::fputs(text.c_str(), stdout);
  } else {
    write_file_atomically(o.output, text);
  }
  std::fprintf(stderr, "merge: %zu parts, %zu plans%s%s\n", parts.size(), merged["plans"].size(),
               o.output.empty() ? "" : " -> ", o.output.c_str());
}

}  // namespace

void add_merge_command(CLI::App& app) {
  auto opts = std::make_shared<MergeOptions>();
  auto* cmd = app.add_subcommand(
      "merge", "Join the parts of a sharded sweep (sweep --shard K/N --format json) into the JSON one sweep prints");
  cmd->add_option("parts", opts->parts, "the parts' JSON files, e.g. parts/*.json (any order)")->required();
  cmd->add_option("-o,--output", opts->output, "write the merged JSON here (temp file + rename) instead of stdout");
  cmd->callback([opts] { run_merge(*opts); });
}

}  // namespace rm::cli
