// The order in which each pipeline stage runs its micro-batches (1F1B, interleaved 1F1B),
// and the exchanges between stages, as the schedule generator emits them (schedule.h). The
// cost model prices the same orders in closed form (pipeline_parallel.h).
//
// 1F1B (v = 1): stage s of p runs Megatron-LM's forward_backward_pipelining_without_
// interleaving over m micro-batches: W = min(p - s - 1, m) warm-up forwards, then m - W
// steady iterations of one forward and one backward, then W cool-down backwards. Every
// stage-to-stage transfer is a blocking exchange with one neighbour, as Megatron's
// p2p_communication calls are (one batch_isend_irecv, then wait):
//   warm-up      recv_forward (up), F(i), send_forward (down)
//   steady       F(W+i), send_forward_recv_backward (down), B(i),
//                send_backward_recv_forward (up; the last iteration send_backward only)
//   cool-down    recv_backward (down), B(i), send_backward (up)
// (the first stage has no up neighbour, the last no down one).
//
// Interleaved 1F1B (v > 1; Megatron's forward_backward_pipelining_with_interleaving, pp > 2
// as Megatron requires): stage s holds chunks c = 0..v-1, virtual stages c·p + s. Virtual
// micro-batch k (0..m·v-1) is micro-batch (k / (p·v))·p + k mod p of chunk (k mod p·v) / p
// forward, of chunk v - 1 - that backward. W = min(2·(p - s - 1) + (v - 1)·p, m·v) warm-up
// forwards (all m·v when m = p), then steady iterations of one forward and one backward,
// then the cool-down backwards; after each compute one exchange with both neighbours at
// once (send_forward_recv_forward, send_forward_backward_recv_forward_backward,
// send_backward_recv_backward), receiving for later iterations as Megatron's recv_prev /
// recv_next flags say. Activations go from stage s to s + 1 (the last stage's to the
// first, for the next chunk), gradients the other way.
//
// A message's tag is micro-batch·v + the sender's chunk; each directed link carries one
// kind (activations, or gradients), in the order both ends post them. Each message's
// phase is the order in which a run of the stages with blocking exchanges pairs it (both
// ends state it, and every stage meets its own in increasing order): the message
// contract's phase (op_list.h) derives from it.
//
// Forward-only workloads: every stage runs its forwards, each followed by its exchange.
#pragma once

#include <cstdint>
#include <vector>

namespace rm {

struct PipelineMessage {
  int peer = 0;       // the other stage
  bool send = false;  // this stage sends it (else receives it)
  bool gradient = false;  // an input gradient going up (else an activation going down)
  int tag = 0;        // micro-batch·v + the sender's chunk
  int phase = 0;      // the order it pairs in (see above), the same at both ends
};

struct PipelineAction {
  enum Kind { kForward, kBackward, kExchange };
  Kind kind = kForward;
  int micro = -1;  // kForward, kBackward: the micro-batch and the stage's chunk
  int chunk = 0;
  std::vector<PipelineMessage> messages;  // kExchange: by phase
};

// Each stage's program: pp lists (pp >= 1, virtual_stages >= 1 with pp > 2 when > 1,
// microbatches >= 1 and a multiple of pp when interleaved). `backward`: a training step
// (else forwards only). Phases run 0 .. messages - 1 over the whole pipeline. Throws
// std::logic_error if the stages' programs disagree or would deadlock (a bug).
struct PipelineProgram {
  std::vector<std::vector<PipelineAction>> stages;
  int messages = 0;
};
//
// The interleaved warm-up with as many micro-batches as stages is the framework's:
// Megatron-LM's schedule then runs every forward first (and a plan for no framework runs
// as Megatron's); torch.distributed.pipelining's ScheduleInterleaved1F1B (torchtitan) keeps
// its count (_get_warmup_ops, capped at m·v only). The rest of the order is the same.
enum class InterleavedWarmup { kMegatron, kTorch };
PipelineProgram pp_1f1b_program(int pp, int virtual_stages, int64_t microbatches, bool backward,
                                InterleavedWarmup warmup);

// The forwards stage `stage` runs before its first backward, in chunk micro-batches
// (Megatron's num_warmup_microbatches, torch's warmup_ops): 1F1B min(p - s - 1, m),
// interleaved min(2·(p - s - 1) + (v - 1)·p, m·v); all of them forwards only, and
// interleaved with m = p under Megatron's rule.
int64_t pp_warmup_forwards(int pp, int virtual_stages, int64_t microbatches, int stage, bool backward,
                           InterleavedWarmup warmup);

}  // namespace rm
