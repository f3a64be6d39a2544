#include "planner/yaml_reader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "planner/input_error.h"

namespace rm {

namespace {

std::string fmt_number(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Edit distance, for did-you-mean on unknown keys.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// A scalar converted to T; false for lists, mappings, null and text that is not a T.
template <typename T>
bool scalar_as(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return false;
  try {
    out = n.as<T>();
  } catch (const YAML::BadConversion&) {
    return false;
  }
  return true;
}

std::string with_line(const std::string& source, int line0) {
  return line0 >= 0 ? source + ":" + std::to_string(line0 + 1) : source;
}

}  // namespace

namespace {

// Refuses duplicate keys below `n`, counts nodes (an alias counts each time it is used) and
// bounds the nesting: an alias inside the node its anchor names makes the tree endless, and
// a chain of anchors each holding the last one's alias nests as deep as the file is long,
// either of which would overflow the stack of this walk and of every reader after it.
void check_tree(const YAML::Node& n, const std::string& source, const std::string& path, int& nodes, int depth = 0) {
  if (++nodes > kMaxYamlNodes) {
    throw InputError(source + ": more than " + std::to_string(kMaxYamlNodes) +
                     " YAML nodes (aliases included); expected a ringmaster input file");
  }
  if (depth > kMaxYamlDepth) {
    throw InputError(with_line(source, n.Mark().line) + ": " + path + ": nested more than " +
                     std::to_string(kMaxYamlDepth) +
                     " levels deep (an alias inside the node its anchor names repeats forever); expected a ringmaster "
                     "input file");
  }
  if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_tree(n[i], source, path + "[" + std::to_string(i) + "]", nodes, depth + 1);
  } else if (n.IsMap()) {
    std::map<std::string, int> first_line;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
      const std::string field = path.empty() ? key : path + "." + key;
      const int line = it->first.Mark().line;
      const auto [seen, fresh] = first_line.emplace(key, line);
      if (!fresh) {
        throw InputError(with_line(source, line) + ": " + field + ": key given twice (first at line " +
                         std::to_string(seen->second + 1) + ")");
      }
      check_tree(it->second, source, field, nodes, depth + 1);
    }
  }
}

// Counts the documents the parser meets; remembers where the second one starts.
struct DocumentStarts : YAML::EventHandler {
  int count = 0;
  int second_line = -1;
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++count == 2) second_line = mark.line;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

}  // namespace

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
    // A second document would be ignored by Load: look for one. (Not YAML::LoadAll: on some
    // malformed text, such as ", 1", yaml-cpp 0.7's LoadAll loops forever.)
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    if (parser.HandleNextDocument(starts) && parser.HandleNextDocument(starts) && starts.count > 1) {
      throw InputError(with_line(source, starts.second_line) +
                       ": a second YAML document (after '---'); expected one document");
    }
  } catch (const YAML::ParserException& e) {
    throw InputError(with_line(source, e.mark.line) + ": YAML syntax: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) throw InputError(source + ": file is empty (expected a mapping)");
  int nodes = 0;
  check_tree(root, source, "", nodes);
  return root;
}

bool Range::contains(double v) const {
  if (std::isnan(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string Range::describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  if (has_lo && has_hi) {
    return std::string("in ") + (lo_open ? "(" : "[") + fmt_number(lo) + ", " + fmt_number(hi) +
           (hi_open ? ")" : "]");
  }
  if (has_lo) return std::string(lo_open ? "> " : ">= ") + fmt_number(lo);
  if (has_hi) return std::string(hi_open ? "< " : "<= ") + fmt_number(hi);
  return "finite";
}

std::string describe_node(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "nothing";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "'" + n.Scalar() + "'";
}

YamlMap::YamlMap(const YAML::Node& node, std::string source, std::string prefix)
    : node_(node), source_(std::move(source)), prefix_(std::move(prefix)) {
  if (!node_.IsMap()) {
    const std::string what = prefix_.empty() ? "document" : prefix_;
    throw InputError(with_line(source_, node_.Mark().line) + ": " + what +
                     ": expected a mapping of keys to values (got " + describe_node(node_) + ")");
  }
}

std::string YamlMap::field(const std::string& key) const {
  return prefix_.empty() ? key : prefix_ + "." + key;
}

int YamlMap::line_of(const std::string& key) const {
  const YAML::Node& self = node_;
  const YAML::Node v = self[key];
  if (v.IsDefined() && v.Mark().line >= 0) return v.Mark().line;
  return node_.Mark().line;
}

std::string YamlMap::location(const std::string& key) const {
  return with_line(source_, line_of(key));
}

void YamlMap::fail(const std::string& key, const std::string& expected) const {
  throw InputError(with_line(source_, line_of(key)) + ": " + field(key) + ": " + expected);
}

bool YamlMap::has(const std::string& key) const {
  known_.insert(key);
  const YAML::Node& self = node_;
  const YAML::Node v = self[key];
  return v.IsDefined() && !v.IsNull();
}

YAML::Node YamlMap::required(const std::string& key) const {
  if (!has(key)) {
    // A near-miss spelling present in the map is the likely cause: say so.
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string other = it->first.IsScalar() ? it->first.Scalar() : "";
      if (!other.empty() && other != key && edit_distance(other, key) <= 2) {
        fail(key, "missing (required); found '" + other + "' (a misspelling?)");
      }
    }
    fail(key, "missing (required)");
  }
  const YAML::Node& self = node_;
  return self[key];
}

YAML::Node YamlMap::node(const std::string& key) const { return required(key); }

std::string YamlMap::str(const std::string& key) const {
  const YAML::Node v = required(key);
  if (!v.IsScalar()) fail(key, "expected text (got " + describe_node(v) + ")");
  return v.Scalar();
}

std::string YamlMap::str_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? str(key) : fallback;
}

double YamlMap::number(const std::string& key, Range range) const {
  const YAML::Node v = required(key);
  double x = 0;
  const bool ok = scalar_as(v, x);
  if (!ok || !std::isfinite(x)) fail(key, "expected a number " + range.describe() + " (got " + describe_node(v) + ")");
  if (!range.contains(x)) fail(key, "expected a number " + range.describe() + " (got " + v.Scalar() + ")");
  return x;
}

double YamlMap::number_or(const std::string& key, double fallback, Range range) const {
  return has(key) ? number(key, range) : fallback;
}

int64_t YamlMap::integer(const std::string& key, Range range) const {
  const YAML::Node v = required(key);
  long long x = 0;
  if (!scalar_as(v, x)) fail(key, "expected a whole number " + range.describe() + " (got " + describe_node(v) + ")");
  if (!range.contains(static_cast<double>(x))) {
    fail(key, "expected a whole number " + range.describe() + " (got " + v.Scalar() + ")");
  }
  return x;
}

int64_t YamlMap::integer_or(const std::string& key, int64_t fallback, Range range) const {
  return has(key) ? integer(key, range) : fallback;
}

int YamlMap::count(const std::string& key, int lo, int hi) const {
  return static_cast<int>(integer(key, Range::between(lo, hi)));
}

int YamlMap::count_or(const std::string& key, int fallback, int lo, int hi) const {
  return has(key) ? count(key, lo, hi) : fallback;
}

bool YamlMap::boolean(const std::string& key) const {
  const YAML::Node v = required(key);
  bool x = false;
  if (!scalar_as(v, x)) fail(key, "expected true or false (got " + describe_node(v) + ")");
  return x;
}

bool YamlMap::boolean_or(const std::string& key, bool fallback) const {
  return has(key) ? boolean(key) : fallback;
}

std::vector<int64_t> YamlMap::int_list(const std::string& key, Range range) const {
  const YAML::Node v = required(key);
  if (!v.IsSequence()) fail(key, "expected a list of whole numbers (got " + describe_node(v) + ")");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const YAML::Node e = v[i];
    long long x = 0;
    if (!scalar_as(e, x) || !range.contains(static_cast<double>(x))) {
      fail(key, "expected a list of whole numbers " + range.describe() + " (item " +
                    std::to_string(i) + " is " + describe_node(e) + ")");
    }
    out.push_back(x);
  }
  return out;
}

YamlMap YamlMap::map(const std::string& key) const {
  const YAML::Node v = required(key);
  if (!v.IsMap()) fail(key, "expected a mapping of keys to values (got " + describe_node(v) + ")");
  return YamlMap(v, source_, field(key));
}

void YamlMap::finish() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "?";
    if (known_.count(key)) continue;
    std::string best;
    size_t best_d = 3;  // suggest only close spellings
    for (const auto& k : known_) {
      const size_t d = edit_distance(key, k);
      if (d < best_d) best_d = d, best = k;
    }
    std::string list;
    for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
    const int line = it->first.Mark().line;
    throw InputError(with_line(source_, line) + ": " + field(key) + ": unknown key" +
                     (best.empty() ? "" : " (did you mean '" + best + "'?)") +
                     "; expected one of: " + list);
  }
}

}  // namespace rm
