// Hand-sized specs for the planner's tests: round numbers, so that expected times and bytes
// can be derived by hand in each test.
#pragma once

#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace rm::test {

// Two layers, hidden 1024 over `heads` heads of 128, FFN 4096, vocabulary 1000.
inline ModelSpec round_model(int heads, int kv_heads) {
  ModelSpec m;
  m.name = "round";
  m.layers = 2;
  m.hidden = 1024;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = 128;
  m.ffn_hidden = 4096;
  m.vocab = 1000;
  return m;
}

// Nodes of `gpn` GPUs (100 TFLOP/s, 2 TB/s HBM, attention flat at 50 % whatever the tile) on a
// 100 GB/s NVSwitch; with more than one node, one 10 GB/s NIC per GPU on a fat tree.
inline Topology round_cluster(int gpn, int nodes, bool rail_optimized = true, double oversub = 1,
                              double nic_latency_s = 1e-6) {
  Topology t;
  t.name = "test";
  t.source = "test";
  t.gpu.name = "gpu";
  t.gpu.memory_bytes = 80e9;
  t.gpu.peak_flops = 100e12;
  t.gpu.hbm_bytes_per_s = 2e12;
  t.gpu.gemm_efficiency = 0.5;
  t.gpu.element_bytes = 2;
  t.gpu.attention = KernelCurve{0.5, 0, 1e9, 2.5};
  t.gpus_per_node = gpn;
  t.max_nodes = nodes;
  t.intra.kind = IntraKind::kNvswitch;
  t.intra.bytes_per_s = 100e9;
  t.intra.latency_s = 0;
  if (nodes > 1) {
    t.inter.kind = InterKind::kFatTree;
    t.inter.nics_per_node = gpn;
    t.inter.nic_bytes_per_s = 10e9;
    t.inter.latency_s = nic_latency_s;
    t.inter.rail_optimized = rail_optimized;
    t.inter.nodes_per_leaf = nodes;
    t.inter.oversubscription = oversub;
  }
  return t;
}

// A training-step job; batch_tokens 0 is the default batch (2M tokens).
inline Job step_job(const char* model, const char* topo, int gpus, int64_t seq,
                    int64_t batch_tokens = 0) {
  Job j;
  j.model = model;
  j.topology = topo;
  j.gpus = gpus;
  j.seq_len = seq;
  j.batch_tokens = batch_tokens;
  j.workload = Workload::kStep;
  return j;
}

}  // namespace rm::test
