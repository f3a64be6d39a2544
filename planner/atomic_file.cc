#include "planner/atomic_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include <unistd.h>

#include "planner/input_error.h"

namespace rm {

void write_file_atomically(const std::string& path, const std::string& text) {
  // The pid keeps concurrent writers (MPI ranks, parallel tests) off each other's temp file.
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot write file (" + what + ": " + reason + ")");
  };
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("open");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool flushed = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  if (std::fclose(f) != 0 || !wrote || !flushed) fail("write");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
}

}  // namespace rm
