// Blockwise attention kernels (see attention_kernels.cuh for shapes and layouts).
//
// All three attention kernels are built from one warp-level primitive: mma.sync
// m16n8k16 (bf16 x bf16 -> fp32), operands read from shared memory tiles. Fragment
// layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with g = lane / 4, t = lane % 4:
//   A 16x16 (row): a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8  (col): b0 (k = 2t..2t+1, n = g)          b1 (k = 2t+8.., n = g)
//   C 16x8  fp32 : c0,c1 (g, 2t..2t+1)               c2,c3 (g+8, 2t..2t+1)
// so two neighbouring C tiles of a score block are exactly one A fragment of the next
// product (P V, dS K): the scores never leave registers. The lower column of each pair
// sits in the low 16 bits.
//
// Kernels:
//   fwd   one CTA per (query tile, head): loops over K,V tiles with an online softmax
//         (FlashAttention-2 forward); K of the next tile loads (cp.async) while the
//         current tile's softmax and P V run. Merges into (out, lse) at the end.
//   dq    one CTA per (query tile, head): recomputes P from lse, dP = dO V^T,
//         dS = P (dP - delta), dQ += dS K.
//   dkdv  one CTA per (K,V tile, kv head): loops over the h / h_kv query heads of its
//         group and their query tiles: S^T = K Q^T, dV += P^T dO, dP^T = V dO^T,
//         dK += dS^T Q. Owning a K,V tile across the whole GQA group means no atomics.
// Splitting the backward in two (FlashAttention-2 uses one kernel with atomic dQ) costs
// the recomputation of S twice (7 GEMMs instead of 5) but keeps it deterministic.
#include "executor/cuda/attention_kernels.cuh"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

namespace rm::gpu {

namespace {

thread_local std::string t_error_context = "this process";

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- warp-level building blocks ----------------------------------------------------------

__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the special function unit (exact enough for softmax; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two consecutive bf16 (p[0], p[1]) as one register; p is 4-byte aligned.
__device__ __forceinline__ uint32_t ld_pair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}
// p[0] and p[stride] as one register.
__device__ __forceinline__ uint32_t ld_pair_strided(const bf16* p, int stride) {
  const uint32_t lo = *reinterpret_cast<const uint16_t*>(p);
  const uint32_t hi = *reinterpret_cast<const uint16_t*>(p + stride);
  return lo | (hi << 16);
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}

// acc (16 x 8NT) += A (16 x 16KT) * B (16KT x 8NT), A and B in shared memory:
//   A(m, k) = a[m * lda + k]  (this warp's 16 rows, k contiguous)
//   B(k, n) = b[n * ldb + k]  when kBKContig (a [n][k] tile, e.g. K for Q K^T)
//   B(k, n) = b[k * ldb + n]  otherwise       (a [k][n] tile, e.g. V for P V)
template <int KT, int NT, bool kBKContig>
__device__ __forceinline__ void mma_smem_smem(float (&acc)[NT][4], const bf16* a, int lda,
                                              const bf16* b, int ldb) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    const int k = kt * 16 + 2 * t;
    const uint32_t af[4] = {ld_pair(a + g * lda + k), ld_pair(a + (g + 8) * lda + k),
                            ld_pair(a + g * lda + k + 8), ld_pair(a + (g + 8) * lda + k + 8)};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = nt * 8 + g;
      uint32_t b0, b1;
      if constexpr (kBKContig) {
        b0 = ld_pair(b + n * ldb + k);
        b1 = ld_pair(b + n * ldb + k + 8);
      } else {
        b0 = ld_pair_strided(b + k * ldb + n, ldb);
        b1 = ld_pair_strided(b + (k + 8) * ldb + n, ldb);
      }
      mma_bf16(acc[nt], af, b0, b1);
    }
  }
}

// acc (16 x 8NT) += A (16 x 16KT, register fragments) * B, B(k, n) = b[k * ldb + n].
template <int KT, int NT>
__device__ __forceinline__ void mma_reg_smem(float (&acc)[NT][4], const uint32_t (&af)[KT][4],
                                             const bf16* b, int ldb) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    const int k = kt * 16 + 2 * t;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = nt * 8 + g;
      mma_bf16(acc[nt], af[kt], ld_pair_strided(b + k * ldb + n, ldb),
               ld_pair_strided(b + (k + 8) * ldb + n, ldb));
    }
  }
}

