// fp64 reference: dense scores for a block of query rows against every key it may see,
// softmax, and the textbook backward (dS = P (dP - rowsum(dO out))). Heads run on every core
// (parallel_for.h); each head's rows in fixed blocks, so the result does not depend on the
// thread count, and a thread holds two 256 x N score blocks, not N x N.
#include "executor/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <Eigen/Dense>

#include "executor/flush_denormals.h"
#include "planner/parallel_for.h"

namespace rm::exec {

namespace {
using Mat64 = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap64 = Eigen::Map<const Mat64>;
using MMap64 = Eigen::Map<Mat64>;

constexpr int64_t kRowBlock = 256;
}  // namespace

ReferenceResult reference_attention(const ReferenceShape& shape, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const std::vector<double>& dout, bool backward) {
  const int64_t n = shape.n;
  const int d = shape.d;
  const int group = shape.h / shape.h_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const double kMasked = -std::numeric_limits<double>::infinity();
  const int64_t head = n * d;
  ReferenceResult r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(static_cast<size_t>(shape.h) * n, 0.0);
  // dK, dV per query head, summed per kv head in head order below (with one query head
  // per kv head, straight into dk, dv).
  std::vector<double> dk_heads, dv_heads;
  if (backward) {
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
    if (group > 1) {
      dk_heads.assign(q.size(), 0.0);
      dv_heads.assign(q.size(), 0.0);
    }
  }
  auto one_head = [&](size_t head_index) {
    const ScopedFlushDenormals flush;  // masked scores' exp, on this worker's thread
    const int j = static_cast<int>(head_index);
    const int g = j / group;
    const CMap64 qj(q.data() + j * head, n, d), kg(k.data() + g * head, n, d),
        vg(v.data() + g * head, n, d);
    MMap64 outj(r.out.data() + j * head, n, d);
    for (int64_t s0 = 0; s0 < n; s0 += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, n - s0);
      // The keys any of these rows may see: [t0, t1).
      const int64_t t1 = shape.causal ? s0 + rows : n;
      const int64_t t0 = shape.causal && shape.window > 0 ? std::max<int64_t>(0, s0 - shape.window + 1) : 0;
      const int64_t keys = t1 - t0;
      Mat64 p = (qj.middleRows(s0, rows) * kg.middleRows(t0, keys).transpose()) * scale;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t s = s0 + i;
        if (shape.causal) {
          for (int64_t t = s + 1; t < t1; ++t) p(i, t - t0) = kMasked;
          if (shape.window > 0)
            for (int64_t t = t0; t <= s - shape.window; ++t) p(i, t - t0) = kMasked;
        }
        const double mx = p.row(i).maxCoeff();
        p.row(i) = (p.row(i).array() - mx).exp().matrix();
        const double sum = p.row(i).sum();
        p.row(i) /= sum;
        r.lse[j * n + s] = mx + std::log(sum);
      }
      outj.middleRows(s0, rows).noalias() = p * vg.middleRows(t0, keys);
      if (!backward) continue;
      const CMap64 doutj(dout.data() + j * head, n, d);
      const auto doj = doutj.middleRows(s0, rows);
      const Eigen::VectorXd rowdot = (doj.array() * outj.middleRows(s0, rows).array()).rowwise().sum();
      double* dk_out = group > 1 ? dk_heads.data() + j * head : r.dk.data() + g * head;
      double* dv_out = group > 1 ? dv_heads.data() + j * head : r.dv.data() + g * head;
      MMap64(dv_out, n, d).middleRows(t0, keys).noalias() += p.transpose() * doj;
      Mat64 ds = doj * vg.middleRows(t0, keys).transpose();
      ds = p.array() * (ds.array().colwise() - rowdot.array());
      MMap64(r.dq.data() + j * head, n, d).middleRows(s0, rows).noalias() =
          (ds * kg.middleRows(t0, keys)) * scale;
      MMap64(dk_out, n, d).middleRows(t0, keys).noalias() += (ds.transpose() * qj.middleRows(s0, rows)) * scale;
    }
  };
  std::vector<size_t> heads(static_cast<size_t>(shape.h));
  std::iota(heads.begin(), heads.end(), size_t{0});
  parallel_for(heads, one_head);
  if (backward && group > 1)
    for (int j = 0; j < shape.h; ++j) {
      const int g = j / group;
      MMap64(r.dk.data() + g * head, n, d) += CMap64(dk_heads.data() + j * head, n, d);
      MMap64(r.dv.data() + g * head, n, d) += CMap64(dv_heads.data() + j * head, n, d);
    }
  return r;
}

template <class T>
void reference_layer_attention(const ReferenceShape& shape, TrainKernels<T>& kernels,
                               LayerAttention<T>& t, bool backward) {
  auto read = [&](const Tensor<T>& x) {
    std::vector<T> host(static_cast<size_t>(x.size()));
    kernels.download(host.data(), x.data(), x.size());
    return std::vector<double>(host.begin(), host.end());
  };
  auto write = [&](const std::vector<double>& r, Tensor<T>& x) {
    const std::vector<T> host(r.begin(), r.end());
    kernels.upload(x.data(), host.data(), x.size());
  };
  const ReferenceResult r = reference_attention(shape, read(t.q), read(t.k), read(t.v),
                                                backward ? read(t.dout) : std::vector<double>(),
                                                backward);
  if (!backward) {
    write(r.out, t.out);
    write(r.lse, t.lse);
    return;
  }
  write(r.dq, t.dq);
  write(r.dk, t.dk);
  write(r.dv, t.dv);
}

template void reference_layer_attention<float>(const ReferenceShape&, TrainKernels<float>&,
                                               LayerAttention<float>&, bool);
template void reference_layer_attention<double>(const ReferenceShape&, TrainKernels<double>&,
                                                LayerAttention<double>&, bool);

}  // namespace rm::exec
