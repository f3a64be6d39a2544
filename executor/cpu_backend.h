// The `cpu` backend: fp32 tensors in host memory, the blockwise Eigen kernels of
// cpu_attention.h, and non-blocking MPI point-to-point transfers on MPI_COMM_WORLD that
// pair and check messages as the message contract says (mpi_transport.h; one MPI rank per
// ring position, one thread per rank).
//
// Threads: Eigen runs single-threaded (setup() calls Eigen::setNbThreads(1); the build
// does not enable OpenMP, and `ringmaster run` also exports OMP_NUM_THREADS=1 to every
// rank), so P ranks use P cores and the ranks' transfers overlap their compute through
// MPI's progress while a rank computes (shared-memory transport: the sender's eager or
// rendezvous copy proceeds when either side enters MPI).
#pragma once

#include <memory>

#include "executor/backend.h"

namespace rm::exec {

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace rm::exec
