// The ring attention of a training step (see ring_attention.h).
#include "executor/ring_attention.h"

#include <stdexcept>

#include "planner/schedule.h"
#include "planner/token_layout.h"

namespace rm::exec {

RingAttention::RingAttention(const LoadedPlanFile& lp, const std::string& plan_path, int rank,
                             const std::string& backend, Watchdog* watchdog) {
  Plan plan = lp.plan;
  plan.job.workload = Workload::kAttention;
  plan.job.passes = Passes::kForwardBackward;
  plan.choice.micro_batch = 1;  // one sequence per call: train loops over the micro-batch
  plan.choice.grad_accum = 1;
  ScheduleOptions so;
  so.only_gpus = {rank};
  so.where = plan_path;
  const OpSchedule whole = generate_schedule(plan, lp.model, *lp.fabric, so);
  const RankSchedule& me = whole.ranks.at(static_cast<size_t>(rank));
  ring_ = me.ring;
  position_ = me.position;
  size_t cut = 0;
  while (cut < me.ops.size() &&
         !(me.ops[cut].kind == OpKind::kBeginPass && me.ops[cut].backward))
    ++cut;
  if (cut == me.ops.size())
    throw std::runtime_error("ring attention: the op list has no backward pass");
  forward_ops_ = whole;
  backward_ops_ = whole;
  auto& fwd = forward_ops_.ranks[static_cast<size_t>(rank)].ops;
  auto& bwd = backward_ops_.ranks[static_cast<size_t>(rank)].ops;
  fwd.assign(me.ops.begin(), me.ops.begin() + static_cast<std::ptrdiff_t>(cut));
  bwd.assign(me.ops.begin() + static_cast<std::ptrdiff_t>(cut), me.ops.end());

  const TokenLayout layout{plan.choice.load_balance, plan.job.seq_len, plan.choice.cp};
  const AttentionShape shape = plan_attention_shape(plan, lp.model);
  tokens_ = rank_token_indices(plan, position_);

  backend_ = make_backend(backend);
  backend_->setup(shape, tokens_, 0);  // inputs are replaced by load() before every pass
  const FaultSpec no_fault;
  forward_loop_ = std::make_unique<RingLoop>(*backend_, forward_ops_, rank, layout, shape,
                                             watchdog, no_fault);
  backward_loop_ = std::make_unique<RingLoop>(*backend_, backward_ops_, rank, layout, shape,
                                              watchdog, no_fault);
  epoch_ = backend_->now();
}

void RingAttention::run_part(RingLoop& loop, int layer) {
  const size_t first = records_.size();
  loop.run(step_, epoch_, &records_);
  for (size_t i = first; i < records_.size(); ++i) {
    records_[i].layer = layer;
    if (records_[i].kind == "wait") exposed_s_ += records_[i].seconds;
  }
}

void RingAttention::forward(int layer, LayerAttention<float>& t) {
  HostTensors in;
  in.q = t.q;
  in.k = t.k;
  in.v = t.v;
  backend_->load(in);
  run_part(*forward_loop_, layer);
  HostTensors r = backend_->download();
  t.out = std::move(r.out);
  t.lse = std::move(r.lse);
}

void RingAttention::backward(int layer, LayerAttention<float>& t) {
  HostTensors in;
  in.q = t.q;
  in.k = t.k;
  in.v = t.v;
  in.out = t.out;
  in.lse = t.lse;
  in.dout = t.dout;
  backend_->load(in);
  run_part(*backward_loop_, layer);
  HostTensors r = backend_->download();
  t.dq = std::move(r.dq);
  t.dk = std::move(r.dk);
  t.dv = std::move(r.dv);
}

std::vector<Measurement> RingAttention::take_records() {
  std::vector<Measurement> r;
  r.swap(records_);
  return r;
}

}  // namespace rm::exec
