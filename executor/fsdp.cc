// FSDP's sharded model state over MPI (see fsdp.h).
#include "executor/fsdp.h"

#include <algorithm>

namespace rm::exec {

FsdpParams::FsdpParams(const Transformer& model, Sharding sharding, const std::vector<float>& full,
                       Watchdog* watchdog, double epoch)
    : watchdog_(watchdog), epoch_(epoch) {
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_dup(sharding == Sharding::kFsdp ? MPI_COMM_WORLD : MPI_COMM_SELF, &shard_comm_);
  MPI_Comm_dup(sharding == Sharding::kFsdp ? MPI_COMM_SELF : MPI_COMM_WORLD, &replica_comm_);
  MPI_Comm_size(shard_comm_, &shard_size_);
  MPI_Comm_rank(shard_comm_, &shard_rank_);
  const auto S = static_cast<size_t>(shard_size_), r = static_cast<size_t>(shard_rank_);
  size_t local = 0;
  for (const ParamUnit& pu : model.units()) {
    Unit u;
    u.begin = pu.begin;
    u.size = pu.size();
    u.shard = (u.size + S - 1) / S;
    u.local = local;
    local += u.shard;
    // This rank's elements of the unit, [lo, hi) in the full vector, and the tensors'
    // parts among them.
    const size_t lo = std::min(u.begin + r * u.shard, pu.end), hi = std::min(lo + u.shard, pu.end);
    for (const ParamTensor& t : model.tensors()) {
      const size_t b = std::max(lo, t.offset), e = std::min(hi, t.offset + static_cast<size_t>(t.rows * t.cols));
      if (b < e) segments_.push_back({u.local + (b - lo), u.local + (e - lo), t.decay});
    }
    units_.push_back(u);
  }
  gathered_.resize(units_.size());
  unsharded_grads_.resize(units_.size());
  params_ = shard(full);
  grads_.assign(params_.size(), 0.0f);
}

FsdpParams::~FsdpParams() {
  if (prefetched_ >= 0) MPI_Wait(&prefetch_, MPI_STATUS_IGNORE);  // its buffer is about to go
  MPI_Comm_free(&shard_comm_);
  MPI_Comm_free(&replica_comm_);
}

void FsdpParams::hold(std::vector<float>& buffer, size_t n) {
  buffer.assign(n, 0.0f);
  unsharded_ += n * sizeof(float);
  peak_unsharded_ = std::max(peak_unsharded_, unsharded_);
}

void FsdpParams::drop(std::vector<float>& buffer) {
  unsharded_ -= buffer.size() * sizeof(float);
  std::vector<float>().swap(buffer);
}

void FsdpParams::record(const char* kind, int unit, double t0) {
  const double t1 = MPI_Wtime();
  comm_s_ += t1 - t0;
  Measurement m;
  m.rank = world_rank_;
  m.iteration = step_;
  m.op = static_cast<int>(records_.size());
  m.backward = std::string(kind) != "all_gather";
  m.layer = unit;
  m.step = -1;
  m.kind = kind;
  m.bytes = static_cast<double>(unit < 0 ? params_.size() : units_[static_cast<size_t>(unit)].size) *
            sizeof(float);
  m.start = t0 - epoch_;
  m.seconds = t1 - t0;
  records_.push_back(m);
}

int FsdpParams::next_unit(int unit) const {
  const int last = static_cast<int>(units_.size()) - 1;  // the head
  if (unit == 0) return last > 0 ? 1 : -1;                // the forward starts
  if (unit == last) return unit - 1;                      // the backward starts from the head
  if (unit > last_gathered_) return unit + 1;             // forward
  return unit - 1 >= 1 ? unit - 1 : -1;                   // backward, down to the first block
}

void FsdpParams::post_gather(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  std::vector<float>& buf = gathered_[static_cast<size_t>(unit)];
  hold(buf, u.shard * static_cast<size_t>(shard_size_));
  std::copy_n(params_.begin() + static_cast<std::ptrdiff_t>(u.local), u.shard,
              buf.begin() + static_cast<std::ptrdiff_t>(u.shard * static_cast<size_t>(shard_rank_)));
  MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf.data(), static_cast<int>(u.shard), MPI_FLOAT,
                 shard_comm_, &prefetch_);
  prefetched_ = unit;
}

