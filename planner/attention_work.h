// The work the ring does: attention FLOPs per (query block, K,V block) pair, bytes per
// ring transfer, and the linear layers' FLOPs per token. The one source of these numbers:
// the cost model sums them in closed form, the schedule generator puts them on its ops,
// so planner and simulator agree on contention-free cases.
//
// Shapes (plan.h): c tokens per rank, d head dim, h query heads, h_kv key/value heads,
// P ring size. FLOPs are per sequence, per layer, forward unless named backward.
//
// Attention FLOPs of a pair: 4·d·h per (query, key) pair the kernel touches (Q·Kᵀ and P·V,
// 2 FLOPs per multiply-add each). "useful" counts the unmasked pairs only (what MFU counts);
// "executed" counts what a tiled kernel runs: the local block is cut into block_q x block_kv
// tiles (the last tile of a dimension is ragged), fully masked tiles are skipped and partly
// masked ones computed whole. For zigzag each position's block is two half-chunks that the
// kernel tiles separately (as ring-flash-attention's zigzag does). Backward FLOPs =
// kBackwardFlopsFactor (2.5, kernel_efficiency.h) times forward; its time is the curve's
// measured backward_factor times the forward's.
//
// Sliding window W (ModelSpec::sliding_window; `window` 0 = none, ignored unless causal):
// query i attends keys j with i - W < j <= i; tiles wholly outside the band are skipped like
// masked ones, and the ring needs only the steps whose blocks hold a pair in the band.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/token_layout.h"

