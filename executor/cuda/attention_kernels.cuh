// Blockwise attention kernels for the cuda backend: one Q chunk against one K,V block, as
// the ring loop needs them (forward with the (out, lse) merge, FlashAttention-2 backward),
// bf16 in, fp32 accumulate, on tensor cores (mma.sync m16n8k16, sm_80 and sm_90).
//
// Shapes (letters as in planner/plan.h; one sequence per ring):
//   c_q   query tokens of this rank        c_kv  tokens of the K,V block
//   d     head dim (32, 64 or 128)          h, h_kv  query / key-value heads (GQA:
//                                                     query head j reads kv head j / (h / h_kv))
// Device layouts (head-major, row-major, the executor's logical layouts):
//   q, dout [h][c_q][d] bf16      k, v [h_kv][c_kv][d] bf16
//   out, dq [h][c_q][d] fp32      lse, delta [h][c_q] fp32     dk, dv [h_kv][c_kv][d] fp32
//   q_tok [c_q], kv_tok [c_kv] int32: global token indices, increasing. Causal mask: key
//   token <= query token. Tiles whose pairs are all masked are skipped; since the tokens
//   increase, they are always the trailing K,V tiles of a Q tile (leading Q tiles of a
//   K,V tile), which is how each kernel bounds its loop.
//
// Every launcher checks its launch and throws CudaError naming the op, file and line (and
// the error context, e.g. "rank 3"). Launchers are asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace rm::gpu {

using bf16 = __nv_bfloat16;

// A CUDA (or NCCL) failure: "<op> failed on <context>: <reason> (<file>:<line>)".
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Names the rank (or test) in every CudaError raised on this thread: the backend of each
// virtual rank of the local transport runs on its own thread.
void set_error_context(const std::string& context);
const std::string& error_context();

[[noreturn]] void throw_cuda_error(const char* op, const std::string& reason, const char* file,
                                   int line);
inline void check_cuda(cudaError_t e, const char* op, const char* file, int line) {
  if (e != cudaSuccess) throw_cuda_error(op, cudaGetErrorString(e), file, line);
}
#define RM_CUDA_CHECK(expr, op) ::rm::gpu::check_cuda((expr), (op), __FILE__, __LINE__)
// After a kernel launch: the launch error (bad configuration, no device, ...).
#define RM_CUDA_CHECK_LAUNCH(op) ::rm::gpu::check_cuda(cudaGetLastError(), (op), __FILE__, __LINE__)

// Kernel tile sizes. The forward kernel runs query tiles of 64 or 128 rows against K,V
// tiles of 64 or 128 keys (the plan's block_q / block_kv rounded to those); the backward
// kernels use fixed tiles per head dim (see attention_kernels.cu).
struct Tiles {
  int block_q = 128;
  int block_kv = 128;
};
// The tiles the forward kernel really runs for a request (what the measurements record).
Tiles forward_tiles(Tiles requested);
// The tiles of the backward's dQ kernel (its dK,dV kernel tiles keys by 64 and queries by
// 64 or 32, see attention_kernels.cu); whatever the plan requested.
Tiles backward_tiles();
// Head dims the kernels are instantiated for.
bool head_dim_supported(int d);

struct AttentionDims {
  int h = 0, h_kv = 0, d = 0;
  int c_q = 0, c_kv = 0;
  // The tokens of each side are this many equal runs that tiles never cross (2 for
  // zigzag's two half-chunks, see planner/attention_work.h), so the tiles, and the FLOPs
  // they execute, are the ones the schedule counts.
  int segments = 1;
  bool causal = true;
  float scale = 0;  // softmax scale, 1/sqrt(d)
};

// (out, lse) of Q against the block, merged into the running (out, lse) by the
// log-sum-exp rule when `merge`, else written (rows with no unmasked key: out 0, lse -inf).
void attention_forward(const AttentionDims& dims, Tiles tiles, const bf16* q, const bf16* k,
                       const bf16* v, const int32_t* q_tok, const int32_t* kv_tok, float* out,
                       float* lse, bool merge, cudaStream_t stream);

// delta[h][c_q] = rowsum(dout * out), once per backward pass.
void attention_backward_prep(const AttentionDims& dims, const bf16* dout, const float* out,
                             float* delta, cudaStream_t stream);

// dq += dS K * scale; dk, dv = the block's partial gradients (overwritten).
void attention_backward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* dout, const float* lse, const float* delta,
                        const int32_t* q_tok, const int32_t* kv_tok, float* dq, float* dk,
                        float* dv, cudaStream_t stream);

// (out, lse) <- merge of (out, lse) and (out_b, lse_b); rows x d fp32, rows lse entries.
void merge_out_lse(float* out, float* lse, const float* out_b, const float* lse_b, int64_t rows,
                   int d, cudaStream_t stream);

// dst[i] += src[i] for n floats.
void add_inplace(float* dst, const float* src, int64_t n, cudaStream_t stream);
// x[i] = value for n floats.
void fill(float* x, float value, int64_t n, cudaStream_t stream);
// dst[i] = src[i] rounded to bf16 (to nearest even) for n elements: training's Q, K, V, dO.
void to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream);

}  // namespace rm::gpu
