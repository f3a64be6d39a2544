// Writing an output file so that readers never see half of it: the text goes to a
// temporary file beside the target (same filesystem), is flushed, and is renamed over
// the target; the folder is then synced so the rename survives a crash. A failure leaves
// the old file (or none) and no temporary behind, also when the writer is interrupted by
// SIGINT, SIGTERM or SIGHUP (a SIGKILLed writer's temporary is removed by the next write
// to the same path).
//
// A symlink target is written through (the file it points to is replaced; the link stays);
// an existing file keeps its permission bits; a target that exists but is not a regular
// file (a directory, a device such as /dev/null, a FIFO) is refused.
#pragma once

#include <string>

namespace rm {

// Throws InputError "<path>: cannot write file (<reason>)" when the folder is missing or
// not writable, or the target is not a regular file (a user's -o path is user input).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace rm
