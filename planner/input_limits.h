// The largest job and cluster ringmaster accepts, so every count and product of counts
// stays inside 64-bit arithmetic (and inside int where it is stored as one), and a small
// file cannot ask for an enormous allocation. Each limit is far above any machine built so
// far; `ringmaster --help` and README.md ("What the readers promise") list them.
#pragma once

#include <cstdint>

namespace rm {

// GPUs in one node: NVL72 racks have 72, NVL576 576 (NVIDIA GB200 NVL72 datasheet).
inline constexpr int kMaxGpusPerNode = 1024;
// Nodes and GPUs in one cluster: the largest published training clusters have about 100,000
// GPUs (xAI Colossus, 2024); 2^17 GPUs leaves headroom with a link graph that fits in memory.
inline constexpr int kMaxGpus = 1 << 17;
inline constexpr int kMaxNodes = kMaxGpus;
// NICs per node: 8 per DGX, 18 on GB200 compute trays.
inline constexpr int kMaxNicsPerNode = 1024;
// Tokens per sequence: 2^30 (1G). The attention work counts pairs of tokens (up to 2^60),
// which must not overflow int64 (the limit is 2^63, reached near 3.1G tokens).
inline constexpr int64_t kMaxSeqTokens = int64_t{1} << 30;
// Tokens per optimizer step: 2^40 (Llama 3 405B trained with 16M-token batches, 2^24).
inline constexpr int64_t kMaxBatchTokens = int64_t{1} << 40;
// Kernel tiles and messages per ring transfer: tiles are 16-256 tokens on GPUs; 2^20 covers
// a whole 1M-token chunk as one tile. Transfers are split into at most 1,024 messages.
inline constexpr int kMaxBlockTokens = 1 << 20;
inline constexpr int kMaxKvSubblocks = 1024;
// Model shapes, for YAML and Hugging Face configs alike: about 100x the largest published
// models (Llama 3 405B: 126 layers, hidden 16,384, 128 heads, FFN 53,248; vocabularies up to
// 256K), so products of them stay far from overflow.
inline constexpr int kMaxLayers = 1 << 14;
inline constexpr int kMaxHidden = 1 << 21;
inline constexpr int kMaxHeads = 1 << 14;
inline constexpr int kMaxHeadDim = 1 << 14;
inline constexpr int kMaxFfnHidden = 1 << 23;
inline constexpr int kMaxVocab = 1 << 25;
// Sequences per micro-batch and micro-batches per step.
inline constexpr int kMaxMicroBatch = 1 << 20;
inline constexpr int kMaxGradAccum = 1 << 20;

// Physical quantities in spec and profile files, after unit scaling: bandwidths up to
// 1e15 bytes/s (NVLink5 is 9e11), FLOP rates up to 1e18 (B200: 2.25e15 dense bf16), memory up
// to 2^50 bytes (1 PiB; B200: 192 GB), latencies up to 1 s, so that sums and products of
// them stay finite (a bandwidth of 1e308 GB/s would be infinite bytes/s).
inline constexpr double kMaxGbPerS = 1e6;       // GB/s
inline constexpr double kMaxTflops = 1e6;       // TFLOP/s
inline constexpr double kMaxMemoryGib = 1 << 20;  // GiB
inline constexpr double kMaxLatencyUs = 1e6;    // microseconds

}  // namespace rm
