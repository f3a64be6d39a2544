// Backend factory and the deterministic input generator every backend shares.
#include "executor/backend.h"

#include <algorithm>

#include "executor/verify.h"
#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/token_layout.h"
#include "executor/cuda_module.h"

namespace rm::exec {

AttentionShape plan_attention_shape(const Plan& plan, const ModelSpec& model) {
  AttentionShape shape;
  shape.c = plan.job.seq_len / plan.choice.cp;
  shape.d = model.head_dim;
  shape.h = model.heads / plan.choice.tp;  // a TP member's heads (planner/tensor_parallel.h)
  shape.h_kv = model.kv_heads / plan.choice.tp;
  shape.block_q = plan.choice.block_q;
  shape.block_kv = plan.choice.block_kv;
  shape.causal = plan.job.causal;
  shape.window = effective_window(model, plan.job);
  shape.segments = plan.choice.load_balance == LoadBalance::kZigzag ? 2 : 1;
  return shape;
}

TokenLayout ring_token_layout(const Plan& plan) {
  const int a2a = plan.choice.strategy == Strategy::kUsp ? plan.choice.cp_a2a : 1;
  return TokenLayout{plan.choice.load_balance, plan.job.seq_len, plan.choice.cp / a2a};
}

std::vector<int64_t> member_slice(const std::vector<int64_t>& position_tokens, int members, int i) {
  const size_t c = position_tokens.size() / static_cast<size_t>(members);
  return {position_tokens.begin() + static_cast<std::ptrdiff_t>(c * i),
          position_tokens.begin() + static_cast<std::ptrdiff_t>(c * (i + 1))};
}

std::vector<int64_t> rank_token_indices(const Plan& plan, int position, int a2a_index) {
  const TokenLayout layout = ring_token_layout(plan);
  std::vector<int64_t> tokens(static_cast<size_t>(layout.tokens_per_rank()));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = layout.global_index(position, static_cast<int64_t>(i));
  if (plan.choice.strategy != Strategy::kUsp) return tokens;
  return member_slice(tokens, plan.choice.cp_a2a, a2a_index);
}

int plan_replica(const Plan& plan, int rank) {
  const auto& order = plan.choice.order;
  const auto at = std::find(order.begin(), order.end(), rank);
  return static_cast<int>(at - order.begin()) / plan.choice.cp;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

float input_value(uint64_t seed, InputTensor which, int head, int64_t token, int dim) {
  uint64_t x = splitmix64(seed ^ (static_cast<uint64_t>(which) << 56));
  x = splitmix64(x ^ static_cast<uint64_t>(head));
  x = splitmix64(x ^ static_cast<uint64_t>(token));
  x = splitmix64(x ^ static_cast<uint64_t>(dim));
  // Top 24 bits -> [0, 1) exactly representable in float, then [-1, 1).
  return static_cast<float>(x >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

double Backend::verify_tolerance() const { return kVerifyTolerance; }

namespace {
[[noreturn]] void cannot_train(const std::string& backend) {
  throw std::runtime_error("the " + backend + " backend does not load training tensors; train "
                           "with --backend cpu");
}
}  // namespace

void Backend::load(const float*, const float*, const float*, const float*, const float*,
                   const float*) {
  cannot_train(name());
}
void Backend::store_forward(float*, float*) const { cannot_train(name()); }
void Backend::store_backward(float*, float*, float*) const { cannot_train(name()); }

namespace {
[[noreturn]] void cannot_a2a(const std::string& backend) {
  throw std::runtime_error("the " + backend + " backend does not run all-to-all CP (cp_comm_type a2a); run "
                           "it with --backend cpu, or re-plan with --cp-comm-type p2p or all_gather");
}
}  // namespace

void Backend::a2a_connect(int, const std::vector<std::vector<int64_t>>&) { cannot_a2a(name()); }
std::size_t Backend::a2a_bytes(A2aPayload) const { cannot_a2a(name()); }
void Backend::a2a_pack(A2aPayload, const std::vector<int>&) { cannot_a2a(name()); }
void Backend::a2a_unpack(A2aPayload, const std::vector<int>&) { cannot_a2a(name()); }
void Backend::a2a_attention_forward() { cannot_a2a(name()); }
void Backend::a2a_attention_backward() { cannot_a2a(name()); }
void Backend::a2a_save(std::vector<float>&) const { cannot_a2a(name()); }
void Backend::a2a_restore(const std::vector<float>&) { cannot_a2a(name()); }

void check_backend_available(const std::string& name) {
  if (name == "cpu") return;
  if (name == "cuda") {
    if (cuda_module().device_count() == 0)
      throw InputError("--backend: cuda: no CUDA device visible on this machine (or no usable "
                       "driver); use --backend cpu");
    return;
  }
  throw InputError("--backend: expected cpu or cuda (got '" + name + "')");
}

std::unique_ptr<Backend> make_backend(const std::string& name) {
  check_backend_available(name);
  if (name == "cuda") return cuda_module().make_backend();
  return make_cpu_backend();
}

}  // namespace rm::exec
