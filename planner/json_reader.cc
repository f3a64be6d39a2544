#include "planner/json_reader.h"

#include <cmath>
#include <sstream>
#include <utility>

#include "planner/input_error.h"

namespace rm {

using nlohmann::json;

JsonReader::JsonReader(const json& j, std::string source, std::string path)
    : j_(j), source_(std::move(source)), path_(std::move(path)) {
  if (!j_.is_object()) fail_input(source_, path_.empty() ? "file" : path_, "expected a JSON object (got " + j_.dump() + ")");
}

void JsonReader::fail(const std::string& key, const std::string& expected) const {
  fail_input(source_, field(key), expected);
}

bool JsonReader::has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

const json& JsonReader::at(const char* key) const {
  if (!has(key)) fail(key, "missing (required)");
  return j_.at(key);
}

int64_t JsonReader::whole(const json& v, int64_t lo, int64_t hi, const std::string& name) const {
  // An unsigned value above INT64_MAX is out of range, not a negative number.
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                               : v.is_number_integer() && v.get<int64_t>() <= hi;
  if (!in_range || v.get<int64_t>() < lo) {
    fail_input(source_, name, "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                  "] (got " + v.dump() + ")");
  }
  return v.get<int64_t>();
}

int64_t JsonReader::integer(const char* key, int64_t lo, int64_t hi) const { return whole(at(key), lo, hi, field(key)); }

uint64_t JsonReader::unsigned64(const char* key) const {
  const json& v = at(key);
  // nlohmann reads every non-negative whole number as unsigned.
  if (!v.is_number_unsigned()) fail(key, "expected a whole number in [0, 2^64) (got " + v.dump() + ")");
  return v.get<uint64_t>();
}

std::vector<int64_t> JsonReader::integers(const char* key, int64_t lo, int64_t hi) const {
  const json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array of whole numbers (got " + v.dump() + ")");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(whole(v[i], lo, hi, field(key) + "[" + std::to_string(i) + "]"));
  return out;
}

int JsonReader::count(const char* key, int hi) const { return static_cast<int>(integer(key, 1, hi)); }

int JsonReader::count_or(const char* key, int fallback, int hi) const {
  return has(key) ? count(key, hi) : fallback;
}

int64_t JsonReader::integer_or(const char* key, int64_t fallback, int64_t hi) const {
  return has(key) ? integer(key, 1, hi) : fallback;
}

double JsonReader::number(const char* key) const {
  const json& v = at(key);
  if (!v.is_number() || !std::isfinite(v.get<double>())) fail(key, "expected a number (got " + v.dump() + ")");
  return v.get<double>();
}

double JsonReader::number(const char* key, double lo, double hi) const {
  const json& v = at(key);
  const double x = v.is_number() ? v.get<double>() : std::nan("");
  if (!(x >= lo && x <= hi)) {
    std::ostringstream expected;
    expected << "expected a number in [" << lo << ", " << hi << "] (got " << v.dump() << ")";
    fail(key, expected.str());
  }
  return x;
}

bool JsonReader::boolean(const char* key) const {
  const json& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false (got " + v.dump() + ")");
  return v.get<bool>();
}

bool JsonReader::boolean_or(const char* key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

std::string JsonReader::str(const char* key) const {
  const json& v = at(key);
  if (!v.is_string()) fail(key, "expected a string (got " + v.dump() + ")");
  return v.get<std::string>();
}

JsonReader JsonReader::object(const char* key) const {
  const json& v = at(key);
  if (!v.is_object()) fail(key, "expected an object (got " + v.dump() + ")");
  return JsonReader(v, source_, field(key));
}

std::vector<JsonReader> JsonReader::objects(const char* key) const {
  const json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array (got " + v.dump() + ")");
  std::vector<JsonReader> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string item = field(key) + "[" + std::to_string(i) + "]";
    if (!v[i].is_object()) fail_input(source_, item, "expected an object (got " + v[i].dump() + ")");
    out.emplace_back(v[i], source_, item);
  }
  return out;
}

}  // namespace rm
