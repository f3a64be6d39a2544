// Strict reading of YAML mappings for specs, plans and profiles.
//
// Every accessor names the file, the line and the dotted field in its error:
//   topologies/x.yaml:12: gpu.peak_tflops: expected a number > 0 (got -8)
// YamlMap remembers which keys were asked for; finish() then rejects every other key
// (with a did-you-mean), so a typo never silently falls back to a default.
//
// Usage: YamlMap m(load_yaml(text, source), source); read fields; m.finish().
#pragma once

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace rm {

// Parses exactly one YAML document (read it with read_input_file of planner/input_file.h).
// Throws InputError "<source>:<line>: ..." on a syntax error, an empty document, a second
// document, a key given twice in one mapping, more than kMaxYamlNodes nodes (aliases
// count each time they are used, so a few lines cannot expand into millions of nodes), or
// nesting deeper than kMaxYamlDepth (an alias inside the node it names: an endless tree).
YAML::Node load_yaml(const std::string& text, const std::string& source);
inline constexpr int kMaxYamlNodes = 1 << 20;  // a 131,072-GPU plan's order list is 131,072
inline constexpr int kMaxYamlDepth = 64;       // ringmaster's files nest 4 levels at most

// Allowed range of a number: lo and hi, each open or closed.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
  static Range positive() { return {0, true}; }
  static Range non_negative() { return {0, false}; }
  static Range fraction() { return {0, true, 1, false}; }  // (0, 1]
  static Range at_least(double v) { return {v, false}; }
  static Range between(double lo, double hi) { return {lo, false, hi, false}; }  // [lo, hi]
  static Range above_up_to(double lo, double hi) { return {lo, true, hi, false}; }  // (lo, hi]
  bool contains(double v) const;
  std::string describe() const;  // "> 0", "in (0, 1]"
};

class YamlMap {
 public:
  // `prefix` is the dotted path of this mapping ("gpu.attention"); empty at the top.
  // Throws InputError unless node is a mapping.
  YamlMap(const YAML::Node& node, std::string source, std::string prefix = "");

  bool has(const std::string& key) const;
  std::string str(const std::string& key) const;
  std::string str_or(const std::string& key, const std::string& fallback) const;
  double number(const std::string& key, Range range) const;
  double number_or(const std::string& key, double fallback, Range range) const;
  int64_t integer(const std::string& key, Range range) const;
  int64_t integer_or(const std::string& key, int64_t fallback, Range range) const;
  // A whole number in [lo, hi] as an int: the range check comes before the narrowing, so
  // 4294967298 is refused rather than read as 2.
  int count(const std::string& key, int lo, int hi) const;
  int count_or(const std::string& key, int fallback, int lo, int hi) const;
  bool boolean(const std::string& key) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::vector<int64_t> int_list(const std::string& key, Range range) const;
  YamlMap map(const std::string& key) const;
  // The raw node of a present key (marks it known).
  YAML::Node node(const std::string& key) const;

  // "<source>:<line of key or of this map>: <prefix.key>: <expected>".
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;
  // Rejects keys nobody asked for: "...: <prefix.key>: unknown key (did you mean 'x'?);
  // expected one of: a, b, c".
  void finish() const;

  const std::string& source() const { return source_; }
  // "<source>:<line>" of key (or of this map when key is absent), for messages made elsewhere.
  std::string location(const std::string& key) const;
  std::string field(const std::string& key) const;  // dotted path

 private:
  YAML::Node node_;
  std::string source_;
  std::string prefix_;
  mutable std::set<std::string> known_;
  YAML::Node required(const std::string& key) const;
  int line_of(const std::string& key) const;
};

// Renders a scalar (or the node's kind) for "(got ...)".
std::string describe_node(const YAML::Node& n);

}  // namespace rm
