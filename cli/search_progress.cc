#include "cli/search_progress.h"

#include <chrono>
#include <cstdio>

namespace rm::cli {

std::function<void(const std::string&)> search_progress(const char* command, int gpus) {
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  return [=](const std::string& what) mutable {
    const auto now = std::chrono::steady_clock::now();
    if (now - last < std::chrono::seconds(1)) return;
    last = now;
    std::fprintf(stderr, "%s: %.0f s, %d GPUs: %s\n", command, std::chrono::duration<double>(now - start).count(),
                 gpus, what.c_str());
  };
}

}  // namespace rm::cli