// C accumulators (16 x 16KT, as 2KT tiles of 16x8) -> A fragments in bf16.
template <int KT>
__device__ __forceinline__ void acc_to_a(uint32_t (&af)[KT][4], const float (&acc)[2 * KT][4]) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    af[kt][0] = pack_bf16(acc[2 * kt][0], acc[2 * kt][1]);
    af[kt][1] = pack_bf16(acc[2 * kt][2], acc[2 * kt][3]);
    af[kt][2] = pack_bf16(acc[2 * kt + 1][0], acc[2 * kt + 1][1]);
    af[kt][3] = pack_bf16(acc[2 * kt + 1][2], acc[2 * kt + 1][3]);
  }
}

// ---- tile loads (cp.async, 16 bytes per thread per copy) -----------------------------------

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int src_bytes) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // src_bytes 0 zero-fills the 16 bytes without reading gmem.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rows [row0, row0 + ROWS) of a [rows][D] bf16 matrix into a [ROWS][LD] shared tile;
// rows past `rows` are zero.
template <int ROWS, int D, int LD, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* mat, int row0, int rows) {
  constexpr int kVecs = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < ROWS * kVecs; i += THREADS) {
    const int r = i / kVecs, v = i % kVecs;
    const bool ok = row0 + r < rows;
    const bf16* src = ok ? mat + static_cast<int64_t>(row0 + r) * D + v * 8 : mat;
    cp_async16(tile + r * LD + v * 8, src, ok ? 16 : 0);
  }
}

// A rank's tokens are `segments` equal runs of seg_len rows that tiles never cross
// (zigzag: its two half-chunks). Tile `idx` of size B covers rows [begin, end).
struct TileRows {
  int begin, end;
};
__device__ __forceinline__ TileRows tile_rows(int idx, int seg_len, int B) {
  const int per_seg = (seg_len + B - 1) / B, seg = idx / per_seg;
  const int begin = seg * seg_len + (idx % per_seg) * B;
  return {begin, min(begin + B, (seg + 1) * seg_len)};
}
__device__ __forceinline__ int tile_count(int rows, int seg_len, int B) {
  return rows / seg_len * ((seg_len + B - 1) / B);
}

// Number of leading K,V tiles a query range ending at token `q_last_tok` needs: tokens
// increase, so under the causal mask the tiles that start after it are a suffix.
__device__ __forceinline__ int kv_tiles_needed(const int32_t* kv_tok, int c_kv, int seg_kv,
                                               int bn, bool causal, int32_t q_last_tok) {
  const int n = tile_count(c_kv, seg_kv, bn);
  if (!causal) return n;
  int j = 0;
  while (j < n && kv_tok[tile_rows(j, seg_kv, bn).begin] <= q_last_tok) ++j;
  return j;
}

struct KernelArgs {
  const bf16 *q, *k, *v, *dout;
  const int32_t *q_tok, *kv_tok;
  float *out, *lse;
  const float* delta;
  const float* lse_in;
  float *dq, *dk, *dv;
  int h, h_kv, c_q, c_kv;
  int seg_q, seg_kv;  // segment lengths (c / segments)
  float scale, scale_log2;
  bool causal, merge;
};

// ---- forward ------------------------------------------------------------------------------

template <int D, int BM, int BN>
struct FwdCfg {
  static constexpr int kLd = D + 8;  // +16 bytes per row: conflict-free fragment loads
  static constexpr int kWarps = BM / 16;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kSmem = (BM + 2 * BN) * kLd * 2 + BN * 4;
};

