// Training checkpoints (checkpoint.h): a written checkpoint reads back bit for bit; the
// latest complete one wins and an unfinished temporary folder is ignored; a checkpoint of
// another model, one whose data file was damaged or cut short, or whose manifest holds a
// negative step, is refused naming the file.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "executor/checkpoint.h"
#include "planner/input_error.h"
#include "tests/executor/checkpoint_state.h"

namespace rm::exec {
namespace {

namespace fs = std::filesystem;

ModelSpec spec(int hidden) {
  ModelSpec m;
  m.name = "ck";
  m.layers = 1;
  m.hidden = hidden;
  m.heads = 2;
  m.kv_heads = 1;
  m.head_dim = hidden / 2;
  m.ffn_hidden = 16;
  m.vocab = 257;
  return m;
}

using testing::checkpoint_state;

TEST_CASE("checkpoint: round trip, latest complete one, refusals naming the file") {
  const fs::path dir = fs::temp_directory_path() / "rm_checkpoint_test";
  fs::remove_all(dir);
  const Transformer model(spec(8), "test");
  CHECK_FALSE(read_latest_checkpoint(dir.string(), model).has_value());
  write_checkpoint(dir.string(), model, "data.txt", checkpoint_state(model, 5));
  write_checkpoint(dir.string(), model, "data.txt", checkpoint_state(model, 10));
  fs::create_directory(dir / ".step-00000015.tmp");  // a run killed while writing step 15
  const auto got = read_latest_checkpoint(dir.string(), model);
  REQUIRE(got.has_value());
  const TrainState want = checkpoint_state(model, 10);
  CHECK(got->step == 10);
  CHECK(got->data.epoch == 2);
  CHECK(got->data.offset == 1234);
  CHECK(got->params == want.params);
  CHECK(got->optimizer.m == want.optimizer.m);
  CHECK(got->optimizer.v == want.optimizer.v);

  const Transformer other(spec(16), "test");
  CHECK_THROWS_WITH_AS(read_latest_checkpoint(dir.string(), other),
                       doctest::Contains("step-00000010/manifest.json: model: the checkpoint is for model"),
                       InputError);
  {  // flip one byte of the parameters
    std::fstream f(dir / "step-00000010" / "model.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('\x7f');
  }
  CHECK_THROWS_WITH_AS(read_latest_checkpoint(dir.string(), model),
                       doctest::Contains("step-00000010/model.bin: checkpoint: corrupted"), InputError);
  fs::resize_file(dir / "step-00000010" / "model.bin", 8);  // cut short: refused by its size, not read
  CHECK_THROWS_WITH_AS(read_latest_checkpoint(dir.string(), model),
                       doctest::Contains("step-00000010/model.bin: checkpoint: corrupted: 8 bytes, expected"),
                       InputError);
  // A manifest's counts are whole and not negative (a step of -3 once resumed AdamW on NaN).
  const fs::path manifest = dir / "step-00000010" / "manifest.json";
  for (const char* key : {"step", "optimizer_step"}) {
    nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
    m[key] = -3;
    std::ofstream(manifest) << m.dump();
    const std::string want = std::string("manifest.json: ") + key +
                             ": expected a whole number in [0, 9223372036854775807] (got -3)";
    CHECK_THROWS_WITH_AS(read_latest_checkpoint(dir.string(), model), doctest::Contains(want.c_str()), InputError);
    m[key] = 10;
    std::ofstream(manifest) << m.dump();
  }
  // A format that is no string is refused like any other (once it escaped as json's type_error).
  nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
  m["format"] = 3;
  std::ofstream(manifest) << m.dump();
  CHECK_THROWS_WITH_AS(read_latest_checkpoint(dir.string(), model),
                       doctest::Contains("manifest.json: format: expected a"), InputError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rm::exec
