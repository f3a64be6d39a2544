// Atomic training checkpoints (see checkpoint.h).
#include "executor/checkpoint.h"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <nlohmann/json.hpp>

#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/json_reader.h"

namespace rm::exec {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "ringmaster-checkpoint-1";

// FNV-1a 64 (Fowler, Noll, Vo): a cheap checksum that catches truncation and bit rot.
uint64_t fnv1a64(const char* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

nlohmann::json model_json(const Transformer& model) {
  const ModelSpec& m = model.spec();
  return {{"name", m.name},         {"layers", m.layers},         {"hidden", m.hidden},
          {"heads", m.heads},       {"kv_heads", m.kv_heads},     {"head_dim", m.head_dim},
          {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab},       {"params", model.num_params()}};
}

// Writes `floats` (one or more arrays back to back) to `path`, flushed; returns its entry.
nlohmann::json write_floats(const fs::path& path, const std::vector<const std::vector<float>*>& arrays) {
  std::string bytes;
  for (const auto* a : arrays)
    bytes.append(reinterpret_cast<const char*>(a->data()), a->size() * sizeof(float));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) fail_input(path.string(), "checkpoint", "cannot write file");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a64(bytes.data(), bytes.size())));
  return {{"bytes", bytes.size()}, {"fnv1a64", hex}};
}

// "step-NNNNNNNN", or the temporary ".step-NNNNNNNN.tmp".
std::string step_name(int64_t step, bool temporary = false) {
  char name[40];
  std::snprintf(name, sizeof name, temporary ? ".step-%08lld.tmp" : "step-%08lld",
                static_cast<long long>(step));
  return name;
}

// Reads `name` in `folder` as `count` floats per array into `arrays`, checking the
// manifest's size and checksum.
void read_floats(const fs::path& folder, const std::string& name, const JsonReader& entry,
                 const std::vector<std::vector<float>*>& arrays, size_t count) {
  const fs::path path = folder / name;
  if (!fs::exists(path)) fail_input(path.string(), "checkpoint", "missing file (the manifest lists it)");
  check_regular_file(path.string(), "expected a checkpoint array file");
  // The sizes first: a file of the wrong size is not read in.
  const size_t want = arrays.size() * count * sizeof(float);
  const int64_t listed = entry.integer("bytes", 0, std::numeric_limits<int64_t>::max());
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size != want || listed != static_cast<int64_t>(want))
    fail_input(path.string(), "checkpoint",
               "corrupted: " + std::to_string(ec ? 0 : size) + " bytes, expected " + std::to_string(want));
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_input(path.string(), "checkpoint", "cannot read the file");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() != want) fail_input(path.string(), "checkpoint", "cannot read the file");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a64(bytes.data(), bytes.size())));
  if (entry.str("fnv1a64") != hex)
    fail_input(path.string(), "checkpoint", "corrupted: checksum does not match the manifest");
  for (size_t a = 0; a < arrays.size(); ++a) {
    arrays[a]->resize(count);
    std::memcpy(arrays[a]->data(), bytes.data() + a * count * sizeof(float), count * sizeof(float));
  }
}

}  // namespace

void write_checkpoint(const std::string& dir, const Transformer& model,
                      const std::string& data_path, const TrainState& state,
                      bool kill_before_manifest) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail_input(dir, "--checkpoint-dir", "cannot create folder (" + ec.message() + ")");
  const fs::path final_dir = fs::path(dir) / step_name(state.step);
  const fs::path tmp = fs::path(dir) / step_name(state.step, true);
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) fail_input(tmp.string(), "--checkpoint-dir", "cannot create folder (" + ec.message() + ")");
  nlohmann::json files;
  files["model.bin"] = write_floats(tmp / "model.bin", {&state.params});
  files["optimizer.bin"] = write_floats(tmp / "optimizer.bin", {&state.optimizer.m, &state.optimizer.v});
  if (kill_before_manifest) {
    std::fprintf(stderr, "ringmaster train: injected fault (checkpoint-kill) while writing %s\n",
                 final_dir.c_str());
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  const nlohmann::json manifest = {
      {"format", kFormat},
      {"model", model_json(model)},
      {"step", state.step},
      {"optimizer_step", state.optimizer.step},
      {"seed", state.seed},
      {"data", {{"path", data_path}, {"epoch", state.data.epoch}, {"offset", state.data.offset}}},
      {"files", files}};
  {
    std::ofstream out(tmp / "manifest.json", std::ios::trunc);
    out << manifest.dump(2) << "\n";
    out.flush();
    if (!out) fail_input((tmp / "manifest.json").string(), "checkpoint", "cannot write file");
  }
  fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier run
  fs::rename(tmp, final_dir, ec);
  if (ec) fail_input(final_dir.string(), "checkpoint", "cannot rename into place (" + ec.message() + ")");
}

std::optional<TrainState> read_latest_checkpoint(const std::string& dir, const Transformer& model) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::string latest;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && name.rfind("step-", 0) == 0 && name > latest) latest = name;
  }
  if (latest.empty()) return std::nullopt;
  const fs::path folder = fs::path(dir) / latest;
  const std::string mpath = (folder / "manifest.json").string();
  nlohmann::json mf;
  if (!fs::exists(mpath)) fail_input(mpath, "checkpoint", "missing manifest (corrupted checkpoint)");
  mf = nlohmann::json::parse(read_input_file(mpath, InputKind::kCheckpointManifest), nullptr, false);
  // Compared as JSON: json::value() throws on a format that is not a string (the fuzzer's 3).
  if (mf.is_discarded() || !mf.is_object() || !mf.contains("format") || mf["format"] != kFormat)
    fail_input(mpath, "format", std::string("expected a ") + kFormat + " manifest (corrupted checkpoint?)");
  const nlohmann::json want = model_json(model);
  if (!mf.contains("model") || mf["model"] != want)
    fail_input(mpath, "model",
               "the checkpoint is for model " + (mf.contains("model") ? mf["model"].dump() : "?") +
                   ", the plan's is " + want.dump());
  // Counts are whole and not negative: a step of -3 once resumed AdamW's bias correction at a
  // negative step and trained on NaN.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const JsonReader r(mf, mpath);
  TrainState s;
  s.step = r.integer("step", 0, kMax);
  s.optimizer.step = r.integer("optimizer_step", 0, kMax);
  s.seed = r.unsigned64("seed");
  const JsonReader data = r.object("data");
  s.data.epoch = data.integer("epoch", 0, kMax);
  s.data.offset = data.integer("offset", 0, kMax);
  const JsonReader files = r.object("files");
  read_floats(folder, "model.bin", files.object("model.bin"), {&s.params}, model.num_params());
  read_floats(folder, "optimizer.bin", files.object("optimizer.bin"), {&s.optimizer.m, &s.optimizer.v},
              model.num_params());
  return s;
}

}  // namespace rm::exec