template <int D, int BM, int BN>
__global__ void __launch_bounds__(FwdCfg<D, BM, BN>::kThreads)
    fwd_kernel(const KernelArgs p) {
  using Cfg = FwdCfg<D, BM, BN>;
  constexpr int LD = Cfg::kLd, THREADS = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + BM * LD;
  bf16* sV = sK + BN * LD;
  int32_t* sKtok = reinterpret_cast<int32_t*>(sV + BN * LD);

  const int hq = blockIdx.y, hk = hq / (p.h / p.h_kv);
  const TileRows qt = tile_rows(blockIdx.x, p.seg_q, BM);
  const int q0 = qt.begin;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bf16* qh = p.q + static_cast<int64_t>(hq) * p.c_q * D;
  const bf16* kh = p.k + static_cast<int64_t>(hk) * p.c_kv * D;
  const bf16* vh = p.v + static_cast<int64_t>(hk) * p.c_kv * D;

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int32_t tq[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) tq[r] = row[r] < qt.end ? p.q_tok[row[r]] : INT_MAX;
  const int32_t tq_first = p.q_tok[q0];
  const int32_t tq_last = p.q_tok[qt.end - 1];
  const int n_tiles = kv_tiles_needed(p.kv_tok, p.c_kv, p.seg_kv, BN, p.causal, tq_last);

  auto load_kv_tokens = [&](TileRows kt) {
    for (int i = threadIdx.x; i < BN; i += THREADS)
      sKtok[i] = kt.begin + i < kt.end ? p.kv_tok[kt.begin + i] : INT_MAX;
  };

  // Pipeline: group 0 = Q + K_0, group 1 = V_0; each iteration commits K_{j+1} after
  // Q K^T and V_{j+1} after P V (possibly empty groups), so "wait_group 1" always means
  // "the tile needed next has landed".
  const TileRows kt0 = tile_rows(0, p.seg_kv, BN);
  load_tile<BM, D, LD, THREADS>(sQ, qh, q0, qt.end);
  if (n_tiles > 0) load_tile<BN, D, LD, THREADS>(sK, kh, kt0.begin, kt0.end);
  cp_async_commit();
  if (n_tiles > 0) load_tile<BN, D, LD, THREADS>(sV, vh, kt0.begin, kt0.end);
  cp_async_commit();

  float o[D / 8][4];
  zero_acc(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};

  for (int j = 0; j < n_tiles; ++j) {
    const TileRows kt = tile_rows(j, p.seg_kv, BN);
    const TileRows kt_next = tile_rows(j + 1, p.seg_kv, BN);
    load_kv_tokens(kt);
    cp_async_wait<1>();
    __syncthreads();  // Q, K_j and the K_j tokens visible to all warps

    float s[BN / 8][4];
    zero_acc(s);
    mma_smem_smem<D / 16, BN / 8, true>(s, sQ + warp * 16 * LD, LD, sK, LD);

    // Masking is needed only on a ragged tile or where a key follows the first query.
    const bool need_mask =
        kt.end - kt.begin < BN || (p.causal && sKtok[kt.end - kt.begin - 1] > tq_first);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * p.scale_log2;
        if (need_mask) {
          const int32_t tk = sKtok[nt * 8 + 2 * t + (e & 1)];  // INT_MAX past the edge
          if (tk == INT_MAX || (p.causal && tk > tq[e >> 1])) x = -INFINITY;
        }
        s[nt][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
    __syncthreads();  // every warp is done with sK and sKtok
    if (j + 1 < n_tiles) load_tile<BN, D, LD, THREADS>(sK, kh, kt_next.begin, kt_next.end);
    cp_async_commit();

    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r]);
      // A row with no unmasked key yet keeps m = -inf; subtract 0 instead (all p are 0).
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      alpha[r] = fast_exp2(m[r] - m_use);
      m[r] = m_new;
      mx[r] = m_use;
    }
    float rowsum[2] = {0.f, 0.f};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = fast_exp2(s[nt][e] - mx[e >> 1]);
        rowsum[e >> 1] += s[nt][e];
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + rowsum[r];
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
    uint32_t pa[BN / 16][4];
    acc_to_a<BN / 16>(pa, s);

    cp_async_wait<1>();
    __syncthreads();  // V_j visible
    mma_reg_smem<BN / 16, D / 8>(o, pa, sV, LD);
    __syncthreads();  // every warp is done with sV
    if (j + 1 < n_tiles) load_tile<BN, D, LD, THREADS>(sV, vh, kt_next.begin, kt_next.end);
    cp_async_commit();
  }
  cp_async_wait<0>();

  // Per-row sums were kept per thread (its columns); add the quad's.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  float lse_old[2] = {-INFINITY, -INFINITY};
  if (p.merge) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (row[r] < qt.end) lse_old[r] = p.lse[static_cast<int64_t>(hq) * p.c_q + row[r]];
  }
  __syncwarp();  // all quad lanes read lse before lane t == 0 rewrites it
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= qt.end) continue;
    const float lse_b = l[r] > 0.f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
    float a_old = 0.f, a_b = l[r] > 0.f ? 1.f / l[r] : 0.f, lse_new = lse_b;
    if (p.merge) {
      if (lse_b == -INFINITY) continue;  // nothing of this block reaches the row
      if (lse_old[r] != -INFINITY) {
        const float hi = fmaxf(lse_old[r], lse_b), lo = fminf(lse_old[r], lse_b);
        lse_new = hi + log1pf(expf(lo - hi));
        a_old = expf(lse_old[r] - lse_new);
        a_b *= expf(lse_b - lse_new);
      }
    }
    const int64_t base = static_cast<int64_t>(hq) * p.c_q + row[r];
    float* orow = p.out + base * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      float2* dst = reinterpret_cast<float2*>(orow + dt * 8 + 2 * t);
      float2 v = make_float2(o[dt][2 * r] * a_b, o[dt][2 * r + 1] * a_b);
      if (a_old != 0.f) {
        const float2 old = *dst;
        v.x += old.x * a_old;
        v.y += old.y * a_old;
      }
      *dst = v;
    }
    if (t == 0) p.lse[base] = lse_new;
  }
}

