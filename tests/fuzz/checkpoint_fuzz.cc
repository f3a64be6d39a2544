// libFuzzer target: a training checkpoint's manifest as `train --resume` reads it
// (executor/checkpoint.h read_latest_checkpoint). A checkpoint of the transformer tests'
// small model (tests/executor/transformer_fixture.h) is written once; each input replaces its
// manifest.json, whose data files stay intact, so the fuzzer reaches every field and the size
// and checksum checks of the files the manifest names.
// Any input must resume or give an rm::InputError; a crash, hang, sanitizer report or other
// exception is a bug. Seeds: tests/fuzz/seeds/checkpoint/ (this model's own manifest). Run:
// see tests/fuzz/CMakeLists.txt.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "executor/checkpoint.h"
#include "planner/input_error.h"
#include "tests/executor/checkpoint_state.h"
#include "tests/executor/transformer_fixture.h"

namespace {

namespace fs = std::filesystem;

const fs::path& folder() {  // this process's own, removed at exit
  static const fs::path dir = fs::temp_directory_path() / ("rm_fuzz_checkpoint_" + std::to_string(getpid()));
  return dir;
}

const rm::exec::Transformer& checkpointed_model() {
  static const rm::exec::Transformer model = [] {
    rm::exec::Transformer m(rm::exec::testing::small_spec(), "fuzz");
    rm::exec::write_checkpoint(folder().string(), m, "data.txt", rm::exec::testing::checkpoint_state(m, 3));
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(folder(), ec);
    });
    return m;
  }();
  return model;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const rm::exec::Transformer& model = checkpointed_model();
  {
    std::ofstream out(folder() / "step-00000003" / "manifest.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    rm::exec::read_latest_checkpoint(folder().string(), model);
  } catch (const rm::InputError&) {
  }
  return 0;
}
