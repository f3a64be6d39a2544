// The plan's ring attention as a layer of a model being trained: every attention layer of
// `ringmaster train` calls forward() and later backward() with its real Q, K, V, and the
// ring loop (ring_loop.h) walks the plan's op list for one layer, exactly as `run` does,
// over the plan's ring of MPI ranks with the plan's schedule, order, load balance, tiles
// and sub-blocking. No second ring implementation: this only loads the tensors into the
// backend (Backend::load, from the train kernels' memory: they stay on the device), runs
// the forward or the backward part of the op list and stores the results back.
//
// The op list is generate_schedule()'s for the plan with workload "attention" and passes
// "forward-backward"; it is cut at the first op of the backward pass (a recompute pass
// under full checkpointing falls in the backward part and recomputes out, lse from the
// same Q, K, V). Every rank of a ring calls forward() and backward() for the same layers
// in the same order.
//
// a2a (all-to-all CP): between its all-to-alls a layer's attention works on the head-sharded
// view inside the backend (backend.h), which the next call's forward overwrites. So after
// each forward the view is saved with the layer's tensors of that sequence
// (LayerAttention::a2a_view, Backend::a2a_save) and restored before their backward, unless
// the backward part starts with a recompute pass (full checkpointing), which rebuilds it
// from the same Q, K, V.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend.h"
#include "executor/measurements.h"
#include "executor/ring_loop.h"
#include "executor/transformer.h"
#include "executor/watchdog.h"
#include "planner/plan_loader.h"

namespace rm::exec {

class RingAttention {
 public:
  // `rank` is this MPI rank (= GPU id of the plan); the backend is made and set up here.
  RingAttention(const LoadedPlanFile& lp, const std::string& plan_path, int rank,
                const std::string& backend, Watchdog* watchdog);

  int ring() const { return ring_; }          // which replica (CP group, 0..dp-1)
  // The largest relative error run --verify accepts from the backend's arithmetic
  // (Backend::verify_tolerance: bf16 attention inputs on cuda).
  double verify_tolerance() const { return backend_->verify_tolerance(); }
  int position() const { return position_; }  // position in its schedule's ring
  // This rank's token indices within a sequence (c of them, increasing).
  const std::vector<int64_t>& tokens() const { return tokens_; }

  // t.q, t.k, t.v -> t.out, t.lse (see transformer.h's AttentionFn).
  void forward(int layer, LayerAttention<float>& t);
  // t.q, t.k, t.v, t.out, t.lse, t.dout -> t.dq, t.dk, t.dv.
  void backward(int layer, LayerAttention<float>& t);

  // The records of every op run since the last call (`iteration` = training step,
  // `layer` = the model's layer), and the seconds blocked in waits among them.
  void set_step(int step) { step_ = step; }
  std::vector<Measurement> take_records();
  // The backend clock's reading the records' start times count from.
  double epoch() const { return epoch_; }
  double exposed_comm_s() const { return exposed_s_; }
  void reset_exposed() { exposed_s_ = 0; }
  // Logs the ring's transfers on `log` from now on (post_log.h).
  void log_posts(PostLog* log) {
    forward_loop_->log_posts(log);
    backward_loop_->log_posts(log);
  }

 private:
  void run_part(RingLoop& loop, int layer);
  std::unique_ptr<Backend> backend_;
  OpSchedule forward_ops_, backward_ops_;
  std::unique_ptr<RingLoop> forward_loop_, backward_loop_;
  std::vector<int64_t> tokens_;
  int ring_ = 0, position_ = 0;
  int step_ = 0;
  double epoch_ = 0;
  double exposed_s_ = 0;
  std::vector<Measurement> records_;
  bool a2a_keeps_view_ = false;  // a2a without a recompute pass (above)
};

}  // namespace rm::exec
