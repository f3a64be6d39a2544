// bf16 storage over fp32 kernels (see bf16_kernels.h).
#include "executor/bf16_kernels.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

namespace rm::exec {

Tensor<Bf16> Bf16Kernels::alloc(int64_t rows, int64_t cols) {
  Tensor<float> t = k_.alloc(1, (rows * cols + 1) / 2);
  return Tensor<Bf16>(this, reinterpret_cast<Bf16*>(t.release()), rows, cols);
}

void Bf16Kernels::free(Bf16* data) { k_.free(reinterpret_cast<float*>(data)); }

Tensor<float> Bf16Kernels::widen(ConstView<Bf16> x) {
  Tensor<float> t = k_.alloc(x.rows, x.cols);
  k_.from_bf16(t.data(), x.data, x.size());
  return t;
}

void Bf16Kernels::narrow(View<Bf16> dst, ConstView<float> src) { k_.to_bf16(dst.data, src.data, src.size()); }

void Bf16Kernels::zero(View<Bf16> x) {
  Tensor<float> t = k_.alloc(x.rows, x.cols);
  k_.zero(t);
  narrow(x, t);
}

void Bf16Kernels::copy(View<Bf16> dst, ConstView<Bf16> src) { narrow(dst, widen(src)); }  // exact

void Bf16Kernels::upload(Bf16* dst, const Bf16* host, int64_t n) {
  // Widened on the host by the cpu kernels' conversion, uploaded, narrowed (exact both ways).
  std::vector<float> f(static_cast<size_t>(n));
  cpu_train_kernels<float>().from_bf16(f.data(), host, n);
  Tensor<float> t = k_.alloc(1, n);
  k_.upload(t.data(), f.data(), n);
  k_.to_bf16(dst, t.data(), n);
}

void Bf16Kernels::download(Bf16* host, const Bf16* src, int64_t n) {
  Tensor<float> t = widen({src, 1, n});
  std::vector<float> f(static_cast<size_t>(n));
  k_.download(f.data(), t.data(), n);
  cpu_train_kernels<float>().to_bf16(host, f.data(), n);
}

void Bf16Kernels::gemm(ConstView<Bf16> a, bool trans_a, ConstView<Bf16> b, bool trans_b, View<Bf16> c,
                       bool accumulate) {
  const Tensor<float> fa = widen(a), fb = widen(b);
  Tensor<float> fc = accumulate ? widen(c) : k_.alloc(c.rows, c.cols);
  k_.gemm(fa, trans_a, fb, trans_b, fc, accumulate);
  narrow(c, fc);
}

void Bf16Kernels::rmsnorm_forward(ConstView<Bf16> x, const Bf16* g, View<Bf16> y, View<Bf16> r) {
  const Tensor<float> fx = widen(x), fg = widen({g, 1, x.cols});
  Tensor<float> fy = k_.alloc(y.rows, y.cols), fr = k_.alloc(r.rows, r.cols);
  k_.rmsnorm_forward(fx, fg.data(), fy, fr);
  narrow(y, fy);
  narrow(r, fr);
}

void Bf16Kernels::rmsnorm_backward(ConstView<Bf16> x, ConstView<Bf16> r, const Bf16* g, ConstView<Bf16> dy,
                                   View<Bf16> dx, Bf16* dg) {
  const Tensor<float> fx = widen(x), fg = widen({g, 1, x.cols}), fdy = widen(dy);
  Tensor<float> fr = k_.alloc(r.rows, r.cols), y = k_.alloc(x.rows, x.cols);  // y: not needed
  k_.rmsnorm_forward(fx, fg.data(), y, fr);
  Tensor<float> fdx = widen(dx), fdg = widen({dg, 1, x.cols});
  k_.rmsnorm_backward(fx, fr, fg.data(), fdy, fdx, fdg.data());
  narrow(dx, fdx);
  narrow({dg, 1, x.cols}, fdg);
}

void Bf16Kernels::rope(View<Bf16> x, int heads, int d, const int64_t* positions, int64_t c, int sign) {
  Tensor<float> fx = widen(x);
  k_.rope(fx, heads, d, positions, c, sign);
  narrow(x, fx);
}

void Bf16Kernels::swiglu_forward(ConstView<Bf16> u, ConstView<Bf16> g, View<Bf16> s) {
  const Tensor<float> fu = widen(u), fg = widen(g);
  Tensor<float> fs = k_.alloc(s.rows, s.cols);
  k_.swiglu_forward(fu, fg, fs);
  narrow(s, fs);
}

void Bf16Kernels::swiglu_backward(ConstView<Bf16> ds, ConstView<Bf16> u, ConstView<Bf16> g, View<Bf16> du,
                                  View<Bf16> dg) {
  const Tensor<float> fds = widen(ds), fu = widen(u), fg = widen(g);
  Tensor<float> fdu = k_.alloc(du.rows, du.cols), fdg = k_.alloc(dg.rows, dg.cols);
  k_.swiglu_backward(fds, fu, fg, fdu, fdg);
  narrow(du, fdu);
  narrow(dg, fdg);
}

void Bf16Kernels::embedding_forward(ConstView<Bf16> table, const int32_t* tokens, View<Bf16> x) {
  const Tensor<float> ft = widen(table);
  Tensor<float> fx = k_.alloc(x.rows, x.cols);
  k_.embedding_forward(ft, tokens, fx);
  narrow(x, fx);
}

void Bf16Kernels::embedding_backward(ConstView<Bf16> dx, const int32_t* tokens, View<Bf16> dtable) {
  const Tensor<float> fdx = widen(dx);
  Tensor<float> fdt = widen(dtable);
  k_.embedding_backward(fdx, tokens, fdt);
  narrow(dtable, fdt);
}

double Bf16Kernels::cross_entropy(View<Bf16> logits, const int32_t* targets, double grad_scale) {
  Tensor<float> fz = widen(logits);  // the loss in fp32, as torchtitan's .float() logits
  const double loss = k_.cross_entropy(fz, targets, grad_scale);
  narrow(logits, fz);
  return loss;
}

void Bf16Kernels::to_heads(ConstView<Bf16> x, int64_t row0, int heads, int d, View<Bf16> t) {
  const Tensor<float> fx = widen(x);
  Tensor<float> ft = k_.alloc(t.rows, t.cols);
  k_.to_heads(fx, row0, heads, d, ft);
  narrow(t, ft);
}

void Bf16Kernels::from_heads(ConstView<Bf16> t, int heads, int d, View<Bf16> x, int64_t row0) {
  const Tensor<float> ft = widen(t);
  Tensor<float> fx = widen(x);  // rows outside the sequence's keep their values
  k_.from_heads(ft, heads, d, fx, row0);
  narrow(x, fx);
}

void Bf16Kernels::add(View<Bf16> y, ConstView<Bf16> x) {
  Tensor<float> fy = widen(y);
  k_.add(fy, widen(x));
  narrow(y, fy);
}

double Bf16Kernels::squared_norm(ConstView<Bf16> x) { return k_.squared_norm(widen(x)); }

void Bf16Kernels::adamw(View<Bf16>, ConstView<Bf16>, View<Bf16>, View<Bf16>, const AdamWScalars&) {
  throw std::logic_error("AdamW runs on the fp32 shards, not on bf16 tensors");
}

void Bf16Kernels::adamw_bf16_moments(View<Bf16>, ConstView<Bf16>, View<Bf16>, View<Bf16>, const AdamWScalars&) {
  throw std::logic_error("AdamW runs on the fp32 shards, not on bf16 tensors");
}

void Bf16Kernels::to_bf16(Bf16* dst, const Bf16* src, int64_t n) { copy({dst, 1, n}, {src, 1, n}); }
void Bf16Kernels::from_bf16(Bf16* dst, const Bf16* src, int64_t n) { copy({dst, 1, n}, {src, 1, n}); }

namespace {

// The fp32 attention tensors of a bf16 layer: Q, K, V widened (both passes read them).
LayerAttention<float> widened_qkv(Bf16Kernels& kernels, const LayerAttention<Bf16>& t) {
  LayerAttention<float> f;
  f.q = kernels.widen(t.q);
  f.k = kernels.widen(t.k);
  f.v = kernels.widen(t.v);
  return f;
}

}  // namespace

Bf16Attention bf16_attention(Bf16Kernels& kernels, AttentionFn forward, AttentionFn backward) {
  Bf16Attention a;
  const std::shared_ptr<std::map<const Bf16*, Tensor<float>>>& lse = a.lse;
  a.forward = [&kernels, forward = std::move(forward), lse](int layer, LayerAttention<Bf16>& t) {
    TrainKernels<float>& k = kernels.inner();
    LayerAttention<float> f = widened_qkv(kernels, t);
    f.out = k.alloc(t.out.rows(), t.out.cols());
    f.lse = k.alloc(t.lse.rows(), t.lse.cols());
    forward(layer, f);
    kernels.narrow(t.out, f.out);
    kernels.narrow(t.lse, f.lse);
    (*lse)[t.lse.data()] = std::move(f.lse);
  };
  a.backward = [&kernels, backward = std::move(backward), lse](int layer, LayerAttention<Bf16>& t) {
    TrainKernels<float>& k = kernels.inner();
    LayerAttention<float> f = widened_qkv(kernels, t);
    f.out = kernels.widen(t.out);
    const auto kept = lse->find(t.lse.data());
    if (kept != lse->end()) {
      f.lse = std::move(kept->second);
      lse->erase(kept);
    } else {
      f.lse = kernels.widen(t.lse);
    }
    f.dout = kernels.widen(t.dout);
    f.dq = k.alloc(t.dq.rows(), t.dq.cols());
    f.dk = k.alloc(t.dk.rows(), t.dk.cols());
    f.dv = k.alloc(t.dv.rows(), t.dv.cols());
    backward(layer, f);
    kernels.narrow(t.dq, f.dq);
    kernels.narrow(t.dk, f.dk);
    kernels.narrow(t.dv, f.dv);
  };
  return a;
}

}  // namespace rm::exec
