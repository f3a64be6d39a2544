// Splitting a sweep over machines (`sweep --shard K/N`, e.g. one Slurm array task each) and
// joining the parts (`ringmaster merge`). Row i of the sweep's grid (GPU counts outer, lengths
// inner, in the order given) belongs to shard (i mod N) + 1: round robin, so the costly large
// GPU counts spread over all shards. Every shard derives the same grid from the same options,
// so the parts are disjoint and together cover it.
//
// A part is the sweep's JSON plus a `shard` object:
//   {"index": K, "count": N, "rows": [grid indices of its plans], "total_rows": T,
//    "sweep": {the options that define the grid and its plans}}
// merge checks that every part comes from the same sweep, that no row is twice and none is
// missing, and writes {"plans": [...]} exactly as the unsharded sweep prints it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace rm::cli {

struct SweepShard {
  int index = 1;  // K, 1-based (Slurm: --array=1-N, SLURM_ARRAY_TASK_ID)
  int count = 1;  // N
  bool holds(size_t row) const { return static_cast<int>(row % static_cast<size_t>(count)) == index - 1; }
};

// The most shards a sweep splits into (--shard K/N takes N up to 9 digits).
inline constexpr int64_t kMaxShards = 999'999'999;

// "K/N" with 1 <= K <= N. Throws InputError naming `option` otherwise.
SweepShard parse_shard(const std::string& text, const std::string& option);

// The `shard` object of a part: `rows` are the grid indices of the part's plans, in order.
nlohmann::json shard_to_json(const SweepShard& shard, const std::vector<size_t>& rows, size_t total_rows,
                             const nlohmann::json& sweep);

// Joins parts (file name, parsed JSON) into the unsharded sweep's {"plans": [...]}. Throws
// InputError naming the file and what is wrong: not a part, parts of different sweeps or
// shard counts, a shard or row given twice, shards missing.
nlohmann::json merge_sweep_parts(const std::vector<std::pair<std::string, nlohmann::json>>& parts);

}  // namespace rm::cli
