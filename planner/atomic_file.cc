#include "planner/atomic_file.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "planner/input_error.h"

namespace rm {

namespace {

// The temporary file being written, for the signal handler (async-signal-safe: a fixed
// buffer and unlink). Empty when no write is in progress.
char g_tmp_path[PATH_MAX + 64];
constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[std::size(kCleanupSignals)];

extern "C" void remove_tmp_and_reraise(int sig) {
  if (g_tmp_path[0] != '\0') ::unlink(g_tmp_path);
  // Hand the signal on to whoever handled it before (the run watchdog, or the default).
  for (size_t i = 0; i < std::size(kCleanupSignals); ++i) {
    if (kCleanupSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  }
  ::raise(sig);
}

// Installs the handler while a temporary file exists; restores the previous ones after.
struct TmpGuard {
  explicit TmpGuard(const std::string& tmp) {
    std::snprintf(g_tmp_path, sizeof g_tmp_path, "%s", tmp.c_str());
    struct sigaction sa {};
    sa.sa_handler = remove_tmp_and_reraise;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], &sa, &g_previous[i]);
  }
  ~TmpGuard() {
    for (size_t i = 0; i < std::size(kCleanupSignals); ++i) ::sigaction(kCleanupSignals[i], &g_previous[i], nullptr);
    g_tmp_path[0] = '\0';
  }
};

std::string dir_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Removes "<base>.<pid>.tmp" files beside `path` left by writers that no longer run.
void remove_stale_tmps(const std::string& path) {
  const std::string dir = dir_of(path);
  const std::string base = path.substr(path.find_last_of('/') + 1) + ".";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() <= base.size() + 4 || name.compare(0, base.size(), base) != 0 ||
        name.compare(name.size() - 4, 4, ".tmp") != 0) {
      continue;
    }
    const std::string pid_text = name.substr(base.size(), name.size() - base.size() - 4);
    char* end = nullptr;
    const long pid = std::strtol(pid_text.c_str(), &end, 10);
    if (pid_text.empty() || *end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

}  // namespace

void write_file_atomically(const std::string& requested, const std::string& text) {
  auto refuse = [&](const std::string& why) { throw InputError(requested + ": cannot write file (" + why + ")"); };
  if (requested.empty()) refuse("empty path");
  // Write through a symlink: replace the file it points to, keep the link.
  std::string path = requested;
  struct stat st {};
  if (::lstat(requested.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char resolved[PATH_MAX];
    if (::realpath(requested.c_str(), resolved) == nullptr) {
      refuse(std::string("a symlink whose target cannot be resolved: ") + std::strerror(errno));
    }
    path = resolved;
  }
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode)) refuse("it exists and is not a regular file");
  remove_stale_tmps(path);

  // The pid keeps concurrent writers (MPI ranks, parallel tests) off each other's temp file;
  // the lock keeps this process's threads to one write at a time (one signal-handler slot).
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  const TmpGuard guard(tmp);
  auto fail = [&](const char* what) {
    const std::string reason = std::strerror(errno);
    ::unlink(tmp.c_str());
    refuse(std::string(what) + ": " + reason);
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) fail("open");
  // An existing file keeps its permission bits (a new one gets 0666 less the umask).
  if (exists && ::fchmod(fd, st.st_mode & 07777) != 0) {
    ::close(fd);
    fail("chmod");
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("write");
  }
  if (::close(fd) != 0) fail("write");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename");
  // The rename is durable only once the folder's entry is on disk.
  const int dir = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace rm
