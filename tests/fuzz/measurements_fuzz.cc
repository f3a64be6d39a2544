// libFuzzer target: the measurements JSONL reader (executor/measurements.h) and its summary.
// Any input must give a result or an rm::InputError; a crash, hang, sanitizer report or other
// exception is a bug. Seeds: tests/fuzz/seeds/measurements/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/input_error.h"
#include "executor/measurements.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    rm::exec::summarize(rm::exec::parse_measurements_jsonl(text, "fuzz.jsonl"));
  } catch (const rm::InputError&) {
  }
  return 0;
}
