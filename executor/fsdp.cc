// FSDP's sharded model state (see fsdp.h).
#include "executor/fsdp.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "executor/mpi_transport.h"
#include "planner/data_parallel.h"
#include "planner/tensor_parallel.h"

namespace rm::exec {

namespace {

// A view of n elements of `t` from `at`.
template <class T>
View<T> slice(Tensor<T>& t, size_t at, size_t n) {
  return {t.data() + at, 1, static_cast<int64_t>(n)};
}

}  // namespace

ShardGroups shard_groups(Sharding sharding, const std::vector<int>& order, int tp, int cp, int dp_shard,
                         int world_rank) {
  auto mine = [world_rank](const std::vector<std::vector<int>>& groups) {
    for (const std::vector<int>& grp : groups)
      if (std::find(grp.begin(), grp.end(), world_rank) != grp.end()) return grp;
    throw std::logic_error("a rank in no data-parallel group");
  };
  std::vector<int> all = mine(fsdp_groups(order, tp, cp));  // its TP rank's, in rank order
  std::sort(all.begin(), all.end());
  switch (sharding) {
    case Sharding::kFsdp: return {all, {world_rank}, Held::kNothing};
    case Sharding::kZero2: return {all, {world_rank}, Held::kParams};
    case Sharding::kZero1: return {all, {world_rank}, Held::kParamsAndGrads};
    case Sharding::kDdp: return {{world_rank}, all, Held::kNothing};
    case Sharding::kHsdp: break;
  }
  ShardGroups g;
  g.shard = mine(hsdp_shard_groups(order, tp, cp, dp_shard));
  g.replica = mine(hsdp_replicate_groups(order, tp, cp, dp_shard));
  return g;
}

// ---- FsdpState: the fp32 shards --------------------------------------------------------

FsdpState::FsdpState(const Transformer& model, const ShardGroups& groups, ReduceType reduce_type,
                     const std::vector<float>& full, TrainKernels<float>& kernels, const std::string& backend,
                     Watchdog* watchdog, double epoch, bool bf16_moments)
    : k_(kernels),
      half_(kernels),
      reduce_type_(reduce_type),
      watchdog_(watchdog),
      bf16_moments_(bf16_moments),
      epoch_(epoch) {
  held_ = groups.held;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  shard_comm_ = group_comm(groups.shard, world_rank_, "FSDP shard");
  replica_comm_ = group_comm(groups.replica, world_rank_, "FSDP replica");
  MPI_Comm_size(shard_comm_, &shard_size_);
  MPI_Comm_rank(shard_comm_, &shard_rank_);
  coll_ = make_shard_collectives(backend, shard_comm_, replica_comm_);
  const auto S = static_cast<size_t>(shard_size_), r = static_cast<size_t>(shard_rank_);
  for (const ParamUnit& pu : model.units()) {
    Unit u;
    u.begin = pu.begin;
    u.size = pu.size();
    u.shard = (u.size + S - 1) / S;
    u.local = local_;
    u.kind = pu.kind;
    u.chunk = pu.chunk;
    local_ += u.shard;
    // This rank's elements of the unit, [lo, hi) in the full vector, and the tensors'
    // parts among them.
    const size_t lo = std::min(u.begin + r * u.shard, pu.end), hi = std::min(lo + u.shard, pu.end);
    for (const ParamTensor& t : model.tensors()) {
      const size_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + static_cast<size_t>(t.rows * t.cols));
      if (b >= e) continue;
      segments_.push_back({u.local + (b - lo), u.local + (e - lo), t.decay});
      if (t.split != TpSplit::kNone) tp_split_.push_back(segments_.back());
    }
    units_.push_back(u);
  }
  current_.assign(units_.size(), 0);
  for (Tensor<float>* t : {&params_, &grads_, &m_, &v_}) {
    if (bf16_moments_ && (t == &m_ || t == &v_)) continue;
    *t = k_.alloc(1, static_cast<int64_t>(local_));
    k_.zero(*t);
  }
  if (bf16_moments_)
    for (Tensor<Bf16>* t : {&m16_, &v16_}) {
      *t = half_.alloc(1, static_cast<int64_t>(local_));
      half_.zero(*t);
    }
  load(StateArray::kParams, full);
}

