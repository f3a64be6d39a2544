// libFuzzer target: the topology YAML reader (planner/spec_library.h), then its link graph.
// Any input must give a result or an rm::InputError; a crash, hang, sanitizer report or other
// exception is a bug. Seeds: tests/fuzz/seeds/topology/. Run: see tests/fuzz/CMakeLists.txt.
#include <cstddef>
#include <cstdint>
#include <string>

#include "planner/cost_model.h"
#include "planner/cost_params.h"
#include "planner/input_error.h"
#include "planner/spec_library.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const rm::Topology t = rm::parse_topology(text, "fuzz.yaml");
    // What `plan` does next: the link graph and the overlap threshold of each link class.
    rm::overlap_thresholds(t, rm::CostParams::from_topology(t), rm::load_model("tiny"));
  } catch (const rm::InputError&) {
  }
  return 0;
}
