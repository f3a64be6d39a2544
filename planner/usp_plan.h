// Megatron-LM's a2a+p2p context parallelism (USP, "unified sequence parallelism"; the
// Strategy kUsp of plan.h): a CP group of cp GPUs holds N / cp tokens each; an all-to-all
// over heads among cp_a2a GPUs of one node (Ulysses) leaves each GPU N / r tokens of
// h / cp_a2a query heads and h_kv / cp_a2a kv heads, r = cp / cp_a2a; a p2p ring of r GPUs
// (one per node group, the same a2a index) then runs ring attention on those heads, and
// a second all-to-all returns the output (backward: dout in, dQ,dK,dV out).
//
// Layout of a CP group k in PlanChoice::order (cp_a2a = u, ring size r; k = d·tp + t, TP
// rank t of replica d, tensor_parallel.h's tp_order):
//   order[k*cp + j*u + i]  is a2a index i (inside a node) of ring position j,
// so the a2a groups are u consecutive entries and ring (k, i) takes every u-th one.
// With tensor parallelism a TP member's h / tp heads are split u ways (h / (tp·u) each).
// The ring is priced and checked as a p2p ring plan of r GPUs over tp·dp·u rings
// (usp_ring_choice) on the TP member's model with heads divided by u (usp_ring_model):
// one ring pricing, no copy of it. The schedule generator runs the same rings.
#pragma once

#include <string>

#include "planner/model_spec.h"
#include "planner/plan.h"

namespace rm {

// The ring part of an a2a+p2p choice: strategy kRing, tp = 1, cp = r, dp = tp·dp·u, the
// rings of the layout above in order: ring (d·u + i)·tp + t is a2a index i of TP rank t of
// replica d (so ring % tp is the TP rank, as in a ring plan with tp > 1); cp_a2a = 1;
// other choices kept.
PlanChoice usp_ring_choice(const PlanChoice& choice);
// The model as the ring sees it after the all-to-all: one TP member's (tp_shard) heads and
// kv_heads divided by cp_a2a.
ModelSpec usp_ring_model(const ModelSpec& model, int tp, int cp_a2a);
// Bytes each GPU sends to each peer of its all-to-all (u GPUs: cp for a2a, cp_a2a for
// a2a+p2p) before attention (Q,K,V: c·(h + 2·h_kv)·d·e / u) and after it (the output:
// c·h·d·e / u), c = N / cp tokens per GPU, h and h_kv a TP member's; the backward moves the
// same bytes the other way (dout in; dQ,dK,dV out).
struct A2aBytes {
  double qkv = 0, out = 0;
  int members = 1;  // u
};
A2aBytes a2a_bytes(const ModelSpec& model, const PlanChoice& choice, int64_t seq_len, int element_bytes);
// Why the split cannot work, or "": 2 <= cp_a2a < cp dividing cp, tp·cp_a2a dividing the
// GPUs per node, cp_a2a dividing a TP member's query heads and kv heads (Megatron: heads
// and query groups per TP rank divisible by the a2a size), and each a2a group of `order`
// inside one node (GPU g on node g / gpus_per_node, as Fabric::node_of).
std::string usp_split_why_invalid(const ModelSpec& model, const PlanChoice& choice, int gpus_per_node);

}  // namespace rm
