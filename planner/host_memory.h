// This host's memory as this process may use it, for the checks that refuse work that
// cannot fit (the executor's tensors, the simulator's op lists) before it is started.
#pragma once

namespace rm {

struct HostMemory {
  // Physical memory (sysconf), and what is available now (/proc/meminfo's MemAvailable:
  // free plus reclaimable caches), each capped by the process's cgroup limit where one is
  // set (v2 memory.max, v1 memory.limit_in_bytes; what is available: the limit less the
  // group's usage): a container sees its own share, not the host's. 0 where unknown.
  double total_bytes = 0;
  double available_bytes = 0;
};

HostMemory host_memory();

}  // namespace rm
