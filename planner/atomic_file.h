// Writing an output file so that readers never see half of it: the text goes to a
// temporary file beside the target (same filesystem), is flushed, and is renamed over
// the target. A failure leaves the old file (or none) and no temporary behind.
#pragma once

#include <string>

namespace rm {

// Throws InputError "<path>: cannot write file (<reason>)" when the folder is missing or
// not writable (a user's -o path is user input).
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace rm
