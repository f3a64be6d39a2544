// The order in which each pipeline stage runs its micro-batches (1F1B), and the exchanges
// between neighbouring stages, as the schedule generator emits them (schedule.h). The
// cost model prices the same order in closed form (pipeline_parallel.h).
//
// Stage s of p runs Megatron-LM's forward_backward_pipelining_without_interleaving over m
// micro-batches: W = min(p - s - 1, m) warm-up forwards, then m - W steady iterations of
// one forward and one backward, then W cool-down backwards. Every stage-to-stage transfer
// is a blocking exchange with one neighbour, as Megatron's p2p_communication calls are
// (one batch_isend_irecv, then wait), so a stage never waits on two neighbours at once:
//   warm-up      recv_forward (up), F(i), send_forward (down)
//   steady       F(W+i), send_forward_recv_backward (down), B(i),
//                send_backward_recv_forward (up; the last iteration send_backward only)
//   cool-down    recv_backward (down), B(i), send_backward (up)
// (the first stage has no up neighbour, the last no down one). The n-th down exchange of
// stage s and the n-th up exchange of stage s + 1 carry the same messages, the activation
// of micro-batch a forward and the gradient of micro-batch b backward.
//
// Exchanges are numbered in an order both ends of each exchange agree on and in which every
// stage meets its own in program order (the order a run of the stages with blocking
// exchanges completes them): the message contract's phase (op_list.h) derives from it.
//
// Forward-only workloads: every stage runs recv_forward, F(i), send_forward for each i.
#pragma once

#include <cstdint>
#include <vector>

namespace rm {

struct PipelineAction {
  enum Kind { kForward, kBackward, kExchange };
  Kind kind = kForward;
  int micro = -1;      // kForward, kBackward: the micro-batch
  // kExchange: with the stage before (up) or after (down); the micro-batch whose
  // activation (down) or input gradient (up) it sends, and whose output gradient (down) or
  // activation (up) it receives, -1 for none.
  bool up = false;
  int send = -1;
  int recv = -1;
  int number = -1;     // the exchange's number, the same at both ends (see above)
};

// Each stage's program: pp lists (pp >= 1, microbatches >= 1). `backward`: a training step
// (else forwards only). Exchange numbers run 0 .. exchanges - 1.
struct PipelineProgram {
  std::vector<std::vector<PipelineAction>> stages;
  int exchanges = 0;
};
PipelineProgram pp_1f1b_program(int pp, int64_t microbatches, bool backward);

}  // namespace rm
