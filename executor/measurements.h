// What `ringmaster run` measured: one record per executed op of every timed iteration,
// written as JSON lines (measurements.jsonl), and the summary table printed at the end.
//
// Format (one JSON object per line; rank 0 writes the merged file of all ranks, sorted by
// iteration, rank, then op index; written to a temporary file and renamed):
//   rank        int     MPI rank (= GPU id in the plan)
//   ring, position int  which ring (0..dp-1) and the rank's position in it
//   iteration   int     timed iteration (0..K-1; the warm-up iteration is not recorded)
//   op          int     index of the op in the rank's op list
//   pass        string  "forward" | "backward"
//   layer       int
//   step        int     ring step within the pass
//   kind        string  "attention_forward" | "attention_backward" | "accumulate" |
//                       "send" | "recv" | "wait" | "alloc" | "free"; and from training
//                       steps (train, run of a step plan; executor/train.h), per rank
//                       and step: "all_gather" | "reduce_scatter" (FSDP, per unit:
//                       layer = the unit, bytes = its unsharded size) | "all_reduce"
//                       (DDP's gradients), "tp_all_gather" | "tp_reduce_scatter" |
//                       "tp_all_to_all" | "tp_all_reduce" (the TP group's, per
//                       collective: bytes = the group's whole buffer), "pp_exchange"
//                       (a pipeline stage's blocking exchange with its neighbours: bytes
//                       sent and received, seconds blocked), "linear" (the
//                       step's GEMM time, flops = what
//                       the cost model counts), "elementwise" (the rest of the layers'
//                       compute, bytes = what the cost model counts), "optimizer"
//                       (bytes = optimizer_update_bytes of the states kept, 12 B or
//                       8 B with bf16 moments, x parameters updated) and
//                       "step" (the rank's whole step: its span covers the others)
//   block_q, block_kv  int   tile sizes of the blockwise kernel (attention ops)
//   head_dim    int     d of the attention ops (a tile of one head is 4*block_q*block_kv*d
//                       FLOPs: what calibration fits the kernel curve on); 0 otherwise
//   flops       number  FLOPs executed (attention ops; tile granularity, 0 otherwise)
//   useful_flops number FLOPs of unmasked pairs only (attention ops)
//   bytes       number  bytes moved (send, recv) or allocated (alloc)
//   peer        int     the other rank (send, recv; -1 otherwise)
//   group       int     optional: a collective's group size (training's collectives)
//   request     int     request id (send, recv, wait; -1 otherwise)
//   start       number  seconds since this rank left the barrier before the timed loop
//   seconds     number  for compute: the kernel's duration; for wait: time blocked (the
//                       exposed communication); for send/recv: from posting to the end
//                       of the wait that retired it (the transfer's latest completion
//                       time, an upper bound on its duration); alloc/free: the call
// Clocks of different ranks are only compared through durations, never through `start`
// (on one machine the starts share MPI_Wtime's clock, across machines they need not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace rm::exec {

struct Measurement {
  int rank = 0;
  int ring = 0;
  int position = 0;
  int iteration = 0;
  int op = 0;
  bool backward = false;
  int layer = 0;
  int step = 0;
  std::string kind;
  int block_q = 0;
  int block_kv = 0;
  int head_dim = 0;
  double flops = 0;
  double useful_flops = 0;
  double bytes = 0;
  int peer = -1;
  int request = -1;
  double start = 0;
  double seconds = 0;
  // The rank's host load average over the last minute when it handed in its records (at the
  // end of the run, so it covers the last minute of measuring); -1 = not recorded (files
  // written before the field existed). Optional key "load1" in the JSON.
  double load1 = -1;
  // A collective's group size (the ranks it spans); 0 = not a collective, or a file written
  // before the field existed. Optional key "group" in the JSON.
  int group = 0;
};

// A training step's collective (FSDP's, the TP group's): `kind`, over `group` ranks, moving
// `bytes`, blocked in from t0 to t1 (MPI_Wtime), its start counted from `epoch`; the op
// index is the rank's record count so far, no layer (-1) and no ring step.
Measurement collective_record(int rank, int iteration, int op, const std::string& kind, int group, double bytes,
                              double t0, double t1, double epoch);

// The host's load average over the last minute (/proc/loadavg), -1 where unavailable.
double host_load_average();

nlohmann::json to_json(const Measurement& m);
// Throws InputError naming `where` (file:line) and the field when a key is missing or
// has the wrong type.
Measurement measurement_from_json(const nlohmann::json& j, const std::string& where);

// Writes all records as JSON lines (temp file + rename).
void write_measurements_jsonl(const std::vector<Measurement>& records, const std::string& path);
// Reads a measurements file; InputError names the file and line of a bad record.
std::vector<Measurement> read_measurements_jsonl(const std::string& path);
// The same from text already read; `source` names it in messages ("<source>:<line>: ...").
std::vector<Measurement> parse_measurements_jsonl(const std::string& text, const std::string& source);

// Per timed iteration: the step time of the slowest rank, the compute and exposed
// communication of the busiest rank (the critical path; the planner predicts that rank).
struct IterationSummary {
  int iteration = 0;
  double step_s = 0;          // slowest rank's time from its first op to its last
  double compute_s = 0;       // busiest rank's kernel time (attention, accumulate, a2a's
                              // pack and unpack; and in a training step linear,
                              // elementwise, optimizer)
  double exposed_comm_s = 0;  // busiest rank's time blocked in wait (and collectives)
  double flops = 0;           // FLOPs executed, all ranks
  double useful_flops = 0;    // useful FLOPs, all ranks
  double kernel_flops_per_s = 0;  // executed FLOPs / kernel time, mean over ranks
};

std::vector<IterationSummary> summarize(const std::vector<Measurement>& records);

// nccl-tests style table: one row per iteration and an average row, units in the
// header. `ranks` is the world size (GFLOP/s per rank).
std::string format_summary_table(const std::vector<IterationSummary>& rows, int ranks);

// The measured timeline as the simulator's trace-event JSON (planner/trace_events.h):
// attention, accumulate and a2a pack / unpack ops on each rank's compute track, transfers
// (post to retiring wait) on its send and recv tracks; waits show as gaps. A training
// step's collectives (FSDP's, the TP group's) and pipeline exchanges show on the send
// track as the time blocked in them, named as the simulator names its collectives
// ("all-gather", "TP reduce-scatter", "pipeline exchange"). `plan_path` goes into the
// metadata.
void write_measurements_trace(const std::vector<Measurement>& records, const std::string& path,
                              const std::string& plan_path);

// Sends this rank's records to rank 0 (MPI_COMM_WORLD); rank 0 returns everyone's,
// sorted by (iteration, rank, op); other ranks return an empty list.
std::vector<Measurement> gather_measurements(const std::vector<Measurement>& mine);

}  // namespace rm::exec