// ---- backward: dQ -------------------------------------------------------------------------

template <int D, int BM, int BN>
struct DqCfg {
  static constexpr int kLd = D + 8;
  static constexpr int kThreads = BM / 16 * 32;
  static constexpr int kSmem = (2 * BM + 2 * BN) * kLd * 2 + BN * 4;
};

template <int D, int BM, int BN>
__global__ void __launch_bounds__(DqCfg<D, BM, BN>::kThreads) dq_kernel(const KernelArgs p) {
  using Cfg = DqCfg<D, BM, BN>;
  constexpr int LD = Cfg::kLd, THREADS = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sdO = sQ + BM * LD;
  bf16* sK = sdO + BM * LD;
  bf16* sV = sK + BN * LD;
  int32_t* sKtok = reinterpret_cast<int32_t*>(sV + BN * LD);

  const int hq = blockIdx.y, hk = hq / (p.h / p.h_kv);
  const TileRows qt = tile_rows(blockIdx.x, p.seg_q, BM);
  const int q0 = qt.begin;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t qbase = static_cast<int64_t>(hq) * p.c_q;
  const bf16* kh = p.k + static_cast<int64_t>(hk) * p.c_kv * D;
  const bf16* vh = p.v + static_cast<int64_t>(hk) * p.c_kv * D;

  const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int32_t tq[2];
  float lse2[2], delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool ok = row[r] < qt.end;
    tq[r] = ok ? p.q_tok[row[r]] : INT_MAX;
    // lse2 = +inf makes P = 0 for rows past the edge (and rows that saw no key).
    const float lse = ok ? p.lse_in[qbase + row[r]] : -INFINITY;
    lse2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    delta[r] = ok ? p.delta[qbase + row[r]] : 0.f;
  }
  const int32_t tq_first = p.q_tok[q0];
  const int32_t tq_last = p.q_tok[qt.end - 1];
  const int n_tiles = kv_tiles_needed(p.kv_tok, p.c_kv, p.seg_kv, BN, p.causal, tq_last);

  load_tile<BM, D, LD, THREADS>(sQ, p.q + qbase * D, q0, qt.end);
  load_tile<BM, D, LD, THREADS>(sdO, p.dout + qbase * D, q0, qt.end);
  cp_async_commit();

  float dq[D / 8][4];
  zero_acc(dq);
  for (int j = 0; j < n_tiles; ++j) {
    const TileRows kt = tile_rows(j, p.seg_kv, BN);
    load_tile<BN, D, LD, THREADS>(sK, kh, kt.begin, kt.end);
    load_tile<BN, D, LD, THREADS>(sV, vh, kt.begin, kt.end);
    cp_async_commit();
    for (int i = threadIdx.x; i < BN; i += THREADS)
      sKtok[i] = kt.begin + i < kt.end ? p.kv_tok[kt.begin + i] : INT_MAX;
    cp_async_wait<0>();
    __syncthreads();

    float s[BN / 8][4], dp[BN / 8][4];
    zero_acc(s);
    zero_acc(dp);
    mma_smem_smem<D / 16, BN / 8, true>(s, sQ + warp * 16 * LD, LD, sK, LD);
    mma_smem_smem<D / 16, BN / 8, true>(dp, sdO + warp * 16 * LD, LD, sV, LD);
    const bool need_mask =
        kt.end - kt.begin < BN || (p.causal && sKtok[kt.end - kt.begin - 1] > tq_first);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pr = fast_exp2(s[nt][e] * p.scale_log2 - lse2[e >> 1]);
        if (need_mask) {
          const int32_t tk = sKtok[nt * 8 + 2 * t + (e & 1)];
          if (tk == INT_MAX || (p.causal && tk > tq[e >> 1])) pr = 0.f;
        }
        s[nt][e] = pr * (dp[nt][e] - delta[e >> 1]);  // dS (unscaled)
      }
    }
    uint32_t dsa[BN / 16][4];
    acc_to_a<BN / 16>(dsa, s);
    mma_reg_smem<BN / 16, D / 8>(dq, dsa, sK, LD);
    __syncthreads();  // every warp is done with sK, sV, sKtok
  }
  cp_async_wait<0>();  // the Q, dO loads when no K,V tile was needed

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= qt.end) continue;
    float* drow = p.dq + (qbase + row[r]) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      float2* dst = reinterpret_cast<float2*>(drow + dt * 8 + 2 * t);
      float2 v = *dst;
      v.x += dq[dt][2 * r] * p.scale;
      v.y += dq[dt][2 * r + 1] * p.scale;
      *dst = v;
    }
  }
}

