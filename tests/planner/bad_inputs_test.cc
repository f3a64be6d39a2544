// Every file in tests/data/bad/ must be refused with an InputError naming the file and the
// field (the text listed for it in tests/data/bad/EXPECTED.tsv), and every file there must
// be listed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "planner/input_error.h"
#include "planner/plan.h"
#include "planner/plan_loader.h"
#include "planner/spec_library.h"

namespace {

const std::string kBadDir = std::string(RM_SOURCE_DIR) + "/tests/data/bad";

std::map<std::string, std::string> expected_messages() {
  std::map<std::string, std::string> out;
  std::ifstream in(kBadDir + "/EXPECTED.tsv");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    REQUIRE_MESSAGE(tab != std::string::npos, line);
    out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

// Loads the file with the reader its name prefix says; returns the error text or "".
std::string load_error(const std::string& name, const std::string& path) {
  try {
    if (name.rfind("topology-", 0) == 0) {
      rm::load_topology(path);
    } else if (name.rfind("model-", 0) == 0) {
      rm::load_model(path);
    } else if (name.rfind("plan-", 0) == 0) {
      rm::load_plan_file(path);  // with its model and topology, as every consumer loads it
    } else {
      return "unknown prefix (expected topology-, model- or plan-)";
    }
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("every bad input file is refused with its file, field and expectation") {
  const auto expected = expected_messages();
  CHECK(expected.size() >= 15);
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kBadDir)) {
    const std::string name = entry.path().filename().string();
    if (name == "EXPECTED.tsv") continue;
    CAPTURE(name);
    const auto it = expected.find(name);
    REQUIRE_MESSAGE(it != expected.end(), "not listed in EXPECTED.tsv");
    const std::string path = entry.path().string();
    const std::string msg = load_error(name, path);
    CAPTURE(msg);
    CHECK(msg.rfind(path, 0) == 0);  // starts with the file name
    CHECK(msg.find(it->second) != std::string::npos);
    ++checked;
  }
  CHECK(checked == static_cast<int>(expected.size()));
}
