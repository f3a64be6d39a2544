// Reading one input file, bounded: the first step of every reader (topology, model, plan,
// profile, measurements, published corpus, Hugging Face config, sweep parts and JSON for
// `report`, checkpoint manifests).
//
// Only regular files are read: a directory, FIFO, device or socket is refused by name before
// anything blocks on it (a FIFO opened for reading waits for a writer forever; /dev/zero never
// ends). Each kind of file has a size limit, far above any real file of that kind, so a wrong
// path fails at once instead of filling memory. Errors are InputError "<path>: <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rm {

enum class InputKind {
  kTopology, kModel, kPlan, kProfile, kMeasurements, kCorpus,
  kToolOutput,          // ringmaster's own --format json output, read by merge and report
  kCheckpointManifest,  // a training checkpoint's manifest.json
};

// "topology", "model", ... for messages.
const char* to_string(InputKind kind);
// The size limit of a kind of file, in bytes.
size_t max_input_bytes(InputKind kind);

// Refuses (InputError "<path>: is a FIFO ..., <expected>") anything but an existing regular
// file, before anything opens it; returns its size in bytes. For readers that stream a file
// themselves (training text, checkpoint arrays).
int64_t check_regular_file(const std::string& path, const std::string& expected);

// The whole file as text; InputError when it is not a regular file, cannot be read, or is
// larger than max_input_bytes(kind).
std::string read_input_file(const std::string& path, InputKind kind);

}  // namespace rm
