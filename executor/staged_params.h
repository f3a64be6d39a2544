// A ParamAccess (transformer.h) that stages another one's units into the kernels' memory
// (train_kernels.h), for kernels that cannot read host memory (cuda): gather(u) copies
// the unit the inner access gathered into a unit-sized tensor, release(u) drops it;
// grads(u) copies the inner gradient buffer in (it may hold earlier micro-steps' sums)
// and reduce(u) copies it back before the inner reduce. The inner access keeps
// everything else: FSDP's collectives over MPI, the shards, AdamW's state (fsdp.h).
// So a unit crosses the host link twice per pass (parameters in, gradients in and out);
// device-resident shards with NCCL collectives would remove that (not done yet).
#pragma once

#include <vector>

#include "executor/train_kernels.h"
#include "executor/transformer.h"

namespace rm::exec {

template <class T>
class StagedParams : public ParamAccess<T> {
 public:
  StagedParams(TrainKernels<T>& kernels, ParamAccess<T>& inner, const std::vector<ParamUnit>& units)
      : k_(kernels), inner_(inner), units_(units), params_(units.size()), grads_(units.size()),
        host_grads_(units.size(), nullptr) {}

  const T* gather(int u) override {
    const T* host = inner_.gather(u);
    params_[u] = stage(u, host);
    return params_[u].data();
  }
  void release(int u) override {
    params_[u] = Tensor<T>();
    inner_.release(u);
  }
  T* grads(int u) override {
    host_grads_[u] = inner_.grads(u);
    grads_[u] = stage(u, host_grads_[u]);
    return grads_[u].data();
  }
  void reduce(int u) override {
    k_.download(host_grads_[u], grads_[u].data(), grads_[u].size());
    grads_[u] = Tensor<T>();
    inner_.reduce(u);
  }

 private:
  Tensor<T> stage(int u, const T* host) {
    Tensor<T> t = k_.alloc(1, static_cast<int64_t>(units_[u].size()));
    k_.upload(t.data(), host, t.size());
    return t;
  }
  TrainKernels<T>& k_;
  ParamAccess<T>& inner_;
  const std::vector<ParamUnit>& units_;
  std::vector<Tensor<T>> params_, grads_;
  std::vector<T*> host_grads_;  // the inner access's gradient buffers, while staged
};

}  // namespace rm::exec