// ---- backward: dK, dV ---------------------------------------------------------------------

template <int D, int BM, int BN>
struct DkdvCfg {
  static constexpr int kLd = D + 8;
  static constexpr int kThreads = BN / 16 * 32;
  static constexpr int kSmem = (2 * BN + 2 * BM) * kLd * 2 + BM * 12;
};

// BM: query tile, BN: key tile (each warp owns 16 keys).
template <int D, int BM, int BN>
__global__ void __launch_bounds__(DkdvCfg<D, BM, BN>::kThreads)
    dkdv_kernel(const KernelArgs p) {
  using Cfg = DkdvCfg<D, BM, BN>;
  constexpr int LD = Cfg::kLd, THREADS = Cfg::kThreads;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* sK = reinterpret_cast<bf16*>(smem);
  bf16* sV = sK + BN * LD;
  bf16* sQ = sV + BN * LD;
  bf16* sdO = sQ + BM * LD;
  float* sLse2 = reinterpret_cast<float*>(sdO + BM * LD);
  float* sDelta = sLse2 + BM;
  int32_t* sQtok = reinterpret_cast<int32_t*>(sDelta + BM);

  const int hk = blockIdx.y, group = p.h / p.h_kv;
  const TileRows kt = tile_rows(blockIdx.x, p.seg_kv, BN);
  const int k0 = kt.begin;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t kbase = static_cast<int64_t>(hk) * p.c_kv;

  const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  int32_t tk[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) tk[r] = key[r] < kt.end ? p.kv_tok[key[r]] : INT_MAX;
  const int32_t tk_first = p.kv_tok[k0];
  const int32_t tk_last = p.kv_tok[kt.end - 1];
  const int n_q_tiles = tile_count(p.c_q, p.seg_q, BM);
  // Leading query tiles that end before this K,V tile's first key are fully masked.
  int i_begin = 0;
  if (p.causal)
    while (i_begin < n_q_tiles && p.q_tok[tile_rows(i_begin, p.seg_q, BM).end - 1] < tk_first)
      ++i_begin;

  load_tile<BN, D, LD, THREADS>(sK, p.k + kbase * D, k0, kt.end);
  load_tile<BN, D, LD, THREADS>(sV, p.v + kbase * D, k0, kt.end);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  zero_acc(dk);
  zero_acc(dv);
  for (int hq = hk * group; hq < (hk + 1) * group; ++hq) {
    const int64_t qbase = static_cast<int64_t>(hq) * p.c_q;
    for (int i = i_begin; i < n_q_tiles; ++i) {
      const TileRows qt = tile_rows(i, p.seg_q, BM);
      const int q0 = qt.begin;
      load_tile<BM, D, LD, THREADS>(sQ, p.q + qbase * D, q0, qt.end);
      load_tile<BM, D, LD, THREADS>(sdO, p.dout + qbase * D, q0, qt.end);
      cp_async_commit();
      for (int x = threadIdx.x; x < BM; x += THREADS) {
        const bool ok = q0 + x < qt.end;
        const float lse = ok ? p.lse_in[qbase + q0 + x] : -INFINITY;
        sLse2[x] = lse == -INFINITY ? INFINITY : lse * kLog2e;  // P = 0 past the edge
        sDelta[x] = ok ? p.delta[qbase + q0 + x] : 0.f;
        sQtok[x] = ok ? p.q_tok[q0 + x] : INT_MAX;
      }
      cp_async_wait<0>();
      __syncthreads();

      // Transposed scores: rows are this warp's 16 keys, columns the BM queries.
      float st[BM / 8][4], dpt[BM / 8][4];
      zero_acc(st);
      zero_acc(dpt);
      mma_smem_smem<D / 16, BM / 8, true>(st, sK + warp * 16 * LD, LD, sQ, LD);
      mma_smem_smem<D / 16, BM / 8, true>(dpt, sV + warp * 16 * LD, LD, sdO, LD);
      const bool need_mask = p.causal && tk_last > sQtok[0];
#pragma unroll
      for (int nt = 0; nt < BM / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + 2 * t + (e & 1);
          float pr = fast_exp2(st[nt][e] * p.scale_log2 - sLse2[qc]);
          if (need_mask && tk[e >> 1] > sQtok[qc]) pr = 0.f;
          st[nt][e] = pr;
          dpt[nt][e] = pr * (dpt[nt][e] - sDelta[qc]);  // dS^T (unscaled)
        }
      }
      uint32_t fa[BM / 16][4];
      acc_to_a<BM / 16>(fa, st);
      mma_reg_smem<BM / 16, D / 8>(dv, fa, sdO, LD);
      acc_to_a<BM / 16>(fa, dpt);
      mma_reg_smem<BM / 16, D / 8>(dk, fa, sQ, LD);
      __syncthreads();  // every warp is done with sQ, sdO and the row vectors
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (key[r] >= kt.end) continue;
    float* krow = p.dk + (kbase + key[r]) * D;
    float* vrow = p.dv + (kbase + key[r]) * D;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int col = dt * 8 + 2 * t;
      *reinterpret_cast<float2*>(krow + col) =
          make_float2(dk[dt][2 * r] * p.scale, dk[dt][2 * r + 1] * p.scale);
      *reinterpret_cast<float2*>(vrow + col) = make_float2(dv[dt][2 * r], dv[dt][2 * r + 1]);
    }
  }
}

