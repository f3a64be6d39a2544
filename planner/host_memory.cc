// Reading this host's memory and the cgroup's limit (see host_memory.h).
#include "planner/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace rm {

namespace {

// The first number of a /proc or /sys file ("max" and absent files give 0: no limit).
double first_number(const std::string& path) {
  std::ifstream in(path);
  double v = 0;
  return in >> v ? v : 0;
}

// MemAvailable in bytes (/proc/meminfo states kB), 0 if absent.
double mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    double kb = 0;
    if (fields >> key >> kb && key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// This process's cgroup memory limit and usage (v2: memory.max and memory.current; v1:
// memory.limit_in_bytes and memory.usage_in_bytes), {0, 0} where none is set. "max" and
// v1's "no limit" (near 2^63) read as none.
struct CgroupMemory {
  double limit = 0, usage = 0;
};

CgroupMemory cgroup_memory() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    const bool v2 = line.rfind("0::", 0) == 0;
    if (!v2 && controllers != "memory") continue;
    const std::string dir = (v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory") + path;
    const double limit = first_number(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
    if (limit > 0 && limit < 0x1p62) {
      return {limit, first_number(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"))};
    }
  }
  return {};
}

double capped(double value, double cap) { return value > 0 ? std::min(value, cap) : cap; }

}  // namespace

HostMemory host_memory() {
  HostMemory m;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) m.total_bytes = static_cast<double>(pages) * static_cast<double>(page);
  m.available_bytes = mem_available();
  if (const CgroupMemory cg = cgroup_memory(); cg.limit > 0) {
    m.total_bytes = capped(m.total_bytes, cg.limit);
    m.available_bytes = capped(m.available_bytes, std::max(0.0, cg.limit - cg.usage));
  }
  return m;
}

}  // namespace rm