FsdpState::~FsdpState() {
  coll_.reset();
  MPI_Comm_free(&shard_comm_);
  MPI_Comm_free(&replica_comm_);
}

Tensor<float>& FsdpState::array(StateArray a) {
  switch (a) {
    case StateArray::kParams: return params_;
    case StateArray::kGrads: return grads_;
    case StateArray::kMoment1: return m_;
    case StateArray::kMoment2: return v_;
  }
  return params_;
}

Tensor<Bf16>* FsdpState::bf16_moment(StateArray a) {
  if (!bf16_moments_) return nullptr;
  return a == StateArray::kMoment1 ? &m16_ : a == StateArray::kMoment2 ? &v16_ : nullptr;
}

std::vector<float> FsdpState::download(StateArray a) {
  std::vector<float> local(local_);
  const auto n = static_cast<int64_t>(local_);
  if (const Tensor<Bf16>* stored = bf16_moment(a)) {
    std::vector<Bf16> host(local_);
    half_.download(host.data(), stored->data(), n);
    cpu_train_kernels<float>().from_bf16(local.data(), host.data(), n);  // host memory
  } else {
    k_.download(local.data(), array(a).data(), n);
  }
  return local;
}

void FsdpState::upload(StateArray a, const std::vector<float>& local) {
  const auto n = static_cast<int64_t>(local_);
  if (Tensor<Bf16>* stored = bf16_moment(a)) {  // a checkpoint's fp32 moments, rounded as the update stores them
    std::vector<Bf16> host(local_);
    cpu_train_kernels<float>().to_bf16(host.data(), local.data(), n);
    half_.upload(stored->data(), host.data(), n);
  } else {
    k_.upload(array(a).data(), local.data(), n);
  }
}

void FsdpState::count_unsharded(double bytes) {
  unsharded_ = static_cast<size_t>(static_cast<double>(unsharded_) + bytes);
  peak_unsharded_ = std::max(peak_unsharded_, unsharded_);
}

void FsdpState::record(const char* kind, int unit, double t0, size_t element_bytes) {
  const double t1 = MPI_Wtime();
  comm_s_ += t1 - t0;
  int group = shard_size_;
  if (std::string(kind) == "all_reduce") MPI_Comm_size(replica_comm_, &group);
  Measurement m = collective_record(
      world_rank_, step_, static_cast<int>(records_.size()), kind, group,
      static_cast<double>(unit < 0 ? local_ : units_[static_cast<size_t>(unit)].size) * element_bytes, t0, t1, epoch_);
  m.backward = std::string(kind) != "all_gather";
  m.layer = unit;
  records_.push_back(m);
}

int FsdpState::next_unit(int unit) const {
  const int n = static_cast<int>(units_.size());
  const Unit& u = units_[static_cast<size_t>(unit)];
  // A block of the same pipeline chunk (a pipeline stage's next step at a chunk's end is
  // another micro-batch's or chunk's, not known here: no guess).
  auto block_of_chunk = [&](int v) {
    return v >= 0 && v < n && units_[static_cast<size_t>(v)].kind == ParamUnit::kBlock &&
           units_[static_cast<size_t>(v)].chunk == u.chunk;
  };
  if (u.kind == ParamUnit::kEmbedding) return n > 1 ? 1 : -1;  // the forward starts
  if (u.kind == ParamUnit::kHead) return block_of_chunk(unit - 1) ? unit - 1 : -1;  // the backward starts
  if (unit > last_gathered_) {  // forward: the next block, or the head after the last
    if (block_of_chunk(unit + 1)) return unit + 1;
    return unit + 1 < n && units_[static_cast<size_t>(unit + 1)].kind == ParamUnit::kHead ? unit + 1 : -1;
  }
  return block_of_chunk(unit - 1) ? unit - 1 : -1;  // backward, down to the chunk's first block
}