// ---- small kernels ------------------------------------------------------------------------

// One warp per row: delta = sum_d dout * out.
__global__ void delta_kernel(const bf16* dout, const float* out, float* delta, int64_t rows,
                             int d) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.f;
  for (int i = lane; i < d; i += 32)
    acc += __bfloat162float(dout[row * d + i]) * out[row * d + i];
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[row] = acc;
}

// One warp per row: (out, lse) <- merge with (out_b, lse_b).
__global__ void merge_kernel(float* out, float* lse, const float* out_b, const float* lse_b,
                             int64_t rows, int d) {
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float la = lse[row], lb = lse_b[row];
  if (lb == -INFINITY) return;
  float wa = 0.f, wb = 1.f, l = lb;
  if (la != -INFINITY) {
    const float hi = fmaxf(la, lb), lo = fminf(la, lb);
    l = hi + log1pf(expf(lo - hi));
    wa = expf(la - l);
    wb = expf(lb - l);
  }
  for (int i = lane; i < d; i += 32) out[row * d + i] = out[row * d + i] * wa + out_b[row * d + i] * wb;
  __syncwarp();
  if (lane == 0) lse[row] = l;
}

__global__ void add_kernel(float* dst, const float* src, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] += src[i];
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = value;
}

__global__ void to_bf16_kernel(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

// ---- launchers ----------------------------------------------------------------------------

int host_tile_count(int rows, int seg_len, int b) {
  return rows / seg_len * ((seg_len + b - 1) / b);
}

KernelArgs make_args(const AttentionDims& dims) {
  KernelArgs a{};
  a.seg_q = dims.c_q / dims.segments;
  a.seg_kv = dims.c_kv / dims.segments;
  a.h = dims.h;
  a.h_kv = dims.h_kv;
  a.c_q = dims.c_q;
  a.c_kv = dims.c_kv;
  a.scale = dims.scale;
  a.scale_log2 = dims.scale * kLog2e;
  a.causal = dims.causal;
  return a;
}

void check_dims(const AttentionDims& dims, const char* op) {
  if (!head_dim_supported(dims.d))
    throw CudaError(std::string(op) + ": head dim " + std::to_string(dims.d) +
                    " is not supported by the cuda kernels (32, 64 or 128)");
  if (dims.h <= 0 || dims.h_kv <= 0 || dims.h % dims.h_kv != 0 || dims.segments <= 0 ||
      dims.c_q <= 0 || dims.c_kv <= 0 || dims.c_q % dims.segments != 0 ||
      dims.c_kv % dims.segments != 0)
    throw CudaError(std::string(op) + ": bad shape (h " + std::to_string(dims.h) + ", h_kv " +
                    std::to_string(dims.h_kv) + ", c_q " + std::to_string(dims.c_q) +
                    ", c_kv " + std::to_string(dims.c_kv) + ", segments " +
                    std::to_string(dims.segments) + ")");
}

// Launches `kernel` with `smem` bytes of dynamic shared memory (above 48 KB needs the
// per-kernel opt-in) on grid x block.
template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t stream,
            const KernelArgs& args, const char* op) {
  RM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                op);
  kernel<<<grid, threads, smem, stream>>>(args);
  RM_CUDA_CHECK_LAUNCH(op);
}

