// Checked JSON reads (planner/json_reader.h): each bad field named by its path from the
// document's top, with what was expected; null counts as absent.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"
#include "planner/json_reader.h"

using namespace rm;
using nlohmann::json;

namespace {

// The InputError's message of reading `doc`'s plans[1].predicted with `read`, or "".
template <class Read>
std::string error_of(const json& doc, Read read) {
  try {
    const JsonReader top(doc, "f.json");
    read(top.objects("plans")[1].object("predicted"));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("json reader: values in range are read, and each bad one is named by its path") {
  const json doc = json::parse(R"({"plans": [{}, {"predicted": {"tps": 12.5, "fits": true, "name": "x",
      "gpus": 64, "sizes": [2, 4], "none": null, "neg": -3, "big": 18446744073709551615}}]})");
  CHECK(error_of(doc, [](const JsonReader& p) {
          CHECK(p.number("tps") == 12.5);
          CHECK(p.boolean("fits"));
          CHECK(p.str("name") == "x");
          CHECK(p.count("gpus", 1024) == 64);
          CHECK(p.integers("sizes", 1, 8) == std::vector<int64_t>{2, 4});
          CHECK(p.unsigned64("big") == 18446744073709551615ull);
          CHECK(p.count_or("none", 7, 10) == 7);  // null is absent
          CHECK(p.field("tps") == "plans[1].predicted.tps");
        }) == "");
  CHECK(error_of(doc, [](const JsonReader& p) { p.number("missing"); }) ==
        "f.json: plans[1].predicted.missing: missing (required)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.number("name"); }) ==
        "f.json: plans[1].predicted.name: expected a number (got \"x\")");
  CHECK(error_of(doc, [](const JsonReader& p) { p.str("tps"); }) ==
        "f.json: plans[1].predicted.tps: expected a string (got 12.5)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.count("gpus", 32); }) ==
        "f.json: plans[1].predicted.gpus: expected a whole number in [1, 32] (got 64)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.count("neg", 32); }) ==
        "f.json: plans[1].predicted.neg: expected a whole number in [1, 32] (got -3)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.integer("big", 0, 1000); }).find("(got 18446744073709551615)") !=
        std::string::npos);
  CHECK(error_of(doc, [](const JsonReader& p) { p.unsigned64("neg"); }) ==
        "f.json: plans[1].predicted.neg: expected a whole number in [0, 2^64) (got -3)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.integers("sizes", 3, 8); }) ==
        "f.json: plans[1].predicted.sizes[0]: expected a whole number in [3, 8] (got 2)");
  CHECK(error_of(doc, [](const JsonReader& p) { p.object("fits"); }) ==
        "f.json: plans[1].predicted.fits: expected an object (got true)");
  CHECK(error_of(json::parse(R"({"plans": [{}, 3]})"), [](const JsonReader&) {}) ==
        "f.json: plans[1]: expected an object (got 3)");
  CHECK(error_of(json::parse(R"({"plans": {}})"), [](const JsonReader&) {}) ==
        "f.json: plans: expected an array (got {})");
  CHECK(error_of(json::parse("[1]"), [](const JsonReader&) {}) == "f.json: file: expected a JSON object (got [1])");
}
