// The GPU tests' entry: skip (exit 77, ctest's SKIP_RETURN_CODE) when no CUDA device is
// visible; otherwise MPI (the backend tests make a one-rank world) and doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

#include "executor/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  if (rm::gpu::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  MPI_Init(&argc, &argv);
  doctest::Context context(argc, argv);
  const int code = context.run();
  MPI_Finalize();
  return code;
}
