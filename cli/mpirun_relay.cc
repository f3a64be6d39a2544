#include "cli/mpirun_relay.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <regex>

namespace rm::cli {

std::string MpirunRelay::line(const std::string& text) {
  // Open MPI's help blocks open and close with a line of dashes (show_help's framing).
  if (text.size() >= 20 && text.find_first_not_of('-') == std::string::npos) {
    in_block_ = !in_block_;
    return "";
  }
  static const std::regex killed(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))");
  std::smatch m;
  if (std::regex_search(text, m, killed)) {
    return "ringmaster: rank " + m[1].str() + " was killed by signal " + m[2].str() + " (" + m[3].str() +
           ")\n";
  }
  if (in_block_) return "";
  // The ranks' own errors: each rank that found the same problem says it; once is enough.
  if (text.rfind("ringmaster: ", 0) == 0 && !said_.insert(text).second) return "";
  return text + "\n";
}

void relay_mpirun_stderr(int fd) {
  MpirunRelay relay;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t start = 0, nl;
    while ((nl = pending.find('\n', start)) != std::string::npos) {
      const std::string out = relay.line(pending.substr(start, nl - start));
      if (!out.empty()) std::fputs(out.c_str(), stderr);
      start = nl + 1;
    }
    pending.erase(0, start);
    std::fflush(stderr);
  }
  if (!pending.empty()) std::fputs(relay.line(pending).c_str(), stderr);
}

}  // namespace rm::cli