void FsdpState::wait_gather(int unit, size_t element_bytes) {
  watchdog_->arm("the FSDP all-gather of unit " + std::to_string(unit));
  const double t0 = MPI_Wtime();
  coll_->wait_all_gather();
  record("all_gather", unit, t0, element_bytes);
  watchdog_->disarm();
}

void FsdpState::zero_grads() { k_.zero(grads_); }

void FsdpState::reduce_scatter(const void* full, void* out, int unit) {
  watchdog_->arm("the FSDP reduce-scatter of unit " + std::to_string(unit));
  const double t0 = MPI_Wtime();
  coll_->reduce_scatter(full, out, units_[static_cast<size_t>(unit)].shard, reduce_type_, unit);
  record("reduce_scatter", unit, t0, element_bytes(reduce_type_));
  watchdog_->disarm();
}

void FsdpState::finish_gradients() {
  watchdog_->arm("comparing the ranks' FSDP collectives");
  coll_->check_order();
  watchdog_->disarm();
  int replicas = 1;
  MPI_Comm_size(replica_comm_, &replicas);
  if (replicas == 1) return;
  watchdog_->arm("the gradient all-reduce");
  const double t0 = MPI_Wtime();
  if (reduce_type_ == ReduceType::kBfloat16) {  // the fp32 sums narrowed, summed, widened
    Tensor<Bf16> narrowed = half_.alloc(1, static_cast<int64_t>(local_));
    half_.narrow(narrowed, grads_);
    coll_->all_reduce_replicas(narrowed.data(), local_, reduce_type_, -1);
    k_.from_bf16(grads_.data(), narrowed.data(), static_cast<int64_t>(local_));
  } else {
    coll_->all_reduce_replicas(grads_.data(), local_, reduce_type_, -1);
  }
  record("all_reduce", -1, t0, element_bytes(reduce_type_));
  watchdog_->disarm();
}

double FsdpState::grad_squared_norm(bool tp_whole_tensors) {
  double sq = 0;
  if (tp_whole_tensors) {
    sq = k_.squared_norm(grads_);  // padding is zero
  } else {
    for (const AdamWSegment& s : tp_split_) sq += k_.squared_norm(slice(grads_, s.begin, s.end - s.begin));
  }
  MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, shard_comm_);
  return sq;
}

void FsdpState::optimizer_step(const AdamWConfig& cfg, double grad_norm) {
  if (bf16_moments_) adamw_update(cfg, segments_, grad_norm, optimizer_steps_, k_, params_, grads_, m16_, v16_);
  else adamw_update(cfg, segments_, grad_norm, optimizer_steps_, k_, params_, grads_, m_, v_);
  ++optimizer_steps_;
  std::fill(current_.begin(), current_.end(), 0);  // held parameters are stale now
}

std::vector<float> FsdpState::unshard(StateArray which) {
  const std::vector<float> local = download(which);
  size_t n = 0;
  for (const Unit& u : units_) n = std::max(n, u.begin + u.size);
  std::vector<float> full(n);
  std::vector<float> buf;
  for (const Unit& u : units_) {
    buf.assign(u.shard * static_cast<size_t>(shard_size_), 0.0f);
    watchdog_->arm("gathering the model state for a checkpoint");
    MPI_Allgather(local.data() + u.local, static_cast<int>(u.shard), MPI_FLOAT, buf.data(),
                  static_cast<int>(u.shard), MPI_FLOAT, shard_comm_);
    watchdog_->disarm();
    std::copy_n(buf.begin(), u.size, full.begin() + static_cast<std::ptrdiff_t>(u.begin));
  }
  return full;
}