template <int D, int BM, int BN>
void launch_fwd(const AttentionDims& dims, const KernelArgs& a, cudaStream_t stream) {
  using Cfg = FwdCfg<D, BM, BN>;
  launch(fwd_kernel<D, BM, BN>, dim3(host_tile_count(dims.c_q, a.seg_q, BM), dims.h),
         Cfg::kThreads,
         Cfg::kSmem, stream, a, "attention_forward");
}

template <int D>
void launch_fwd_tiles(const AttentionDims& dims, Tiles tiles, const KernelArgs& a,
                      cudaStream_t stream) {
  if (tiles.block_q == 64 && tiles.block_kv == 64) return launch_fwd<D, 64, 64>(dims, a, stream);
  if (tiles.block_q == 64) return launch_fwd<D, 64, 128>(dims, a, stream);
  if (tiles.block_kv == 64) return launch_fwd<D, 128, 64>(dims, a, stream);
  launch_fwd<D, 128, 128>(dims, a, stream);
}

// Backward tiles: 64 keys per dK,dV CTA (4 warps); query tiles of 64 (d <= 64) or 32
// (d = 128, to keep the dK, dV, S^T and dP^T accumulators in registers).
constexpr int kBmDq = 64, kBnDq = 64;

template <int D>
void launch_bwd(const AttentionDims& dims, const KernelArgs& a, cudaStream_t stream) {
  constexpr int kBmDkdv = D <= 64 ? 64 : 32, kBnDkdv = 64;
  using CfgDq = DqCfg<D, kBmDq, kBnDq>;
  using CfgKv = DkdvCfg<D, kBmDkdv, kBnDkdv>;
  launch(dq_kernel<D, kBmDq, kBnDq>, dim3(host_tile_count(dims.c_q, a.seg_q, kBmDq), dims.h),
         CfgDq::kThreads, CfgDq::kSmem, stream, a, "attention_backward (dq)");
  launch(dkdv_kernel<D, kBmDkdv, kBnDkdv>,
         dim3(host_tile_count(dims.c_kv, a.seg_kv, kBnDkdv), dims.h_kv),
         CfgKv::kThreads, CfgKv::kSmem, stream, a, "attention_backward (dk, dv)");
}

