// The independent reference the executor is verified against: plain full-sequence
// attention in fp64 (no tiles, no online softmax, no ring), forward and backward.
//
// Shapes, in global token order (N tokens of one sequence): q, dout, out, dq [h][N][d];
// k, v, dk, dv [h_kv][N][d]; lse [h][N]. Query head j uses kv head j / (h / h_kv).
// Softmax scale 1/sqrt(d); causal: key t visible to query s when t <= s, and with a
// sliding window W > 0 also when s - W < t.
#pragma once

#include <cstdint>
#include <vector>

#include "executor/train_kernels.h"
#include "executor/transformer.h"

namespace rm::exec {

struct ReferenceShape {
  int64_t n = 0;
  int d = 0;
  int h = 0;
  int h_kv = 0;
  bool causal = true;
  int64_t window = 0;  // causal only; 0 = none
};

struct ReferenceResult {
  std::vector<double> out, lse;
  std::vector<double> dq, dk, dv;  // empty unless backward was asked for
};

ReferenceResult reference_attention(const ReferenceShape& shape, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const std::vector<double>& dout, bool backward);

// The reference as the transformer's attention (transformer.h) of one sequence held whole
// by one rank (shape.n tokens): reads the layer's tensors through `kernels`, wherever they
// live, and writes back out, lse (forward) or dq, dk, dv (backward).
template <class T>
void reference_layer_attention(const ReferenceShape& shape, TrainKernels<T>& kernels,
                               LayerAttention<T>& t, bool backward);

}  // namespace rm::exec
