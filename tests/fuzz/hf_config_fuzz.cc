// libFuzzer target: the Hugging Face config.json reader (planner/hf_config.h).
// Any input must give a result or an rm::InputError; a crash, hang, sanitizer report or other
// exception is a bug. Seeds: tests/fuzz/seeds/hf_config/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/hf_config.h"
#include "planner/input_error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    rm::parse_hf_config(text, "fuzz/config.json");
  } catch (const rm::InputError&) {
  }
  return 0;
}
