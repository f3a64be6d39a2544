// Unit constants and the one size parser shared by the CLI and the YAML readers.
//
// Sizes ("8k", "1M", "1048576") use binary multipliers: k = K = 1024, m = M = 1024^2,
// g = G = 1024^3. The study's lengths "8K .. 1M" are powers of two (8,192 .. 1,048,576
// tokens), which is what these spellings give.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

namespace rm {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kGB = 1e9;        // decimal: link bandwidths are quoted in GB/s
inline constexpr double kTera = 1e12;     // TFLOP/s
inline constexpr double kMicro = 1e-6;    // microseconds

// A positive whole count with an optional k/K, m/M or g/G suffix (binary, see above); a
// fraction with a suffix is accepted when it gives whole tokens ("1.5M" = 1572864).
// Throws InputError "<where>: <field>: expected a positive size like 8k, 1M or 1048576
// (got '<text>')" for 0, negatives, other fractions, garbage or overflow, and "...: expected
// at most <max> (got '<text>')" above `max`.
int64_t parse_size(const std::string& text, const std::string& where, const std::string& field,
                   int64_t max = std::numeric_limits<int64_t>::max());

// "8K", "1M", "1.5M" or "3000": the short form tables use for token counts.
std::string format_size(int64_t n);

}  // namespace rm
