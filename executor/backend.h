// The backend interface the ring loop drives: tensors, blockwise attention kernels and
// point-to-point transfers for ONE rank. The ring loop (ring_loop.h) walks this rank's op
// list from generate_schedule() and calls a backend for each op; a backend knows nothing
// about schedules, orders or load balance. Backends: `cpu` (MPI + Eigen, fp32; this
// folder) and `cuda` (NCCL + CUDA kernels, bf16 in / fp32 accumulate; executor/cuda/).
//
// Shapes (one sequence per ring; letters as in planner/plan.h):
//   c     tokens this rank holds (N / P)      d     head dim
//   h     query heads                         h_kv  key/value heads; query head j reads
//                                                   kv head j / (h / h_kv) (GQA)
// Logical tensor layouts (head-major, row-major; the HostTensors below use exactly these):
//   Q, dO, out, dQ   [h][c][d]        K, V, dK, dV   [h_kv][c][d]        lse, D   [h][c]
// Every rank's tokens are global token indices (TokenLayout::global_index), increasing;
// the causal mask is "key index <= query index" on those global indices, and a sliding
// window W adds "query index - W < key index".
//
// Buffers. Local tensors (Q, dO, out, lse, dQ, the rank's own K, V and its final dK, dV)
// live inside the backend. The schedule's buffers (ids into Schedule::buffers) are the
// ones that travel or hold partial results, and have one of three contents:
//   kKv   K then V of one block                       (2 * h_kv * c * d elements)
//   kDkv  dK then dV of one block, always fp32        (2 * h_kv * c * d floats)
//   kA2a  one member's message of an all-to-all (a2a): a2a_bytes() of its largest payload
// Transfers move a byte range [offset, offset + bytes) of a buffer; bytes_of() gives the
// whole buffer's size in the backend's own element types, so the ring loop can split a
// transfer into sub-blocks without knowing them.
//
// Ordering and timing. Kernels and copies return when their result is complete (the
// CUDA backend synchronises its compute stream), so the ring loop's clock brackets each
// compute op. isend/irecv only post the transfer and return a request; wait() blocks
// until it completes. A backend never reads or writes a buffer with a transfer in flight
// except as the schedule says (double buffering is the schedule's job).
//
// Thread safety: one backend per rank, driven from one thread. The watchdog thread of
// the ring loop never calls into the backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/attention_work.h"
#include "planner/op_list.h"
#include "planner/token_layout.h"