void FsdpState::load(StateArray which, const std::vector<float>& full) {
  std::vector<float> local(local_, 0.0f);
  for (const Unit& u : units_) {
    const size_t lo = std::min(u.shard * static_cast<size_t>(shard_rank_), u.size);
    const size_t hi = std::min(lo + u.shard, u.size);
    std::copy(full.begin() + static_cast<std::ptrdiff_t>(u.begin + lo),
              full.begin() + static_cast<std::ptrdiff_t>(u.begin + hi),
              local.begin() + static_cast<std::ptrdiff_t>(u.local));
  }
  upload(which, local);
  if (which == StateArray::kParams) std::fill(current_.begin(), current_.end(), 0);
}

std::vector<Measurement> FsdpState::take_records() {
  comm_s_ = 0;
  std::vector<Measurement> r;
  r.swap(records_);
  return r;
}

// ---- FsdpParams<C>: the units as the pass reads them ------------------------------------

template <class C>
FsdpParams<C>::FsdpParams(const Transformer& model, const ShardGroups& groups, ReduceType reduce_type,
                          const std::vector<float>& full, TrainKernels<float>& kernels, TrainKernels<C>& pass,
                          const std::string& backend, Watchdog* watchdog, double epoch, bool bf16_moments)
    : FsdpState(model, groups, reduce_type, full, kernels, backend, watchdog, epoch, bf16_moments), pass_(pass) {
  gathered_.resize(units_.size());
  unsharded_grads_.resize(units_.size());
}

template <class C>
FsdpParams<C>::~FsdpParams() {
  if (prefetched_ >= 0) coll_->wait_all_gather();  // its buffer is about to go
}

template <class C>
bool FsdpParams<C>::direct() const {
  return std::is_same_v<C, float> && shard_size_ == 1;
}

template <class C>
Tensor<C> FsdpParams<C>::hold(size_t n) {
  Tensor<C> t = pass_.alloc(1, static_cast<int64_t>(n));
  count_unsharded(static_cast<double>(n * sizeof(C)));
  return t;
}

template <class C>
void FsdpParams<C>::drop(Tensor<C>& buffer) {
  count_unsharded(-static_cast<double>(static_cast<size_t>(buffer.size()) * sizeof(C)));
  buffer = Tensor<C>();
}

template <class C>
void FsdpParams<C>::post_gather(int unit) {
  if (holds_params() && current_[static_cast<size_t>(unit)]) return;  // held since the step began
  const Unit& u = units_[static_cast<size_t>(unit)];
  Tensor<C>& buf = gathered_[static_cast<size_t>(unit)];
  if (buf.data() != nullptr) drop(buf);  // held from the step before: stale
  buf = hold(u.shard * static_cast<size_t>(shard_size_));
  if (holds_params()) current_[static_cast<size_t>(unit)] = 1;
  // The fault injection (fsdp.h): the next block's chunk, of the same size, in its place.
  const int source = step_ == wrong_unit_step_ && unit == 1 && units_.size() > 3 ? 2 : unit;
  // This rank's chunk in place (in the pass's type), then the collective fills the others
  // (the contract's layout).
  C* mine = buf.data() + u.shard * static_cast<size_t>(shard_rank_);
  const float* shard = params_.data() + units_[static_cast<size_t>(source)].local;
  if constexpr (std::is_same_v<C, float>) {
    k_.copy({mine, 1, static_cast<int64_t>(u.shard)}, {shard, 1, static_cast<int64_t>(u.shard)});
  } else {
    k_.to_bf16(mine, shard, static_cast<int64_t>(u.shard));
  }
  if (shard_size_ == 1) return;  // nothing to gather: the conversion was all
  coll_->start_all_gather(buf.data(), u.shard * sizeof(C), source);
  prefetched_ = unit;
}

template <class C>
void FsdpParams<C>::post_late_gather() {
  if (late_gather_ < 0) return;
  post_gather(late_gather_);
  late_gather_ = -1;
}

