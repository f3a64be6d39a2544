// fp64 reference: one dense score matrix per query head, softmax, and the textbook
// backward (dS = P (dP - rowsum(dO out))).
#include "executor/reference_attention.h"

#include <cmath>
#include <limits>

#include <Eigen/Dense>

namespace rm::exec {

namespace {
using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const Mat>;
using MMap = Eigen::Map<Mat>;
}  // namespace

ReferenceResult reference_attention(const ReferenceShape& shape, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const std::vector<double>& dout, bool backward) {
  const int64_t n = shape.n;
  const int d = shape.d;
  const int group = shape.h / shape.h_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int64_t head = n * d;
  ReferenceResult r;
  r.out.assign(q.size(), 0.0);
  r.lse.assign(static_cast<size_t>(shape.h) * n, 0.0);
  if (backward) {
    r.dq.assign(q.size(), 0.0);
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
  }
  for (int j = 0; j < shape.h; ++j) {
    const int g = j / group;
    const CMap qj(q.data() + j * head, n, d), kg(k.data() + g * head, n, d),
        vg(v.data() + g * head, n, d);
    Mat p = (qj * kg.transpose()) * scale;
    for (int64_t s = 0; s < n; ++s) {
      if (shape.causal) {
        for (int64_t t = s + 1; t < n; ++t) p(s, t) = -std::numeric_limits<double>::infinity();
        if (shape.window > 0)
          for (int64_t t = 0; t <= s - shape.window; ++t) p(s, t) = -std::numeric_limits<double>::infinity();
      }
      const double mx = p.row(s).maxCoeff();
      p.row(s) = (p.row(s).array() - mx).exp().matrix();
      const double sum = p.row(s).sum();
      p.row(s) /= sum;
      r.lse[j * n + s] = mx + std::log(sum);
    }
    MMap outj(r.out.data() + j * head, n, d);
    outj.noalias() = p * vg;
    if (!backward) continue;
    const CMap doj(dout.data() + j * head, n, d);
    const Eigen::VectorXd rowdot = (doj.array() * outj.array()).rowwise().sum();
    MMap(r.dv.data() + g * head, n, d).noalias() += p.transpose() * doj;
    Mat ds = doj * vg.transpose();
    ds = p.array() * (ds.array().colwise() - rowdot.array());
    MMap(r.dq.data() + j * head, n, d).noalias() = (ds * kg) * scale;
    MMap(r.dk.data() + g * head, n, d).noalias() += (ds.transpose() * qj) * scale;
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
