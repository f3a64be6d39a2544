// From timed records to a calibration profile: the one fitting path behind both
// `ringmaster calibrate --backend B` (records of executor/calibration_bench.h) and
// `ringmaster calibrate --from m.jsonl` (records of `ringmaster run`). Pure data
// processing: it sorts records into the samples of calibration_fit.h's fits and
// assembles their results into a Profile (profile.h, which the fits' quality type keeps
// apart from this file).
//
// Which records feed which fit (records of one rank and iteration are compared by their
// [start, start + seconds] spans):
//   kernel curve    attention_forward / attention_backward records with no transfer in
//                   flight (no send/recv span overlaps them); a backward record's forward
//                   FLOPs are its flops / kBackwardFlopsFactor. With fewer than two
//                   tile sizes the tile term half_flops cannot be seen: it is kept from
//                   the topology and only max_efficiency is fitted.
//   interference    attention records with a transfer in flight, against the curve
//                   (forward ones; backward ones too when some ran alone). Where every
//                   backward record had a transfer in flight (ring runs), the backward
//                   factor is fitted on them over curve x interference.
//   gemm            gemm records (calibration benchmarks) and linear records (a training
//                   step's GEMMs, with the FLOPs the cost model counts for them)
//   elementwise     elementwise records (a step's memory-bound work, or calibrate's copies
//                   and accumulates) and a2a_pack / a2a_unpack records, with the bytes the
//                   cost model counts: hbm_bytes_per_s
//   optimizer       optimizer records (bytes = optimizer_update_bytes of the states the
//                   executor keeps x parameters updated): optimizer_bytes_per_s
//   collectives     reduce_scatter and all_reduce records (blocking calls: their seconds
//                   are the collective's) of two unit sizes or more: alpha and bus
//                   bandwidth (CostParams::collectives), on peers x shard bytes per pass
//                   (shard = bytes / group); overlap = 1 - sum of the seconds blocked in
//                   every all_gather / reduce_scatter / all_reduce record over the sum of
//                   their fitted times (the share the machine hid behind compute)
//   links           recv records with no compute inside their span (pure transfers), per
//                   link class of the route peer -> rank on the topology's fabric
//   lockstep jitter attention records of a ring, per run: the k-th of each (iteration,
//                   layer, step, pass) on every position of the ring forming one lockstep
//                   step, its seconds per FLOP by position (fit_lockstep_jitter: the spread
//                   of the positions' speeds); GPU runs only (hardware.backend cuda: the
//                   cpu backend's ranks share cores)
//   transfer overlap recv records with compute inside their span: how much of the
//                   transfer (predicted by the link fit) went on during the compute:
//                   overlap = (transfer - exposed) / min(compute, transfer), where exposed
//                   is the span's end minus the end of the last compute inside it; the
//                   profile takes the median (stats.h).
#pragma once

#include <string>
#include <vector>

#include "planner/profile.h"
#include "planner/topology.h"

namespace rm {

// One timed op or benchmark call as the fit reads it: the fields of a measurement record
// (executor/measurements.h, the measurements.jsonl format) that calibration uses.
struct CalibrationRecord {
  int rank = 0;
  int iteration = 0;
  std::string kind;  // "attention_forward", "attention_backward", "accumulate", "gemm",
                     // "linear", "elementwise", "a2a_pack", "a2a_unpack", "optimizer",
                     // "send", "recv", the collectives below; other kinds are ignored
  int block_q = 0;   // tile sizes and head dim of attention records
  int block_kv = 0;
  int head_dim = 0;
  double flops = 0;  // executed (a backward's: kBackwardFlopsFactor x its forward's)
  double bytes = 0;  // send, recv, elementwise, a2a_pack / a2a_unpack, optimizer
  int peer = -1;     // send, recv: the other rank
  int group = 0;     // all_gather, reduce_scatter, all_reduce and the TP group's tp_*
                     // of them: ranks in the collective's group (0: unknown, not fitted)
  double start = 0;  // seconds on the rank's clock
  double seconds = 0;
  // Ring attention records of `ringmaster run`: which file (records of one run compare),
  // ring, position and step; ring -1 for calibration benchmarks, which run no ring.
  int run = 0;
  int ring = -1;
  int position = 0;
  int layer = 0;
  int step = 0;
};

// Fits a profile for `topo`'s device kind from `records` (all ranks). Parameters the
// records cannot determine keep the topology's values and get no `fits` entry; each such
// case is appended to `notes` for people. Throws InputError when nothing can be fitted.
Profile fit_profile(const std::vector<CalibrationRecord>& records, const Topology& topo,
                    const ProfileHardware& hardware, const std::vector<std::string>& sources,
                    std::vector<std::string>* notes);

}  // namespace rm