void FsdpParams::wait_prefetch(bool keep) {
  const int unit = prefetched_;
  watchdog_->arm("the FSDP all-gather of unit " + std::to_string(unit));
  const double t0 = MPI_Wtime();
  MPI_Wait(&prefetch_, MPI_STATUS_IGNORE);
  record("all_gather", unit, t0);
  watchdog_->disarm();
  prefetched_ = -1;
  if (!keep) drop(gathered_[static_cast<size_t>(unit)]);
}

const float* FsdpParams::gather(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  if (shard_size_ == 1) return params_.data() + u.local;  // the shard is the whole unit
  if (prefetched_ >= 0) wait_prefetch(prefetched_ == unit);
  std::vector<float>& buf = gathered_[static_cast<size_t>(unit)];
  if (buf.empty()) {  // not prefetched: gather it now
    post_gather(unit);
    wait_prefetch(true);
  }
  const int next = next_unit(unit);
  last_gathered_ = unit;
  if (next >= 0) post_gather(next);
  return buf.data();
}

void FsdpParams::release(int unit) {
  if (shard_size_ > 1) drop(gathered_[static_cast<size_t>(unit)]);
}

float* FsdpParams::grads(int unit) {
  const Unit& u = units_[static_cast<size_t>(unit)];
  if (shard_size_ == 1) return grads_.data() + u.local;
  std::vector<float>& buf = unsharded_grads_[static_cast<size_t>(unit)];
  hold(buf, u.shard * static_cast<size_t>(shard_size_));
  return buf.data();
}

void FsdpParams::reduce(int unit) {
  if (shard_size_ == 1) return;
  const Unit& u = units_[static_cast<size_t>(unit)];
  std::vector<float>& buf = unsharded_grads_[static_cast<size_t>(unit)];
  std::vector<float> mine(u.shard);
  watchdog_->arm("the FSDP reduce-scatter of unit " + std::to_string(unit));
  const double t0 = MPI_Wtime();
  MPI_Reduce_scatter_block(buf.data(), mine.data(), static_cast<int>(u.shard), MPI_FLOAT, MPI_SUM,
                           shard_comm_);
  record("reduce_scatter", unit, t0);
  watchdog_->disarm();
  drop(buf);
  for (size_t i = 0; i < u.shard; ++i) grads_[u.local + i] += mine[i];
}

void FsdpParams::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void FsdpParams::finish_gradients() {
  int replicas = 1;
  MPI_Comm_size(replica_comm_, &replicas);
  if (replicas == 1) return;
  watchdog_->arm("the gradient all-reduce");
  const double t0 = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, grads_.data(), static_cast<int>(grads_.size()), MPI_FLOAT, MPI_SUM,
                replica_comm_);
  record("all_reduce", -1, t0);
  watchdog_->disarm();
}

double FsdpParams::grad_squared_norm() const {
  double sq = 0;
  for (float g : grads_) sq += static_cast<double>(g) * g;  // padding is zero
  MPI_Allreduce(MPI_IN_PLACE, &sq, 1, MPI_DOUBLE, MPI_SUM, shard_comm_);
  return sq;
}

std::vector<float> FsdpParams::unshard(const std::vector<float>& local) {
  if (prefetched_ >= 0) wait_prefetch(false);
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

std::vector<float> FsdpParams::shard(const std::vector<float>& full) const {
  std::vector<float> local(units_.empty() ? 0 : units_.back().local + units_.back().shard, 0.0f);
  for (const Unit& u : units_) {
    const size_t lo = std::min(u.shard * static_cast<size_t>(shard_rank_), u.size);
    const size_t hi = std::min(lo + u.shard, u.size);
    std::copy(full.begin() + static_cast<std::ptrdiff_t>(u.begin + lo),
              full.begin() + static_cast<std::ptrdiff_t>(u.begin + hi),
              local.begin() + static_cast<std::ptrdiff_t>(u.local));
  }
  return local;
}

std::vector<Measurement> FsdpParams::take_records() {
  comm_s_ = 0;
  std::vector<Measurement> r;
  r.swap(records_);
  return r;
}

}  // namespace rm::exec
