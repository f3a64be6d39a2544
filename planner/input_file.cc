#include "planner/input_file.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/input_error.h"

namespace rm {

namespace {

constexpr size_t kMiBytes = size_t{1} << 20;  // size_t, unlike units.h's kMiB

std::string kind_of_file(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string size_text(size_t bytes) { return std::to_string(bytes / kMiBytes) + " MiB"; }

}  // namespace

const char* to_string(InputKind kind) {
  switch (kind) {
    case InputKind::kTopology: return "topology";
    case InputKind::kModel: return "model";
    case InputKind::kPlan: return "plan";
    case InputKind::kProfile: return "profile";
    case InputKind::kMeasurements: return "measurements";
    case InputKind::kCorpus: return "published corpus";
    case InputKind::kToolOutput: return "ringmaster JSON output";
    case InputKind::kCheckpointManifest: return "checkpoint manifest";
  }
  return "?";
}

size_t max_input_bytes(InputKind kind) {
  switch (kind) {
    // Shipped specs and profiles are 1-3 KiB: 1 MiB leaves room for any comments.
    case InputKind::kTopology:
    case InputKind::kModel:
    case InputKind::kProfile: return 1 * kMiBytes;
    // A plan lists one ring position per GPU: about 8 bytes each, 1 MiB at the GPU limit.
    case InputKind::kPlan: return 16 * kMiBytes;
    // About 350 bytes a record: 256 MiB holds 750,000 records, hours of a calibration run.
    case InputKind::kMeasurements: return 256 * kMiBytes;
    // validation/published.yaml is about 60 KiB.
    case InputKind::kCorpus: return 16 * kMiBytes;
    // `sweep --format json` writes about 2 KiB a row: 256 MiB holds 100,000 rows.
    case InputKind::kToolOutput: return 256 * kMiBytes;
    // A manifest lists a handful of arrays with their sizes and checksums: under 4 KiB.
    case InputKind::kCheckpointManifest: return 1 * kMiBytes;
  }
  return 1 * kMiBytes;
}

int64_t check_regular_file(const std::string& path, const std::string& expected) {
  if (path.empty()) throw InputError("(empty path): " + expected);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(path + ": cannot read file (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(st.st_mode)) throw InputError(path + ": is " + kind_of_file(st.st_mode) + ", " + expected);
  return static_cast<int64_t>(st.st_size);
}

std::string read_input_file(const std::string& path, InputKind kind) {
  const std::string expected = std::string("expected a ") + to_string(kind) + " file";
  check_regular_file(path, expected);
  struct stat st {};
  const size_t limit = max_input_bytes(kind);
  auto too_large = [&]() {
    throw InputError(path + ": larger than the " + size_text(limit) + " limit for a " + to_string(kind) +
                     " file");
  };
  // O_NONBLOCK: should the path become a FIFO between stat and open, open does not wait.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot read file (" + std::strerror(errno) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    throw InputError(path + ": is " + kind_of_file(st.st_mode) + ", " + expected);
  }
  if (static_cast<size_t>(st.st_size) > limit) too_large();
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(path + ": cannot read file (" + std::strerror(errno) + ")");
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > limit) too_large();  // the file grew while read
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace rm
