// libFuzzer target: the calibrated profile YAML reader (planner/profile.h).
// Any input must give a result or an rm::InputError; a crash, hang, sanitizer report or other
// exception is a bug. Seeds: tests/fuzz/seeds/profile/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/input_error.h"
#include "planner/profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    rm::parse_profile(text, "fuzz.yaml");
  } catch (const rm::InputError&) {
  }
  return 0;
}
