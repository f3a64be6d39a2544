// Reading one input file, bounded: the first step of every reader (topology, model, plan,
// profile, measurements, published corpus).
//
// Only regular files are read: a directory, FIFO, device or socket is refused by name before
// anything blocks on it (a FIFO opened for reading waits for a writer forever; /dev/zero never
// ends). Each kind of file has a size limit, far above any real file of that kind, so a wrong
// path fails at once instead of filling memory. Errors are InputError "<path>: <what>".
#pragma once

#include <cstddef>
#include <string>

namespace rm {

enum class InputKind { kTopology, kModel, kPlan, kProfile, kMeasurements, kCorpus };

// "topology", "model", ... for messages.
const char* to_string(InputKind kind);
// The size limit of a kind of file, in bytes.
size_t max_input_bytes(InputKind kind);

// The whole file as text; InputError when it is not a regular file, cannot be read, or is
// larger than max_input_bytes(kind).
std::string read_input_file(const std::string& path, InputKind kind);

}  // namespace rm