namespace rm::exec {

// How the backend stores a schedule buffer (planner/op_list.h's BufferRole says what it
// holds; the ring loop maps kKvOwn and kKvRing to kKv, the dK,dV roles to kDkv).
enum class BufferRole { kKv, kDkv, kA2a };

// What one rank computes: the shapes and the kernel's tile sizes from the plan.
struct AttentionShape {
  int64_t c = 0;
  int d = 0;
  int h = 0;
  int h_kv = 0;
  int block_q = 128;   // query tile of the blockwise kernel
  int block_kv = 128;  // key/value tile of the blockwise kernel
  bool causal = true;
  int64_t window = 0;  // causal only: the model's sliding window W (effective_window; 0 = none)
  // A rank's c tokens form this many equal runs that tiles never cross: 2 for zigzag
  // (its two half-chunks, tiled separately as in attention_work.h), 1 otherwise.
  int segments = 1;
};

}  // namespace rm::exec
namespace rm {
struct Plan;
struct ModelSpec;
}  // namespace rm
namespace rm::exec {

// The attention a plan runs on every rank: c = N / cp tokens, the heads of one TP member
// (all of the model's with tp 1), the plan's tiles and mask, zigzag's two segments.
AttentionShape plan_attention_shape(const Plan& plan, const ModelSpec& model);
// The token layout of the plan's rings (planner/token_layout.h): N / ring size tokens per
// position, the ring size cp, or cp / cp_a2a for a2a+p2p (its p2p ring over the blocks
// its all-to-all groups hold).
TokenLayout ring_token_layout(const Plan& plan);
// a2a+p2p: member i of a ring position's all-to-all group holds the i-th of `members` equal
// consecutive slices of the position's tokens, so the group's head-sharded view is the
// position's block, in the order the ring's kernels need.
std::vector<int64_t> member_slice(const std::vector<int64_t>& position_tokens, int members, int i);
// The global token indices a rank holds: its ring position's (a2a+p2p: member
// `a2a_index`'s slice of them; planner/op_list.h's a2a_member).
std::vector<int64_t> rank_token_indices(const Plan& plan, int position, int a2a_index = 0);
// The replica (CP group, 0..dp-1) GPU `rank` belongs to, by the plan's order: the
// data-parallel ring, or a2a+p2p's group of cp_a2a rings. Inputs and data go by replica.
int plan_replica(const Plan& plan, int rank);

// Deterministic inputs: element (head, global token t, dim) of tensor `which` is a
// uniform value in [-1, 1) hashed from (seed, which, head, t, dim), so any process (the
// reference in verify.cc, another backend) regenerates exactly the same tensors from
// the global token indices alone. Every backend must initialise its inputs with this.
enum class InputTensor : uint32_t { kQ = 1, kK = 2, kV = 3, kDout = 4 };
// splitmix64 (Steele, Lea, Flood 2014): a cheap, well-mixed 64-bit hash, so inputs (and
// train's initial weights and synthetic tokens) are reproducible from a seed and indices
// with no generator state.
uint64_t splitmix64(uint64_t x);
float input_value(uint64_t seed, InputTensor which, int head, int64_t token, int dim);

// One rank's tensors copied to the host in fp32, layouts as above; for verification.
struct HostTensors {
  std::vector<int64_t> tokens;  // c global token indices of this rank
  std::vector<float> q, k, v, dout;
  std::vector<float> out, lse;
  // a2a, a2a+p2p: lse stays head-sharded, [h/n][rows] of query heads from lse_first_head
  // on, its rows the global tokens lse_tokens (-1 and empty: lse is [h][c] as above).
  int lse_first_head = -1;
  std::vector<int64_t> lse_tokens;
  std::vector<float> dq, dk, dv;  // empty when the backward pass did not run
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Sizes the local tensors and fills Q, K, V, dO of this rank's `tokens` (size c) with
  // input_value(seed, ...). Called once before any other call.
  virtual void setup(const AttentionShape& shape, const std::vector<int64_t>& tokens,
                     uint64_t seed) = 0;
  // The ranks of this rank's ring (its process group), in ring-position order, this rank
  // included; once after setup() and before the first transfer, and every member makes
  // the same call with the same list (it may be collective). Transfers go to members
  // only. The cuda backend creates the ring's NCCL communicator here
  // (executor/cuda/nccl_transport.h); the cpu backend needs nothing.
  virtual void connect(const std::vector<int>& group) { (void)group; }
  // The largest relative error (verify.h's measure) `--verify` accepts from this
  // backend's arithmetic: kVerifyTolerance for fp32; more for bf16 inputs (cuda).
  virtual double verify_tolerance() const;

  // --- schedule buffers -------------------------------------------------------------
  virtual void alloc(int buffer, BufferRole role) = 0;
  virtual void free(int buffer) = 0;
  virtual std::size_t bytes_of(int buffer) const = 0;
  // Copy this rank's own K, V into a kKv buffer (the block a position starts with).
  virtual void load_own_kv(int buffer) = 0;
  // Set a kDkv buffer to zero (an accumulator's start).
  virtual void zero(int buffer) = 0;

