// Tensor parallelism with sequence parallelism (Megatron-LM's --tensor-model-parallel-size
// with --sequence-parallel; torchtitan's tensor_parallel_degree), as the planner, the
// memory model and the schedule generator all price and emit it. One definition for the
// three.
//
// A TP group of t GPUs takes the place of one context-parallel rank: its members hold
// the same c = N / cp tokens and split the layer's weights (Megatron-LM, Shoeybi et al.
// 2019): attention by heads (h/t query and h_kv/t key/value heads per member, so t must
// divide both: Megatron asserts num_query_groups % tensor_model_parallel_size == 0),
// the FFN by columns of f, the head by vocabulary entries. Each member then runs its own
// context-parallel ring over its h_kv/t K,V heads with the members of the same TP rank in
// the other TP groups: t rings side by side, each moving 1/t of the K,V bytes.
//
// Sequence parallelism (Korthikanti et al. 2022, "Reducing Activation Recomputation in
// Large Transformer Models", Sec. 4.2.2) splits the norm, dropout and residual regions
// by tokens (c/t per member), so every stored activation is divided by t, their Eq. (5):
//   activations per layer = s·b·h·(34 / t + 5·a·s / (h·t))   (TP + SP)
// against s·b·h·(34 + 5·a·s/h) without parallelism (Eq. 1). Our per-token count
// (memory_model.h; FlashAttention keeps no s x s scores, no dropout) is divided by t the
// same way. Per layer and micro-sequence the TP group runs, on its own GPUs:
//   forward   all-gather (c/t -> c tokens) before the QKV and before the FFN GEMMs,
//             reduce-scatter (c -> c/t) after the output projection and after the FFN
//   backward  the same two all-gathers (of the output gradients) and two
//             reduce-scatters (of the input gradients); Megatron's re-gather of the
//             inputs for the weight gradients overlaps the input-gradient GEMM and is not
//             counted
// each collective moving c·hidden·e bytes in all (c·hidden·e / t per member). Full
// checkpointing reruns the forward's four; selective recomputes the FFN's up/gate GEMMs
// from its gathered input (one more all-gather).
//
// Overlap is a plan choice (PlanChoice::tp_comm_overlap). Off (Megatron's default,
// --tp-comm-overlap off): each collective is waited for at once, all of it exposed. On
// (Megatron-LM's --tp-comm-overlap with Transformer Engine's userbuffers; torchtitan's
// enable_async_tensor_parallel, PyTorch's micro-pipeline TP): each all-gather is split
// with the GEMM that consumes it, and each reduce-scatter with the GEMM that produces it,
// into t chunks of c/t tokens (Wang et al. 2022, "Overlap Communication with Dependent
// Computation via Decomposition in Large Deep Learning Models", ASPLOS'23). The GEMMs:
//   forward   all-gather -> QKV, output projection -> reduce-scatter,
//             all-gather -> FFN up/gate, FFN down -> reduce-scatter
//   backward  all-gather -> FFN down's dgrad+wgrad, FFN up/gate's -> reduce-scatter,
//             all-gather -> output projection's, QKV's -> reduce-scatter
//   recompute full: the forward's; selective: all-gather -> FFN up/gate
// Each chunk is its own all-gather or reduce-scatter of 1/t of the bytes over the same TP
// ring (TE's "pipeline" split; its ring-exchange split moves the same bytes per NVLink hop
// with one latency per chunk, ours pays each chunk collective's t-1), one in flight at a
// time, so a region takes (tp_overlapped_s)
//   all-gather:      x + (t-1)·max(g/t, x) + g/t   (chunk 0 waited, then chunk k+1 in
//                                                   flight while chunk k computes)
//   reduce-scatter:  g/t + (t-1)·max(g/t, x) + x   (the mirror image)
// for a GEMM of g seconds and a chunk collective of x (max: CostParams::collective_exposed_s
// at its default, full overlap): never free, and slower than waiting
// once when x is latency bound. Chunk GEMMs run at the layer's GEMM rate (the size curve
// prices a layer's work per micro-step, CostParams::gemm_flops_per_s; a chunk of c/t tokens
// at long context is still thousands of rows). Compute is not slowed beside the chunk
// transfers: overlap_interference is fitted on attention kernels beside ring transfers,
// which the executor measures; it cannot run TP, so nothing here measures a GEMM beside a
// TP chunk. Against torchtitan's Llama 3.1 70B run with and without AsyncTP
// (validation/published.yaml) this prices +12.9 % where the run gained +5.7 %: read it as
// the most overlap can give. Memory is unchanged: a chunk's buffers are the gathered
// tensor's slices.
//
// Rank order (Megatron's tp-cp-ep-dp-pp, TP fastest): GPU = t + tp·(i + cp·d) for TP
// rank t, ring position i and data-parallel replica d, so a TP group is tp consecutive
// GPUs of one node (NVLink) and TP rank t's ring (d, t) is order[(d·tp + t)·cp ...].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost_params.h"
#include "planner/model_spec.h"

namespace rm {

// Tensor-parallel degrees the search tries: powers of two up to the GPUs per node (TP
// stays on NVLink: its collectives run every layer), as Megatron configs use.
inline constexpr int kTensorParallelDegrees[] = {1, 2, 4, 8};

// Collectives of one layer for one sequence (see above): forward, backward, and the
// extra ones a checkpointing policy reruns in the backward (full, selective).
inline constexpr int kTpCollectivesForward = 4;     // 2 all-gathers + 2 reduce-scatters
inline constexpr int kTpCollectivesBackward = 4;    // 2 all-gathers + 2 reduce-scatters
inline constexpr int kTpCollectivesRecomputeFull = 4;
inline constexpr int kTpCollectivesRecomputeSelective = 1;

// What one member of a TP group of `tp` holds and computes: heads, kv heads, FFN hidden
// and vocabulary divided by tp, the rest unchanged (so layer_params() and params() are the
// model's / tp, linear FLOPs per token too). tp must pass tp_why_invalid.
ModelSpec tp_shard(const ModelSpec& m, int tp);

// Why `tp` cannot split `m` on nodes of `gpus_per_node` GPUs, or "".
std::string tp_why_invalid(const ModelSpec& m, int tp, int gpus_per_node);

// Bytes one member contributes to (all-gather) or keeps from (reduce-scatter) one TP
// collective over c tokens: c·hidden·e / tp.
double tp_collective_bytes(const ModelSpec& m, int64_t c, int element_bytes, int tp);

// Seconds one GEMM of `gemm_s` takes pipelined with a TP collective in tp chunks of
// `chunk_s` each (above), each GEMM chunk hiding what CostParams::collective_exposed_s
// says of the chunk in flight (all of it, or less where a calibrated collective_overlap < 1,
// as the simulator replays it). The same for an all-gather and a reduce-scatter.
double tp_overlapped_s(double gemm_s, double chunk_s, int tp, const CostParams& cost);

// The rank order above: a permutation of tp·cp·dp GPUs; for tp = 1 node-major.
std::vector<int> tp_order(int tp, int cp, int dp);
// The TP groups of an order (one per ring position of each replica), each `tp` GPUs.
std::vector<std::vector<int>> tp_groups(const std::vector<int>& order, int tp, int cp);
// The data-parallel (FSDP) groups: one per TP rank, the cp·dp GPUs that hold the same
// weight shard.
std::vector<std::vector<int>> fsdp_groups(const std::vector<int>& order, int tp, int cp);

}  // namespace rm
