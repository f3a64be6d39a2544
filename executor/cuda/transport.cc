// Helpers shared by the transports (see transport.h).
#include "executor/cuda/transport.h"

#include <mpi.h>

#include <set>
#include <stdexcept>

#include "executor/cuda/attention_kernels.cuh"

namespace rm::gpu {

int position_in_group(const std::vector<int>& group, int rank) {
  std::string list;
  for (int g : group) {
    if (!list.empty()) list += ' ';
    list += std::to_string(g);
  }
  int position = -1;
  std::set<int> seen;
  for (size_t i = 0; i < group.size(); ++i) {
    if (!seen.insert(group[i]).second)
      throw std::logic_error("transport: rank " + std::to_string(group[i]) +
                             " appears twice in the ring [" + list + "]");
    if (group[i] == rank) position = static_cast<int>(i);
  }
  if (position < 0)
    throw std::logic_error("transport: rank " + std::to_string(rank) + " is not in its ring [" +
                           list + "]");
  return position;
}

void check_mpi(int rc, const std::string& op) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_cuda_error(op.c_str(), std::string(msg, static_cast<size_t>(len)), __FILE__, __LINE__);
}

}  // namespace rm::gpu
