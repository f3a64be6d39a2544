// The ring attention of a training step (see ring_attention.h).
#include "executor/ring_attention.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "planner/schedule.h"
#include "planner/token_layout.h"

namespace rm::exec {

namespace {

// A pipeline's stage runs the attention of a plan of its own: its G/pp GPUs, its part of
// the order (stage s's GPUs are [s G/pp, (s + 1) G/pp), planner/pipeline_parallel.h),
// renumbered from 0, one stage. Returns the first GPU of `rank`'s stage.
int stage_plan(Plan& plan, int rank) {
  const int per_stage = plan.job.gpus / plan.choice.pp, base = rank / per_stage * per_stage;
  std::vector<int> order(plan.choice.order.begin() + base, plan.choice.order.begin() + base + per_stage);
  for (int& g : order) {
    g -= base;
    if (g < 0 || g >= per_stage) throw std::logic_error("ring attention: a pipeline stage's order leaves its GPUs");
  }
  plan.job.gpus = per_stage;
  plan.choice.order = order;
  plan.choice.pp = 1;
  plan.choice.virtual_stages = 1;
  plan.choice.account_for_embedding_in_pipeline_split = false;
  plan.choice.account_for_loss_in_pipeline_split = false;
  return base;
}

// The stage's op lists with their GPU ids (ranks, peers, groups) moved up by `base`.
OpSchedule shifted(OpSchedule local, int base, int gpus) {
  OpSchedule out = std::move(local);
  std::vector<RankSchedule> ranks(static_cast<size_t>(gpus));
  for (size_t i = 0; i < out.ranks.size(); ++i) {
    RankSchedule& r = out.ranks[i];
    r.gpu += base;
    for (Op& op : r.ops)
      if (op.peer >= 0) op.peer += base;
    ranks[i + static_cast<size_t>(base)] = std::move(r);
  }
  out.ranks = std::move(ranks);
  for (std::vector<int>& g : out.groups)
    for (int& id : g) id += base;
  return out;
}

}  // namespace

RingAttention::RingAttention(const LoadedPlanFile& lp, const std::string& plan_path, int rank,
                             const std::string& backend, Watchdog* watchdog) {
  Plan plan = lp.plan;
  plan.job.workload = Workload::kAttention;
  plan.job.passes = Passes::kForwardBackward;
  plan.choice.micro_batch = 1;  // one sequence per call: train loops over the micro-batch
  plan.choice.grad_accum = 1;
  const int base = plan.choice.pp > 1 ? stage_plan(plan, rank) : 0;
  ScheduleOptions so;
  so.only_gpus = {rank - base};
  so.where = plan_path;
  std::optional<Fabric> stage_fabric;  // a pipeline stage's GPUs; without one, the plan's fabric
  const Fabric& fabric = lp.plan.choice.pp > 1
                             ? stage_fabric.emplace(lp.topology, plan.job.gpus)
                             : *lp.fabric;
  const OpSchedule whole = shifted(generate_schedule(plan, lp.model, fabric, so), base, lp.plan.job.gpus);
  const RankSchedule& me = whole.ranks.at(static_cast<size_t>(rank));
  ring_ = plan_replica(plan, rank - base);  // a2a+p2p's groups span several of the schedule's rings
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

  for (const Op& op : bwd)
    if (op.kind == OpKind::kBeginPass) {
      a2a_keeps_view_ = a2a_member(me) >= 0 && op.compute == ComputeKind::kAttentionBackward;
      break;
    }

  const TokenLayout layout = ring_token_layout(plan);
  const AttentionShape shape = plan_attention_shape(plan, lp.model);
  tokens_ = rank_token_indices(plan, position_, std::max(0, a2a_member(me)));

  if (watchdog) watchdog->arm_setup(backend);
  backend_ = make_backend(backend);
  backend_->setup(shape, tokens_, 0);  // inputs are replaced by load() before every pass
  const FaultSpec no_fault;
  forward_loop_ = std::make_unique<RingLoop>(*backend_, forward_ops_, rank, layout, shape,
                                             watchdog, no_fault);
  backward_loop_ = std::make_unique<RingLoop>(*backend_, backward_ops_, rank, layout, shape,
                                              watchdog, no_fault);
  if (watchdog) watchdog->disarm();
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
  backend_->load(t.q.data(), t.k.data(), t.v.data(), nullptr, nullptr, nullptr);
  run_part(*forward_loop_, layer);
  backend_->store_forward(t.out.data(), t.lse.data());
  if (a2a_keeps_view_) backend_->a2a_save(t.a2a_view);
}

void RingAttention::backward(int layer, LayerAttention<float>& t) {
  backend_->load(t.q.data(), t.k.data(), t.v.data(), t.dout.data(), t.out.data(), t.lse.data());
  if (a2a_keeps_view_) backend_->a2a_restore(t.a2a_view);
  run_part(*backward_loop_, layer);
  backend_->store_backward(t.dq.data(), t.dk.data(), t.dv.data());
}

std::vector<Measurement> RingAttention::take_records() {
  std::vector<Measurement> r;
  r.swap(records_);
  return r;
}

}  // namespace rm::exec
