// Blockwise attention kernels of the cpu backend: fp32, Eigen GEMMs on tiles, one query
// head against one key/value head. The backend loops over heads (GQA mapping) and over
// the ring's blocks; these functions only see one block.
//
// Shapes (row-major, contiguous): q, dout, o, dq  [cq][d];  k, v, dk, dv  [ck][d];
// l, lse, D  [cq];  q_tok [cq], k_tok [ck] are global token indices, increasing.
// Tiles are block_q x block_kv (the last ones may be smaller). With `causal`, a key is
// visible to a query when k_tok <= q_tok, and with a sliding window W > 0 also
// q_tok - W < k_tok (ModelSpec::sliding_window); tiles with no visible pair are skipped,
// tiles with some are computed whole and masked. Softmax scale: `scale` (1/sqrt(d)).
#pragma once

#include <limits>

#include <cstdint>
#include <functional>

namespace rm::exec {

// The log-sum-exp of a query that has seen no key yet (and the mask value).
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct TileShape {
  int block_q = 128;
  int block_kv = 128;
  bool causal = true;
  int64_t window = 0;  // causal only: the sliding window W (0 = none)
  // Called after every computed tile when set: the cpu backend drives MPI progress there,
  // so a transfer posted before the kernel moves while it computes (Open MPI moves large
  // shared-memory messages only inside MPI calls).
  std::function<void()> between_tiles;
};

// Forward with online softmax over the kv tiles. Writes the block's normalised output
// o and its log-sum-exp l (l = -inf and o = 0 for a query that sees no key of the
// block). Returns the FLOPs executed (4 * tq * tkv * d per computed tile).
double attention_block_forward(const float* q, const int64_t* q_tok, int64_t cq,
                               const float* k, const float* v, const int64_t* k_tok, int64_t ck,
                               int d, float scale, const TileShape& tiles, float* o, float* l);

// Merge a block's (o, l) into the running (out, lse), rows x d, with the log-sum-exp
// rule: lse' = log(exp(lse) + exp(l)); out' = out exp(lse - lse') + o exp(l - lse').
void merge_out_lse(float* out, float* lse, const float* o, const float* l, int64_t rows, int d);

// FlashAttention-2 backward for one block: recomputes P = exp(S * scale - lse) per tile,
// then dV += P^T dO, dP = dO V^T, dS = P (dP - D), dQ += scale dS K, dK += scale dS^T Q.
// D = rowsum(dO * out) of the final forward output. dq, dk, dv are accumulated (+=).
// Returns the FLOPs executed (10 * tq * tkv * d per computed tile = 2.5 x forward).
double attention_block_backward(const float* q, const float* dout, const float* lse,
                                const float* D, const int64_t* q_tok, int64_t cq,
                                const float* k, const float* v, const int64_t* k_tok, int64_t ck,
                                int d, float scale, const TileShape& tiles, float* dq,
                                float* dk, float* dv);

}  // namespace rm::exec
