// The host's memory as the up-front checks read it (planner/host_memory.h): on Linux both
// figures come from the kernel, so a reader that parsed nothing would give 0 and fail here.
#include <doctest/doctest.h>

#include <fstream>

#include "planner/host_memory.h"

TEST_CASE("host memory: the total and what is available, read from this Linux host") {
  REQUIRE(std::ifstream("/proc/meminfo").good());  // ringmaster builds for Linux (Debian)
  const rm::HostMemory m = rm::host_memory();
  CHECK(m.total_bytes > 64.0 * (1 << 20));  // more than 64 MiB: a real machine's
  CHECK(m.available_bytes > 0);
  CHECK(m.available_bytes <= m.total_bytes * 1.01);  // MemAvailable never exceeds MemTotal
}