  // --- kernels (FLOPs executed are the tile-granular ones the schedule states) -------
  // Before a forward pass: out = 0, lse = -inf.
  virtual void begin_forward() = 0;
  // Blockwise attention of the local Q against the K, V in `kv_buffer`, whose tokens
  // are `kv_tokens` (size c, global, increasing), at the shape's tile sizes, softmax
  // scale 1/sqrt(d); tiles the causal mask hides entirely are skipped. The block's
  // (o, l) is merged into (out, lse) with the log-sum-exp rule:
  //   lse' = log(exp(lse) + exp(l)),  out' = out * exp(lse - lse') + o * exp(l - lse').
  virtual void attention_forward(int kv_buffer, const std::vector<int64_t>& kv_tokens) = 0;
  // Before a backward pass (after the forward pass): dQ = 0, D = rowsum(dO * out).
  virtual void begin_backward() = 0;
  // FlashAttention-2 backward of the block in `kv_buffer`: recomputes P from lse,
  // dQ += dS K * scale (local), and writes the block's partial dK, dV into the kDkv
  // buffer `dkv_buffer` (overwritten, not accumulated).
  virtual void attention_backward(int kv_buffer, const std::vector<int64_t>& kv_tokens,
                                  int dkv_buffer) = 0;
  // dst += src, both kDkv buffers.
  virtual void accumulate(int dst_buffer, int src_buffer) = 0;
  // This rank's final dK, dV (+)= the kDkv buffer (its own block's accumulator, back
  // home after the ring; `add` for the second stream of a bidirectional ring).
  virtual void take_own_dkv(int buffer, bool add) = 0;

  // The tiles the kernel of a forward or backward pass really runs for the shape's
  // requested ones (the cuda kernels round to their instantiations and the backward uses
  // its own): what the measurements record and the kernel curve is fitted on.
  virtual AttentionTiles tiles_run(bool backward) const = 0;

  // --- all-to-all CP (a2a, a2a+p2p; planner/op_list.h's A2aPayload) --------------------
  // The group's P members (a2a: the ring; a2a+p2p: a ring position's a2a group) each hold
  // c tokens of every head, as above. Between a pass's two all-to-alls member m holds the
  // group's P * c tokens, by increasing global index, of query heads [m h/P, (m+1) h/P) and
  // K,V heads [m h_kv/P, (m+1) h_kv/P) (P divides both): the head-sharded view, which stays
  // on the rank (its lse, and, from the forward to the backward, its Q, K, V, out, as
  // FlashAttention saves them). a2a's attention runs on it whole (a2a_attention_*); under
  // a2a+p2p the ring's kernels above (load_own_kv, attention_*, take_own_dkv) work on it
  // once a2a_connect() has been called, the view being the ring position's block. The base
  // class throws: a backend that does not implement them cannot run a2a or a2a+p2p.
  //
  // Once, after connect(), when the op list has all-to-alls: this rank is member `me`,
  // member j holds tokens member_tokens[j] (c each).
  virtual void a2a_connect(int me, const std::vector<std::vector<int64_t>>& member_tokens);
  // Bytes of one member's message of `what` (a kA2a buffer holds the largest, kQkv's).
  virtual std::size_t a2a_bytes(A2aPayload what) const;
  // blocks[j]: the staging block for member j. pack lays out this rank's part of `what` for
  // every other member into its block and moves its own share straight into place;
  // unpack takes every other member's block into place. Message layouts (row-major):
  //   kQkv   [h/P][c][d] Q, then [h_kv/P][c][d] K, then V: this rank's tokens of j's heads
  //   kDout  [h/P][c][d] dO, likewise
  //   kOut   [h/P][c][d] out: j's tokens of this rank's heads
  //   kDqkv  [h/P][c][d] dQ, then [h_kv/P][c][d] dK, then dV, likewise (dK, dV: the rank's
  //          own, as take_own_dkv would set them)
  // The kDout unpack also computes the view's D = rowsum(dO * out) and zeroes its dQ, dK,
  // dV (begin_backward() does it for the rank's own tensors, before dO has arrived).
  virtual void a2a_pack(A2aPayload what, const std::vector<int>& blocks);
  virtual void a2a_unpack(A2aPayload what, const std::vector<int>& blocks);
  // Attention over the head-sharded view, at the shape's tiles and mask: the forward sets
  // its out and lse; the backward (after the kDout unpack) its dQ, dK, dV.
  virtual void a2a_attention_forward();
  virtual void a2a_attention_backward();
  // Training: the head-sharded tensors a layer's backward reads (Q, K, V, out, lse), copied
  // out after its forward and back in before its backward when no recompute pass rebuilds
  // them, as autograd keeps each layer's saved tensors (executor/ring_attention.h).
  virtual void a2a_save(std::vector<float>& saved) const;
  virtual void a2a_restore(const std::vector<float>& saved);

