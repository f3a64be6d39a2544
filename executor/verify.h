// `ringmaster run --verify`: every rank's inputs and results (after the warm-up iteration
// and after the last timed one; each tensor reports the worse) are gathered to rank 0,
// assembled into whole-sequence tensors by global token index, and compared with the
// fp64 reference (reference_attention.h) computed from the gathered inputs, once for both.
//
// Error measure, per tensor: rel = max |x - ref| / max |ref| over the whole ring's
// tensor (the largest absolute error relative to the tensor's scale, so entries near
// zero do not inflate it). A tensor passes when rel <= tolerance (1e-4 by default: fp32
// blockwise accumulation over a few thousand keys stays near 1e-6). The inputs Q, K, V,
// dO are also checked against their regenerated values (input_value), which catches a
// backend that initialised the wrong tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "executor/backend.h"

namespace rm::exec {

inline constexpr double kVerifyTolerance = 1e-4;

struct TensorCheck {
  std::string tensor;  // "q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv"
  double max_abs_err = 0;
  double max_abs_ref = 0;
  double rel_err = 0;
  bool ok = false;
};

struct VerifyResult {
  int ring = 0;
  std::vector<TensorCheck> checks;
  bool ok() const;
};

// One ring's tensors after one or more iterations on the same inputs (run --verify: its
// warm-up and its last timed iteration), each iteration's ranks in any order (their tokens
// must cover 0..N-1 once). The fp64 reference is computed once, from the first iteration's
// inputs; each tensor reports the worse of its checks. `seed` is the seed the ring's inputs
// were made with. Throws std::runtime_error when the tokens do not tile the sequence.
VerifyResult verify_ring(const std::vector<std::vector<HostTensors>>& iterations, const AttentionShape& shape,
                         uint64_t seed, bool backward, double tolerance = kVerifyTolerance);

// The error measure above for one tensor: `got` against `ref`, same size.
TensorCheck compare_tensor(const std::string& name, const std::vector<double>& got,
                           const std::vector<double>& ref, double tolerance);

// Every rank's HostTensors at rank 0 (MPI_COMM_WORLD), indexed by rank; empty elsewhere.
// All ranks must have the same shapes.
std::vector<HostTensors> gather_host_tensors(const HostTensors& mine);

// Aligned table: ring, tensor, max |err|, max |ref|, rel err, tolerance, result.
std::string format_verify_table(const std::vector<VerifyResult>& results, double tolerance);

}  // namespace rm::exec