namespace rm {

struct AttentionTiles {
  int block_q = 128;
  int block_kv = 128;
};

struct PairFlops {
  double useful = 0;    // unmasked (query, key) pairs x 4·d·h
  double executed = 0;  // tile-granularity pairs x 4·d·h
};

// Forward FLOPs of the query block of ring position q_pos against the K,V block of
// position kv_pos (all heads). O(log c) per call (closed forms, no per-token loops).
PairFlops attention_pair_flops(const TokenLayout& layout, int q_pos, int kv_pos, bool causal,
                               int heads, int head_dim, const AttentionTiles& tiles,
                               int64_t window = 0);

// What the lockstep ring needs per layer, forward, for one sequence: at step 0 every
// position computes against its own block; at every step s > 0 the slowest position does
// `step_executed_max` (the same for every s > 0 in all three load balances, see the .cc),
// so a flat ring's attention compute is own_executed_max + (P-1)·step_executed_max.
// With a sliding window the steps differ: `steps` (<= P) is 1 + the last step at which
// some position holds a block with a pair in the window (contiguous: min(P, ceil((W-1)/c)
// + 1), the ring stops there), step_executed[s-1] is step s's work of the busiest position
// (whose compute the plan reports): contiguous, the last (the most at every step); striped
// and zigzag, whose positions work at different steps, the one with the most work in all
// (its own block's in own_executed_max); and position_step_executed has every position's.
struct RingAttentionWork {
  double own_executed_max = 0;   // step 0, max over positions (see above for a window)
  double step_executed_max = 0;  // any step s > 0, max over positions
  double useful_total = 0;       // sum over all P x P pairs (the whole sequence)
  double executed_total = 0;     // sum over all pairs
  int steps = 1;                 // ring steps needed (P without a window)
  std::vector<double> step_executed;  // window only: steps 1..steps-1, as above
  // Window only: every position's work at each step, [position · steps + step].
  std::vector<double> position_step_executed;
};
// O(1) calls of the closed forms without a window; O(steps) with one (contiguous), O(P²)
// for striped and zigzag under a window.
RingAttentionWork ring_attention_work(const TokenLayout& layout, bool causal, int heads,
                                      int head_dim, const AttentionTiles& tiles,
                                      int64_t window = 0);

// What position q_pos's forward merge of its partial against kv_pos's block covers
// (CostParams::merge_s): a share of its c·h·d output elements, and whether into a slice of
// the output, which update_out_and_lse(..., slice_) in ring-flash-attention merges apart
// and writes back. Causal and kv_pos > q_pos: striped runs q[:, 1:] against k[:, :-1]
// (stripe_flash_attn.py; the whole output less a row, taken as whole), zigzag the second
// half of the queries against the whole block (zigzag_ring_flash_attn.py: q1, half the
// output). Every other block merges the whole output in place. Position 0 merges a slice
// at every later ring step.
struct ForwardMerge {
  double share = 1;
  bool sliced = false;
};
ForwardMerge forward_merge(const TokenLayout& layout, bool causal, int q_pos, int kv_pos);

// Unmasked (query, key) pairs of a whole sequence: N² or N(N+1)/2; with a window W < N
// (causal) W(W+1)/2 + (N-W)·W.
double attention_pairs(int64_t seq_len, bool causal, int64_t window = 0);

// The window that applies to `job`: the model's sliding_window when the job is causal and
// the window is shorter than the sequence, else 0 (a window >= N masks nothing more).
int64_t effective_window(const ModelSpec& m, const Job& job);
// Contiguous blocks of c tokens a query block needs under window W (its own included):
// min(P, ceil((W-1)/c) + 1); P without a window.
int window_blocks(int64_t c, int64_t window, int P);
// Blocks a position attends to, its own included (all_gather gathers these; the memory
// model holds them): fewer than P only for contiguous chunks under a window, since striped
// and zigzag spread the window over every block.
int all_gather_blocks(const PlanChoice& choice, int64_t c, int64_t window);

// Bytes of one K,V block: 2·c·d·h_kv·element_bytes.
double kv_block_bytes(int64_t c, const ModelSpec& m, int element_bytes);
// Bytes of one dK,dV accumulator block, fp32: 2·c·d·h_kv·4.
double dkv_block_bytes(int64_t c, const ModelSpec& m);

// Linear layers, FLOPs per token (2 per multiply-add). Backward = 2 x forward (grads of
// inputs and of weights).
struct LinearFlops {
  double qkv = 0;       // 2·hidden·(h·d + 2·h_kv·d)
  double out_proj = 0;  // 2·h·d·hidden
  double ffn = 0;       // gated: 3 matrices (2·3·hidden·f); plain: 2 matrices
  double ffn_recompute_selective = 0;  // FFN up (and gate) projections, redone under selective
  double logits = 0;    // 2·hidden·vocab, once per model (not per layer)
  double layer() const { return qkv + out_proj + ffn; }
};
LinearFlops linear_flops_per_token(const ModelSpec& m);
inline constexpr double kLinearBackwardFactor = 2.0;

// Memory-bound work outside the GEMMs and the attention kernel, in HBM bytes per token,
// counted from the reads and writes of each op as PyTorch runs them unfused:
//   layer forward: two RMSNorms (read and write `hidden`), two residual adds (read two,
//   write one), rotary embedding of Q and K (read and write), the FFN activation (SwiGLU:
//   read gate and up, write one; plain: read and write);
//   loss: the logits (bf16 write) upcast and softmax in fp32 (read, write) and its gradient
//   (fp32 write): 14 bytes per vocabulary entry, 10 without the backward.
// Backward passes move about twice the forward's (gradients in, saved inputs read again).
// `eager`: the layer's ops as PyTorch runs them eagerly, one kernel each, as torchtitan's
// Llama does without torch.compile (pytorch/torchtitan torchtitan/models/llama/model.py
// @ 6d74b81c7179f2ae06f54ec0d212b606a47e2257 and its RMSNorm in models/norms.py), per element:
//   RMSNorm x2: x.float() (read 2, write 4), pow (4, 4), mean (4), x * rsqrt (4, 4),
//     type_as (4, 2), * weight (2, 2): 36 bytes over `hidden`;
//   rotary on Q and K: .float() (2, 4), complex multiply (4, 4), type_as (4, 2): 20 bytes;
//   repeat_kv (GQA): K and V copied out to `heads` (read h_kv·d, write h·d, bf16 each);
//   the attention output's .transpose(1, 2).contiguous() (read 2, write 2 over h·d);
//   SwiGLU: silu (2, 2) then * w3(x) (2, 2, 2) over f: 10 bytes; residual adds as fused.
// torch.compile fuses these back to about the fused count (torchtitan's H100 benchmark:
// compile alone +15.7 % on 8 GPUs, Llama 3.1 8B, validation/published.yaml).
// `fp8`: float8 linear layers add their casts (linear_precision.h's
// fp8_cast_bytes_per_token_layer, forward and backward together): a third of them in
// layer_fwd, which callers charge 1 + kElementwiseBackwardFactor = 3 times.
struct ElementwiseBytes {
  double layer_fwd = 0;  // per token, one layer's forward
  double loss_fwd = 0;   // per token, logits and loss forward
  double loss_bwd = 0;   // per token, loss backward
};
ElementwiseBytes elementwise_bytes_per_token(const ModelSpec& m, int element_bytes, bool eager = false,
                                             Fp8Recipe fp8 = Fp8Recipe::kNone);
inline constexpr double kElementwiseBackwardFactor = 2.0;

// Linear-layer FLOPs per token per layer redone in the backward pass by the checkpointing
// policy: none 0; selective the FFN up/gate projections (its intermediates are not stored,
// see memory_model.h); full the whole layer forward. Attention recompute under `full`
// (a whole forward ring pass) is counted by the cost model from RingAttentionWork.
double linear_recompute_flops_per_token(const ModelSpec& m, Checkpointing ckpt);

// What the cost model charges per token for a forward and backward pass of the whole
// model outside the attention kernel (cost_model.cc: layer_times' linear_fwd/linear_bwd
// summed over the layers, and the logits term): GEMM FLOPs (layers' forward, backward
// kLinearBackwardFactor x forward, the recompute of `ckpt`; logits 3 x forward) and
// elementwise bytes (layers' forward x (1 + kElementwiseBackwardFactor, + 1 recomputed
// under full); loss forward + backward). The executor labels its measured linear and
// elementwise time with these, so calibration fits the cost model's own rates.
struct TokenStepWork {
  double gemm_flops = 0;
  double elementwise_bytes = 0;
};
TokenStepWork token_step_work(const ModelSpec& m, Checkpointing ckpt, int element_bytes);

}  // namespace rm