template <class C>
void FsdpParams<C>::wait_prefetch(bool keep) {
  const int unit = prefetched_;
  wait_gather(unit, sizeof(C));
  prefetched_ = -1;
  if (!keep && !holds_params()) drop(gathered_[static_cast<size_t>(unit)]);  // held: good all step
}

template <class C>
const C* FsdpParams<C>::gather(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  if constexpr (std::is_same_v<C, float>) {
    if (direct()) return params_.data() + u.local;  // the shard is the whole unit
  }
  post_late_gather();
  if (prefetched_ >= 0) wait_prefetch(prefetched_ == unit);
  Tensor<C>& buf = gathered_[static_cast<size_t>(unit)];
  if (buf.data() == nullptr || (holds_params() && !current_[static_cast<size_t>(unit)])) {
    // Not prefetched (nor held since the step began): gather it now.
    post_gather(unit);
    if (prefetched_ >= 0) wait_prefetch(true);
  }
  const int next = next_unit(unit);
  last_gathered_ = unit;
  if (next >= 0 && shard_size_ > 1) {
    if (step_ == late_gather_step_) late_gather_ = next;  // the fault (fsdp.h): posted by the next call
    else post_gather(next);
  }
  return buf.data();
}

template <class C>
void FsdpParams<C>::release(int unit) {
  if (!direct() && !holds_params()) drop(gathered_[static_cast<size_t>(unit)]);
}

template <class C>
C* FsdpParams<C>::grads(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  if constexpr (std::is_same_v<C, float>) {
    if (direct()) return grads_.data() + u.local;
  }
  Tensor<C>& buf = unsharded_grads_[static_cast<size_t>(unit)];
  // zero1 accumulates the step's micro-steps in one whole buffer per unit.
  if (held_ == Held::kParamsAndGrads && micro_step_ > 0 && buf.data() != nullptr) return buf.data();
  if (buf.data() != nullptr) drop(buf);
  buf = hold(u.shard * static_cast<size_t>(shard_size_));
  pass_.zero(buf);
  return buf.data();
}

template <class C>
void FsdpParams<C>::reduce(int unit) {
  if (direct()) return;
  post_late_gather();
  if (held_ == Held::kParamsAndGrads && micro_step_ < micro_steps_ - 1) return;  // zero1: the last only
  const Unit& u = units_[static_cast<size_t>(unit)];
  Tensor<C>& buf = unsharded_grads_[static_cast<size_t>(unit)];
  const auto n = static_cast<int64_t>(u.shard) * shard_size_, count = static_cast<int64_t>(u.shard);
  Tensor<float> mine;  // this rank's summed chunk, in fp32
  if (shard_size_ == 1) {  // nothing to sum (C is Bf16: fp32 on one rank is direct())
    if constexpr (std::is_same_v<C, Bf16>) mine = half_.widen(buf);
  } else if (reduce_type_ == ReduceType::kBfloat16) {
    // Summed in bf16 (the buffer itself, or its narrowed copy), widened into the shard.
    Tensor<Bf16> narrowed;
    const Bf16* full = nullptr;
    if constexpr (std::is_same_v<C, Bf16>) {
      full = buf.data();
    } else {
      narrowed = half_.alloc(1, n);
      k_.to_bf16(narrowed.data(), buf.data(), n);
      full = narrowed.data();
    }
    Tensor<Bf16> chunk = half_.alloc(1, count);
    reduce_scatter(full, chunk.data(), unit);
    mine = half_.widen(chunk);
  } else {
    // Summed in fp32: the buffer itself, or its widened copy.
    Tensor<float> wide;
    const float* full = nullptr;
    if constexpr (std::is_same_v<C, float>) {
      full = buf.data();
    } else {
      wide = half_.widen(buf);
      full = wide.data();
    }
    mine = k_.alloc(1, count);
    reduce_scatter(full, mine.data(), unit);
  }
  k_.add(slice(grads_, u.local, u.shard), mine);
  drop(buf);
}

template class FsdpParams<float>;
template class FsdpParams<Bf16>;

}  // namespace rm::exec
