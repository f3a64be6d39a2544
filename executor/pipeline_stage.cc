// A rank's pipeline stage (see pipeline_stage.h).
#include "executor/pipeline_stage.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "executor/mpi_transport.h"

namespace rm::exec {

PipelinePeers::PipelinePeers(int world_rank, int pp, int stage_ranks, Watchdog* watchdog, double epoch)
    : world_rank_(world_rank),
      stage_(world_rank / stage_ranks),
      stage_ranks_(stage_ranks),
      pp_(pp),
      watchdog_(watchdog),
      epoch_(epoch) {
  check_mpi(MPI_Comm_split(MPI_COMM_WORLD, world_rank % stage_ranks, stage_, &comm_),
            "MPI_Comm_split (pipeline stages)");
}

PipelinePeers::~PipelinePeers() {
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

template <class T>
PipelineStage<T>::PipelineStage(TrainKernels<T>& kernels, int world_rank, int pp, int virtual_stages,
                                int stage_ranks, int64_t microbatches, InterleavedWarmup warmup, int64_t rows,
                                int hidden, Watchdog* watchdog, double epoch)
    : PipelinePeers(world_rank, pp, stage_ranks, watchdog, epoch),
      k_(kernels),
      v_(virtual_stages),
      rows_(rows),
      hidden_(hidden) {
  program_ = pp_1f1b_program(pp, virtual_stages, microbatches, true, warmup).stages.at(static_cast<size_t>(stage_));
}

template <class T>
typename PipelineStage<T>::Key PipelineStage<T>::key(const PipelineMessage& msg) const {
  const int micro = msg.tag / v_, chunk = msg.tag % v_;
  if (msg.send) return {micro, chunk};
  if (!msg.gradient) return {micro, stage_ == 0 ? chunk + 1 : chunk};
  return {micro, stage_ == pp_ - 1 ? chunk - 1 : chunk};
}

template <class T>
double PipelineStage<T>::run_step(const std::function<PassTask(int micro, int chunk, StageIo<T>* io)>& start,
                                  const std::function<void(int micro)>& before,
                                  const std::function<size_t(int micro, int chunk)>& held_of, size_t* held) {
  std::map<Key, MicroBatch> live;  // the chunk micro-batches begun and not done
  double loss = 0;
  size_t most = 0;
  // A chunk micro-batch is done once its backward ran and its input gradient, if any, was sent.
  auto retire = [&](const Key& k) {
    MicroBatch& mb = live.at(k);
    if (mb.backward_done && mb.io.input_grad.data() == nullptr) live.erase(k);
  };
  for (const PipelineAction& a : program_) {
    if (a.kind == PipelineAction::kExchange) {
      exchange(a, live);
      for (const PipelineMessage& msg : a.messages)
        if (msg.send && msg.gradient) retire(key(msg));
      continue;
    }
    const Key k{a.micro, a.chunk};
    MicroBatch& mb = live[k];
    before(a.micro);
    if (a.kind == PipelineAction::kForward) {
      if (mb.activation.data() != nullptr) mb.io.input = mb.activation;
      mb.pass.emplace(start(a.micro, a.chunk, &mb.io));
      mb.pass->forward();
      size_t now = 0;
      for (const auto& [other_key, other] : live)
        if (other.pass && !other.backward_done) now += held_of(other_key.first, other_key.second);
      most = std::max(most, now);
    } else {
      if (mb.gradient.data() != nullptr) mb.io.grad = mb.gradient;
      loss += mb.pass->backward();
      mb.backward_done = true;
      mb.pass.reset();  // frees the pass's stored activations
      mb.activation = Tensor<T>();
      mb.gradient = Tensor<T>();
      retire(k);
    }
  }
  if (!live.empty())
    throw std::logic_error("pipeline stage " + std::to_string(stage_) + ": micro-batch " +
                           std::to_string(live.begin()->first.first) + " of chunk " +
                           std::to_string(live.begin()->first.second) + " left unfinished by its program");
  if (held) *held = most;
  return loss;
}

template <class T>
void PipelineStage<T>::exchange(const PipelineAction& a, std::map<Key, MicroBatch>& live) {
  const size_t bytes = static_cast<size_t>(rows_ * hidden_) * sizeof(T);
  std::vector<int> requests;
  for (const PipelineMessage& msg : a.messages) {
    MicroBatch& mb = live[key(msg)];
    const int peer = world_rank_ + (msg.peer - stage_) * stage_ranks_;  // the same rank of that stage
    if (msg.send) {
      const Tensor<T>& t = msg.gradient ? mb.io.input_grad : mb.io.output;
      if (t.data() == nullptr || t.size() != rows_ * hidden_)
        throw std::logic_error("pipeline stage " + std::to_string(stage_) + ": nothing to send for message " +
                               std::to_string(msg.tag));
      const bool wrong = step_ == wrong_tag_step_;
      wrong_tag_step_ = wrong ? -1 : wrong_tag_step_;
      requests.push_back(transport_.isend(t.data(), bytes, peer, msg.tag + (wrong ? 1 : 0)));
    } else {
      Tensor<T>& t = msg.gradient ? mb.gradient : mb.activation;
      t = k_.alloc(rows_, hidden_);
      requests.push_back(transport_.irecv(t.data(), bytes, peer, msg.tag));
    }
    if (log_) log_->message("pipeline", msg.send, peer);
  }
  if (log_) log_->end_step();  // posted together, as Megatron's batched isend/irecv
  const double t0 = MPI_Wtime();
  watchdog_->arm("a pipeline exchange of training step " + std::to_string(step_ + 1) + " (stage " +
                 std::to_string(stage_) + ")");
  for (int r : requests) transport_.wait(r);  // a receive of another micro-batch throws, naming the link
  watchdog_->disarm();
  const double t1 = MPI_Wtime();
  comm_s_ += t1 - t0;
  std::vector<int> peers;  // the ranks the exchange spans: this one and its neighbours in it
  for (const PipelineMessage& msg : a.messages)
    if (std::find(peers.begin(), peers.end(), msg.peer) == peers.end()) peers.push_back(msg.peer);
  records_.push_back(collective_record(world_rank_, step_, static_cast<int>(records_.size()), "pp_exchange",
                                       1 + static_cast<int>(peers.size()),
                                       static_cast<double>(bytes * a.messages.size()), t0, t1, epoch_));
  for (const PipelineMessage& msg : a.messages) {  // what was sent is no longer needed
    if (!msg.send) continue;
    MicroBatch& mb = live.at(key(msg));
    (msg.gradient ? mb.io.input_grad : mb.io.output) = Tensor<T>();
  }
}

double PipelinePeers::sum(double x) { return sum_over(comm_, x, watchdog_, "summing over the pipeline's stages"); }

void PipelinePeers::sum(std::vector<float>& x) {
  if (x.size() > static_cast<size_t>(std::numeric_limits<int>::max()))
    throw std::runtime_error("a model above 2^31 parameters: MPI counts are ints");
  watchdog_->arm("gathering the pipeline stages' model state");
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(x.size()), MPI_FLOAT, MPI_SUM, comm_),
            "MPI_Allreduce (pipeline model state)");
  watchdog_->disarm();
}

std::vector<Measurement> PipelinePeers::take_records() {
  std::vector<Measurement> r;
  r.swap(records_);
  comm_s_ = 0;
  return r;
}

template class PipelineStage<float>;
template class PipelineStage<Bf16>;

}  // namespace rm::exec
