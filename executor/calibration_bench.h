// Calibration micro-benchmarks (`ringmaster calibrate --backend B`): time the pieces the
// cost model charges for, through the same Backend the ring loop drives, and return them
// as measurement records (measurements.h), so that benchmark output and the records of
// `ringmaster run` are refitted by one path (planner/profile_fit.h, then
// planner/calibration_fit.h).
//
// Every rank of MPI_COMM_WORLD runs every benchmark at the same time (a barrier before
// each point), as in a ring run: the ranks contend for caches and memory bandwidth the
// way they will when the plan runs. Each point: one warm-up call, then `repeats` timed
// calls; the record holds the median.
//
//   kernel grid    attention_forward / attention_backward of a c-token query block
//                  against a c-token K,V block, for each (c, block_q x block_kv, head dim)
//                  and causal (the diagonal block) or not; flops = the executed FLOPs
//                  (planner/attention_work.h)
//   gemm           C[m x n] = A[m x k] B[k x n] (cpu backend only: the linear layers'
//                  shapes of the model, in Eigen fp32 like the rest of the cpu backend)
//   memory         a copy (y = x) and an accumulate (y += x) of fp32 buffers (cpu backend
//                  only): "elementwise" records with the bytes read and written
//   ring exchange  every rank sends `bytes` to rank+1 and receives from rank-1 at once
//                  (the ring's pattern), timed from posting to both completing; one
//                  "recv" record per size and rank, with nothing else running
//   overlap        ring steps as `run` makes them: one backend posts the exchange of its
//                  K,V block, runs the kernel (forward or backward, each grid c, 64x64
//                  tiles) on the block it holds, then waits; its progress calls between
//                  tiles move its own transfer, as in a run. An attention record and a
//                  "wait" record (the transfer left when the kernel ended) inside the span
//                  of a "recv" record; compared with the kernel alone and the exchange
//                  alone (planner/profile_fit.h)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "executor/backend.h"
#include "executor/measurements.h"

namespace rm::exec {

struct CalibrationGrid {
  std::vector<int64_t> tokens;                     // c, per block
  std::vector<std::pair<int, int>> tiles;          // (block_q, block_kv)
  std::vector<int> head_dims;                      // d
  int heads = 2;                                   // h of every kernel point
  int kv_heads = 1;                                // h_kv
  std::vector<std::array<int64_t, 3>> gemms;       // (m, k, n)
  std::vector<double> message_bytes;               // ring exchange sizes
  std::vector<double> copy_bytes;                  // memory-bound copy / accumulate sizes
  int repeats = 3;

  // The standard grid; `small` (CI=true) keeps the whole run to a few seconds.
  // hidden/ffn size the GEMMs like the model's linear layers. `gpu`: kernels of 2K-8K
  // tokens a block in the tiles and head dims the cuda kernels have, since a GPU runs the
  // CPU's 256-1024 in launch latency (0.03-0.08 ms on an H200, where the fit then read 0.5 %
  // of peak against the kernel bench's 10-18 %).
  static CalibrationGrid standard(bool small, int hidden, int ffn_hidden, bool gpu = false);
};

// Runs all benchmarks on this rank (every rank must call it) with a fresh backend per
// kernel shape from `make`. Rank 0 reports progress through `progress` (may be empty).
// Returns this rank's records; `iteration` numbers the benchmark points (the records of
// one point share it), `op` the records.
std::vector<Measurement> run_calibration_benchmarks(
    const std::string& backend_name, const CalibrationGrid& grid,
    const std::function<void(const std::string&)>& progress);

}  // namespace rm::exec