int blocks_for(int64_t n, int threads) {
  return static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
}

}  // namespace

void set_error_context(const std::string& context) { t_error_context = context; }
const std::string& error_context() { return t_error_context; }

void throw_cuda_error(const char* op, const std::string& reason, const char* file, int line) {
  throw CudaError(std::string(op) + " failed on " + t_error_context + ": " + reason + " (" +
                  file + ":" + std::to_string(line) + ")");
}

Tiles forward_tiles(Tiles requested) {
  return {requested.block_q >= 128 ? 128 : 64, requested.block_kv >= 128 ? 128 : 64};
}

Tiles backward_tiles() { return {kBmDq, kBnDq}; }

bool head_dim_supported(int d) { return d == 32 || d == 64 || d == 128; }

void attention_forward(const AttentionDims& dims, Tiles tiles, const bf16* q, const bf16* k,
                       const bf16* v, const int32_t* q_tok, const int32_t* kv_tok, float* out,
                       float* lse, bool merge, cudaStream_t stream) {
  check_dims(dims, "attention_forward");
  KernelArgs a = make_args(dims);
  a.q = q;
  a.k = k;
  a.v = v;
  a.q_tok = q_tok;
  a.kv_tok = kv_tok;
  a.out = out;
  a.lse = lse;
  a.merge = merge;
  tiles = forward_tiles(tiles);
  switch (dims.d) {
    case 32: return launch_fwd_tiles<32>(dims, tiles, a, stream);
    case 64: return launch_fwd_tiles<64>(dims, tiles, a, stream);
    default: return launch_fwd_tiles<128>(dims, tiles, a, stream);
  }
}

void attention_backward_prep(const AttentionDims& dims, const bf16* dout, const float* out,
                             float* delta, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(dims.h) * dims.c_q;
  constexpr int kThreads = 256;
  delta_kernel<<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0,
                 stream>>>(dout, out, delta, rows, dims.d);
  RM_CUDA_CHECK_LAUNCH("attention_backward_prep");
}

void attention_backward(const AttentionDims& dims, const bf16* q, const bf16* k, const bf16* v,
                        const bf16* dout, const float* lse, const float* delta,
                        const int32_t* q_tok, const int32_t* kv_tok, float* dq, float* dk,
                        float* dv, cudaStream_t stream) {
  check_dims(dims, "attention_backward");
  KernelArgs a = make_args(dims);
  a.q = q;
  a.k = k;
  a.v = v;
  a.dout = dout;
  a.lse_in = lse;
  a.delta = delta;
  a.q_tok = q_tok;
  a.kv_tok = kv_tok;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  switch (dims.d) {
    case 32: return launch_bwd<32>(dims, a, stream);
    case 64: return launch_bwd<64>(dims, a, stream);
    default: return launch_bwd<128>(dims, a, stream);
  }
}

void merge_out_lse(float* out, float* lse, const float* out_b, const float* lse_b, int64_t rows,
                   int d, cudaStream_t stream) {
  constexpr int kThreads = 256;
  merge_kernel<<<static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads), kThreads, 0,
                 stream>>>(out, lse, out_b, lse_b, rows, d);
  RM_CUDA_CHECK_LAUNCH("merge_out_lse");
}

void add_inplace(float* dst, const float* src, int64_t n, cudaStream_t stream) {
  add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(dst, src, n);
  RM_CUDA_CHECK_LAUNCH("add_inplace");
}

void fill(float* x, float value, int64_t n, cudaStream_t stream) {
  fill_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, value, n);
  RM_CUDA_CHECK_LAUNCH("fill");
}

void to_bf16(const float* src, bf16* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(src, dst, n);
  RM_CUDA_CHECK_LAUNCH("to_bf16");
}

}  // namespace rm::gpu