  // --- transfers ----------------------------------------------------------------------
  // Transfers pair by posting order on each link, never by tag (the message contract,
  // planner/op_list.h): the n-th isend to a peer meets the peer's n-th irecv from this
  // rank, and a transport checks that both name the same tag and size. The transfers of
  // one posting phase come between begin_phase() and end_phase() (cuda: one
  // ncclGroupStart/End on the communication stream); no wait() comes between them.
  virtual void begin_phase() {}
  virtual void end_phase() {}
  // Post a non-blocking send / receive of bytes [offset, offset + bytes) of `buffer`
  // to / from rank `peer`, stating the schedule's `tag`; returns a request handle (>= 0).
  virtual int isend(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) = 0;
  virtual int irecv(int buffer, std::size_t offset, std::size_t bytes, int peer, int tag) = 0;
  // Block until the request completes; the handle is then invalid.
  virtual void wait(int request) = 0;

  // --- clock and results --------------------------------------------------------------
  // Seconds on a monotonic clock (MPI_Wtime for cpu), comparable within one rank.
  virtual double now() const = 0;
  // Block until everything posted so far on this rank's devices has finished.
  virtual void synchronize() = 0;
  // This rank's inputs and results, for verification (after the ring loop).
  virtual HostTensors download() const = 0;
  // --- training (executor/ring_attention.h) -----------------------------------------
  // One layer's tensors of one sequence, fp32 in the layouts above and the sizes set up,
  // in the memory of this backend's device as the train kernels allocate them
  // (train_kernels.h: host memory for cpu, the rank's GPU for cuda), so they never leave
  // the device. load() replaces the inputs with them: Q, K, V and, when not null, dO, out
  // and lse (a backward pass after a forward pass of other inputs). After a forward pass
  // store_forward() writes out and lse, after a backward pass store_backward() dQ, dK, dV.
  // The base class throws: a backend that does not implement them cannot train.
  virtual void load(const float* q, const float* k, const float* v, const float* dout,
                    const float* out, const float* lse);
  virtual void store_forward(float* out, float* lse) const;
  virtual void store_backward(float* dq, float* dk, float* dv) const;
};

// Throws std::runtime_error "<backend> backend: a K,V block of N tokens, expected M" unless
// an attention op's `kv_tokens` has one token per K,V row the backend holds: both backends
// index their kernels with it, so a ring loop that named another block's layout is an
// error on the cpu, as on the device, not a read past the list.
inline void check_kv_tokens(const char* backend, std::size_t tokens, std::size_t expected) {
  if (tokens != expected)
    throw std::runtime_error(std::string(backend) + " backend: a K,V block of " + std::to_string(tokens) +
                             " tokens, expected " + std::to_string(expected));
}

// Backends by name ("cpu", "cuda"). Throws InputError naming the backend when it is
// unknown or was not built (cuda without nvcc/NCCL at configure time). Backends that
// talk to peers use MPI_COMM_WORLD (MPI is initialised before this is called).
std::unique_ptr<Backend> make_backend(const std::string& name);
// The same check without constructing the backend (before ranks are launched).
void check_backend_available(const std::string& name);

// Each backend's factory; make_backend dispatches to them.
std::unique_ptr<Backend> make_cpu_backend();   // executor/cpu_backend.cc
// (cuda: executor/cuda/, reached through cuda_module.h)

}  // namespace rm::exec
