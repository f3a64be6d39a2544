// Checked reads of a JSON document: a Hugging Face config.json (hf_config.h), or a ringmaster
// --format json output handed back (`ringmaster report`). Any file can arrive where one is
// expected, so every read checks presence and type, and a bad field fails as InputError
// naming the file and the field's path ("plans[2].predicted.tokens_per_s") with what was
// expected (exit 2), never nlohmann's own exception or a missing key's undefined read.
// A null value counts as absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace rm {

class JsonReader {
 public:
  // `j` must outlive the reader; `path` prefixes field names (empty at the document's top).
  JsonReader(const nlohmann::json& j, std::string source, std::string path = "");

  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;
  bool has(const char* key) const;
  // `key`'s name as errors give it: the path from the document's top.
  std::string field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  // A whole number in [1, hi], required or with a fallback when absent.
  int count(const char* key, int hi) const;
  int count_or(const char* key, int fallback, int hi) const;
  int64_t integer_or(const char* key, int64_t fallback, int64_t hi) const;
  // A whole number in [lo, hi], required.
  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  // Any whole number in [0, 2^64) (a seed), required.
  uint64_t unsigned64(const char* key) const;
  // A finite number, required; or one in [lo, hi].
  double number(const char* key) const;
  double number(const char* key, double lo, double hi) const;
  bool boolean(const char* key) const;
  bool boolean_or(const char* key, bool fallback) const;
  std::string str(const char* key) const;
  // An array of whole numbers in [lo, hi] (required).
  std::vector<int64_t> integers(const char* key, int64_t lo, int64_t hi) const;
  // The object at `key` (required), read the same way.
  JsonReader object(const char* key) const;
  // The array at `key` (required): one reader per element, each an object.
  std::vector<JsonReader> objects(const char* key) const;

 private:
  const nlohmann::json& at(const char* key) const;  // present (else fails "missing (required)")
  int64_t whole(const nlohmann::json& v, int64_t lo, int64_t hi, const std::string& name) const;

  const nlohmann::json& j_;
  std::string source_;
  std::string path_;
};

}  // namespace rm
