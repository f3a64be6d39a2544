// The memory model: hand-computed parts and its shape (monotone in N, falling with CP).
#include <doctest/doctest.h>

#include <algorithm>

#include "planner/memory_model.h"

using namespace rm;

namespace {

ModelSpec llama2_7b() {
  ModelSpec m;
  m.name = "llama2-7b";
  m.layers = 32;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.head_dim = 128;
  m.ffn_hidden = 11008;
  m.vocab = 32000;
  return m;
}

GpuSpec a100() {
  GpuSpec g;
  g.name = "A100";
  g.memory_bytes = 80e9;
  g.peak_flops = 312e12;
  g.runtime_reserve_bytes = 3e9;
  g.element_bytes = 2;
  g.attention = KernelCurve{0.6, 1e6, 200e3, 2.5};
  return g;
}

PlanChoice ring(int cp, int dp, Checkpointing ck = Checkpointing::kNone) {
  PlanChoice c;
  c.cp = cp;
  c.dp = dp;
  c.checkpointing = ck;
  return c;
}

}  // namespace

TEST_CASE("activation bytes per token per layer, by hand") {
  const ModelSpec m = llama2_7b();
  // none: 2·(2·4096 + 2·4096 + 2·4096) + 4·32 + 2·2·4096 + 2·3·11008
  const double attn = 2.0 * (6 * 4096) + 4 * 32;
  CHECK(activation_bytes_per_token_layer(m, Checkpointing::kNone, 2) ==
        attn + 2.0 * 2 * 4096 + 2.0 * 3 * 11008);
  CHECK(activation_bytes_per_token_layer(m, Checkpointing::kSelective, 2) == attn + 2.0 * 2 * 4096);
  CHECK(activation_bytes_per_token_layer(m, Checkpointing::kFull, 2) == 2.0 * 4096);
}

TEST_CASE("ring buffers, by hand") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(8, 1);
  const RingBuffers b = ring_buffers(m, c, 8 * 1024, a100());
  CHECK(b.c == 1024);
  CHECK(b.kv_block == 2.0 * 1024 * 128 * 32 * 2);
  CHECK(b.dkv_block == 2.0 * 1024 * 128 * 32 * 4);
  CHECK(b.kv_ring_buffers == 2);
  CHECK(b.dkv_accumulators == 2);
  c.schedule = Schedule::kBidirectional;
  CHECK(ring_buffers(m, c, 8 * 1024, a100()).kv_ring_buffers == 4);
  // The attention phase is the sum of its parts.
  CHECK(b.attention_backward_bytes() ==
        doctest::Approx(b.grad_stream + 2 * b.kv_block + 2 * b.dkv_block + b.dkv_partial + b.dq +
                        b.dout + b.delta + b.score_tiles));
}

TEST_CASE("model states are sharded over all cp·dp GPUs") {
  const ModelSpec m = llama2_7b();
  const MemoryBreakdown a = memory_breakdown(m, ring(8, 16), 8192, a100());
  const MemoryBreakdown b = memory_breakdown(m, ring(128, 1), 8192 * 16, a100());
  CHECK(a.model_states == doctest::Approx(16 * m.params() / 128));
  CHECK(a.model_states == doctest::Approx(b.model_states));
  CHECK(a.runtime_reserve == 3e9);
}

TEST_CASE("memory grows with N and falls with CP") {
  const ModelSpec m = llama2_7b();
  for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull}) {
    double prev = 0;
    for (int64_t n = 8192; n <= (int64_t{1} << 20); n *= 2) {
      const double t = memory_breakdown(m, ring(16, 8, ck), n, a100()).total();
      CHECK(t > prev);
      prev = t;
    }
    prev = 1e30;
    for (int cp = 1; cp <= 128; cp *= 2) {
      const double t = memory_breakdown(m, ring(cp, 128 / cp, ck), int64_t{1} << 20, a100()).total();
      CHECK(t < prev);
      prev = t;
    }
  }
  // Checkpointing trades memory: none > selective > full at long sequences.
  const int64_t n = 256 * 1024;
  CHECK(memory_breakdown(m, ring(8, 1, Checkpointing::kNone), n, a100()).total() >
        memory_breakdown(m, ring(8, 1, Checkpointing::kSelective), n, a100()).total());
  CHECK(memory_breakdown(m, ring(8, 1, Checkpointing::kSelective), n, a100()).total() >
        memory_breakdown(m, ring(8, 1, Checkpointing::kFull), n, a100()).total());
}

TEST_CASE("all-gather CP holds the whole sequence's K,V: flash-fsdp the whole sequence") {
  const ModelSpec m = llama2_7b();
  PlanChoice r = ring(16, 1);
  PlanChoice ag = r;
  ag.strategy = Strategy::kAllGatherCp;
  const int64_t n = 1 << 20;
  CHECK(memory_breakdown(m, ag, n, a100()).working_set >
        memory_breakdown(m, r, n, a100()).working_set);
  PlanChoice fsdp = ring(1, 16);
  fsdp.strategy = Strategy::kFlashFsdp;
  CHECK(memory_breakdown(m, fsdp, n, a100()).total() > 80e9);
}

TEST_CASE("sliding window: K,V no step needs are not held") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(8, 1);
  c.load_balance = LoadBalance::kContiguous;
  // c = 1024 tokens: a window of 1 (the own token) needs the own block only, no ring
  // buffers; a window of 1025 needs one neighbour's block, the ring's double buffer.
  CHECK(ring_buffers(m, c, 8 * 1024, a100(), {.window = 1}).kv_ring_buffers == 0);
  CHECK(ring_buffers(m, c, 8 * 1024, a100(), {.window = 1}).dkv_accumulators == 0);
  CHECK(ring_buffers(m, c, 8 * 1024, a100(), {.window = 1025}).kv_ring_buffers == 2);
  // all_gather on contiguous chunks gathers the window's blocks: ceil((W-1)/c) + 1.
  c.strategy = Strategy::kAllGatherCp;
  const RingBuffers all = ring_buffers(m, c, 8 * 1024, a100());
  const RingBuffers win = ring_buffers(m, c, 8 * 1024, a100(), {.window = 2048});
  CHECK(all.gathered == doctest::Approx(8 * (all.kv_block + all.dkv_block)));
  CHECK(win.gathered == doctest::Approx(3 * (all.kv_block + all.dkv_block)));
  // Zigzag spreads the window over every block: all P.
  c.load_balance = LoadBalance::kZigzag;
  CHECK(ring_buffers(m, c, 8 * 1024, a100(), {.window = 2048}).gathered == doctest::Approx(all.gathered));
}

// ZeRO paper (Rajbhandari et al. 2020), Fig. 1 / Sec. 5: Ψ params, K = 12, N_d GPUs, bf16.
TEST_CASE("model states per sharding level, by hand (ZeRO Fig. 1)") {
  const ModelSpec m = llama2_7b();
  const double psi = m.params();
  const double unit = std::max(m.layer_params(), 32000.0 * 4096);  // the embedding is the larger unit
  auto at = [&](Sharding s, int cp, int dp, int dp_shard = 1) {
    PlanChoice c = ring(cp, dp);
    c.sharding = s;
    c.dp_shard = dp_shard;
    return memory_breakdown(m, c, 8192, a100());
  };
  // N_d = cp·dp = 64.
  const MemoryBreakdown ddp = at(Sharding::kDdp, 4, 16), z1 = at(Sharding::kZero1, 4, 16),
                        z2 = at(Sharding::kZero2, 4, 16), fsdp = at(Sharding::kFsdp, 4, 16),
                        hsdp = at(Sharding::kHsdp, 4, 16, 2);
  CHECK(ddp.model_states == doctest::Approx((2 + 2 + 12) * psi));           // 16Ψ
  CHECK(z1.model_states == doctest::Approx((2 + 2) * psi + 12 * psi / 64));  // P_os
  CHECK(z2.model_states == doctest::Approx(2 * psi + (2 + 12) * psi / 64));  // P_os+g
  CHECK(fsdp.model_states == doctest::Approx(16 * psi / 64));                // P_os+g+p
  CHECK(hsdp.model_states == doctest::Approx(16 * psi / 8));                 // shard group cp·dp_shard = 8
  // Layer buffers: fsdp/hsdp gather params and grads (4 units), zero2 holds a unit's grads
  // twice (being computed, being reduce-scattered), ddp and zero1 hold whole grads already.
  CHECK(fsdp.layer_buffers == doctest::Approx(2 * 4 * unit));
  CHECK(hsdp.layer_buffers == doctest::Approx(2 * 4 * unit));
  CHECK(z2.layer_buffers == doctest::Approx(2 * 2 * unit));
  CHECK(z1.layer_buffers == 0);
  CHECK(ddp.layer_buffers == 0);
  // The rest does not depend on the level.
  CHECK(ddp.activations == fsdp.activations);
  CHECK(ddp.working_set == fsdp.working_set);
  // With tensor parallelism each GPU holds Ψ / tp.
  PlanChoice t = ring(2, 8);
  t.tp = 4;
  t.sharding = Sharding::kZero1;
  CHECK(memory_breakdown(m, t, 8192, a100()).model_states ==
        doctest::Approx(4 * (psi / 4) + 12 * (psi / 4) / 16).epsilon(1e-3).scale(0));
}

TEST_CASE("a PyTorch pipeline's fsdp holds zero1's states with fp32 gradients (plan_memory)") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(2, 2);
  c.pp = 2;
  c.sharding = Sharding::kFsdp;
  c.grad_accum = 4;
  Job job;
  job.seq_len = 8192;
  job.workload = Workload::kStep;
  const double fsdp_states = plan_memory(m, job, c, a100()).model_states;  // no framework named: ZeRO-3
  job.framework = Framework::kPytorch;
  job.grad_reduce_in_fp32 = true;  // torchtitan's default
  const MemoryBreakdown pytorch = plan_memory(m, job, c, a100());
  // The largest stage's Ψ_s: 2 bytes of gathered params + 4 of unsharded fp32 grads + 12 / N_d.
  PlanChoice z1 = c;
  z1.sharding = Sharding::kZero1;
  CHECK(pytorch.model_states > 2 * fsdp_states);  // (2 + 4 + 3) Ψ_s against 16 Ψ_s / 4
  CHECK(pytorch.layer_buffers == 0);  // whole params and grads are model states
  CHECK(pytorch.model_states == doctest::Approx(std::max(stage_model_state_bytes(m, z1, 2, 0, {.grads = 4}),
                                                         stage_model_state_bytes(m, z1, 2, 1, {.grads = 4}))));
  // by hand for stage 0's parameters: (2 + 4) Ψ_s + 12 Ψ_s / (cp·dp).
  const double psi0 = stage_model_state_bytes(m, z1, 2, 0, {.grads = 2}) / (2 + 2 + 12.0 / 4);
  CHECK(stage_model_state_bytes(m, z1, 2, 0, {.grads = 4}) == doctest::Approx((2 + 4 + 12.0 / 4) * psi0));
  // Megatron with bf16 gradients (--grad-reduce-in-bf16) keeps the element bytes.
  job.framework = Framework::kMegatron;
  job.grad_reduce_in_fp32 = false;
  CHECK(plan_memory(m, job, c, a100()).model_states == doctest::Approx(fsdp_states));
}

TEST_CASE("a PyTorch pipeline stage's receive buffers are reported within its activations") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(1, 1);
  c.pp = 4;
  c.virtual_stages = 2;
  c.sharding = Sharding::kFsdp;
  c.grad_accum = 8;
  Job job;
  job.seq_len = 8192;
  job.workload = Workload::kStep;
  job.framework = Framework::kMegatron;
  const MemoryBreakdown megatron = plan_memory(m, job, c, a100());
  job.framework = Framework::kPytorch;
  const MemoryBreakdown pytorch = plan_memory(m, job, c, a100());
  CHECK(megatron.pipeline_buffers == 0);
  // One message: 8192 tokens x hidden 4096 x 2 bytes. A stage holds 8 per chunk for its input
  // (but the model's first chunk) and 8 for its output gradient (but the last's): 24 on the
  // first and last stages, 32 on a middle one.
  const double message = 8192.0 * 4096 * 2;
  CHECK((pytorch.pipeline_buffers == doctest::Approx(24 * message) ||
         pytorch.pipeline_buffers == doctest::Approx(32 * message)));
  CHECK(pytorch.activations > pytorch.pipeline_buffers);
  CHECK(pytorch.activations > megatron.activations);
}

TEST_CASE("fp32 gradients add 2 bytes per gradient the level holds (Megatron-LM's bf16 default)") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(4, 16);
  Job job;
  job.seq_len = 8192;
  job.framework = Framework::kMegatron;
  auto states = [&](bool fp32) {
    job.grad_reduce_in_fp32 = fp32;
    return plan_memory(m, job, c, a100()).model_states;
  };
  c.sharding = Sharding::kZero1;  // whole gradients: Megatron's README, 6 + 12/d against 4 + 12/d
  CHECK(states(true) - states(false) == doctest::Approx(2 * m.params()));
  c.sharding = Sharding::kFsdp;  // sharded over cp·dp = 64
  CHECK(states(true) - states(false) == doctest::Approx(2 * m.params() / 64));
  job.framework = Framework::kPytorch;  // FSDP's fp32 shards are in the 16 bytes already
  CHECK(states(true) == doctest::Approx(states(false)));
}

TEST_CASE("a precision-aware optimizer's states: remainders 2 bytes, bf16 moments 2, fp8 1 (sharded as Adam's)") {
  OptimizerStates job;
  CHECK(optimizer_state_bytes(job) == 12);  // ZeRO's K
  CHECK_FALSE(precision_aware_optimizer(job));
  job.store_param_remainders = true;  // apex DistributedFusedAdam under NeMo's bf16 O2
  CHECK(optimizer_state_bytes(job) == 10);
  CHECK(precision_aware_optimizer(job));
  CHECK(optimizer_states_why_invalid(job, 2).empty());
  CHECK(optimizer_states_why_invalid(job, 4).find("bf16") != std::string::npos);
  CHECK(optimizer_states_why_invalid(job, 0).empty());  // the GPU not known yet (a plan file read)
  job.exp_avg_dtype = StateDtype::kBf16;
  job.exp_avg_sq_dtype = StateDtype::kFp8;
  CHECK(optimizer_state_bytes(job) == 2 + 2 + 1);
  job.store_param_remainders = false;
  job.main_params_dtype = StateDtype::kFp16;
  CHECK(optimizer_state_bytes(job) == 2 + 2 + 1);
  job.store_param_remainders = true;  // an fp16 master has no remainder to keep
  CHECK(optimizer_states_why_invalid(job, 2).find("main_params_dtype fp32") != std::string::npos);
  // The model states shrink by the bytes saved over the optimizer's shard only.
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(4, 16);
  c.sharding = Sharding::kZero1;
  Job plain;
  plain.seq_len = 8192;
  Job remainders = plain;
  remainders.optimizer.store_param_remainders = true;
  CHECK(plan_memory(m, plain, c, a100()).model_states - plan_memory(m, remainders, c, a100()).model_states ==
        doctest::Approx(2 * m.params() / 64));
  c.sharding = Sharding::kDdp;
  CHECK(plan_memory(m, plain, c, a100()).model_states - plan_memory(m, remainders, c, a100()).model_states ==
        doctest::Approx(2 * m.params()));
}

TEST_CASE("state shards per level") {
  PlanChoice c = ring(2, 8);
  c.sharding = Sharding::kHsdp;
  c.dp_shard = 4;
  CHECK(shard_group_gpus(c) == 8);
  CHECK(state_shards(c).params == 8);
  c.sharding = Sharding::kZero2;
  CHECK(shard_group_gpus(c) == 16);
  CHECK(state_shards(c).params == 1);
  CHECK(state_shards(c).grads == 16);
  c.sharding = Sharding::kDdp;
  CHECK(state_shards(c).optimizer == 1);
}

TEST_CASE("the loss over whole logits holds the micro-step's fp32 logits and gradient") {
  // Chunked: 4096 tokens of fp32 logits and their gradient; whole: every token of the
  // micro-step's sequences (torchtitan's and Megatron-LM's loss), by hand.
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(1, 8, Checkpointing::kFull);
  c.micro_batch = 2;
  const int64_t n = 32 * 1024;
  const double V = 32000;
  CHECK(ring_buffers(m, c, n, a100()).logits_chunk == 4096 * V * 4 * 2);
  CHECK(ring_buffers(m, c, n, a100(), {.chunked_loss = false}).logits_chunk == 2.0 * n * V * 4 * 2);
  // The logits phase is then the working set, and the total grows by the difference.
  const MemoryBreakdown chunked = memory_breakdown(m, c, n, a100());
  const MemoryBreakdown whole = memory_breakdown(m, c, n, a100(), {.chunked_loss = false});
  CHECK(whole.working_set == doctest::Approx(ring_buffers(m, c, n, a100(), {.chunked_loss = false}).logits_bytes()));
  CHECK(whole.total() - chunked.total() > (2.0 * n - 4096) * V * 8 - chunked.working_set);
  CHECK(whole.model_states == chunked.model_states);
  CHECK(whole.activations == chunked.activations);
  // With tensor parallelism each TP member holds its vocabulary shard's logits.
  c.tp = 4;
  c.dp = 2;
  CHECK(ring_buffers(m, c, n, a100(), {.chunked_loss = false}).logits_chunk == 2.0 * n * (V / 4) * 4 * 2);
}

TEST_CASE("a whole loss holds the copies of the logits its framework's loss keeps") {
  // whole_loss_bytes_per_logit, by hand: PyTorch's eager cross-entropy three fp32 tensors,
  // Megatron-Core's in-place one the logits (e) and one fp32 copy, no framework 8 bytes.
  auto bytes = [](Framework f, bool compiled = false, int tp = 1) {
    return whole_loss_bytes_per_logit(whole_loss(f, compiled, tp), 2);
  };
  CHECK(bytes(Framework::kPytorch) == 12);
  CHECK(bytes(Framework::kMegatron) == 6);
  CHECK(bytes(Framework::kAny) == 8);
  // torchtitan's loss over a TP mesh: DTensor's loss-parallel ops, four fp32 tensors at once.
  CHECK(bytes(Framework::kPytorch, false, 8) == 16);
  CHECK(bytes(Framework::kMegatron, false, 8) == 6);
  CHECK(bytes(Framework::kAny, false, 8) == 8);
  // Compiled with the model: the bf16 logits and their bf16 gradient; Megatron's is not compiled.
  CHECK(bytes(Framework::kPytorch, true) == 4);
  CHECK(bytes(Framework::kPytorch, true, 8) == 4);
  CHECK(bytes(Framework::kAny, true) == 4);
  CHECK(bytes(Framework::kMegatron, true) == 6);
  const ModelSpec m = llama2_7b();
  const PlanChoice c = ring(1, 8, Checkpointing::kFull);
  const int64_t n = 32 * 1024;
  const double logits = n * 32000.0;
  for (Framework f : {Framework::kAny, Framework::kPytorch, Framework::kMegatron}) {
    CAPTURE(static_cast<int>(f));
    CHECK(ring_buffers(m, c, n, a100(), {.chunked_loss = false, .framework = f}).logits_chunk ==
          logits * whole_loss_bytes_per_logit(whole_loss(f, false, 1), a100().element_bytes));
    // Chunked, the framework does not matter: our own loss.
    CHECK(ring_buffers(m, c, n, a100(), {.framework = f}).logits_chunk == ring_buffers(m, c, n, a100()).logits_chunk);
  }
  // plan_memory asks the job's framework.
  Job job;
  job.gpus = 8;
  job.seq_len = n;
  job.batch_tokens = n;
  job.chunked_loss = false;
  job.framework = Framework::kPytorch;
  const double pytorch = plan_memory(m, job, c, a100()).live();
  job.framework = Framework::kAny;
  CHECK(pytorch - plan_memory(m, job, c, a100()).live() == doctest::Approx(logits * 4));
}

TEST_CASE("the allocator's cache: 9 % of the tensors' peak, beside the total, never deciding a fit") {
  const ModelSpec m = llama2_7b();
  const PlanChoice c = ring(8, 1, Checkpointing::kFull);
  // Room to spare: the cache is the fraction of what the tensors hold at their peak.
  const MemoryBreakdown roomy = memory_breakdown(m, c, 64 * 1024, a100());
  REQUIRE(roomy.total() < a100().memory_bytes * 0.8);
  CHECK(roomy.total() == doctest::Approx(roomy.live() + roomy.runtime_reserve));
  CHECK(roomy.allocator_cache == doctest::Approx(kAllocatorCacheFraction * roomy.live()));
  CHECK(roomy.allocator_reserved() == doctest::Approx(roomy.live() * (1 + kAllocatorCacheFraction)));
  // Near the limit the allocator frees its cache and retries: the cache fills what is left,
  // and the total, which decides the fit, does not move.
  GpuSpec tight = a100();
  tight.memory_bytes = roomy.total() + 0.5 * roomy.allocator_cache;
  const MemoryBreakdown near = memory_breakdown(m, c, 64 * 1024, tight);
  CHECK(near.total() == doctest::Approx(roomy.total()));
  CHECK(near.allocator_cache == doctest::Approx(0.5 * roomy.allocator_cache));
  // Past it nothing is cached.
  tight.memory_bytes = roomy.live();
  CHECK(memory_breakdown(m, c, 64 * 1024, tight).allocator_cache == 0);
}

TEST_CASE("torchtitan's TP saves the gathered norm outputs whole: bf16, or fp8 under float8's all-gathers") {
  const ModelSpec m = llama2_7b();
  Job job;
  job.framework = Framework::kPytorch;
  CHECK(tp_saved_input_bytes(job, 8, 2) == 2);
  CHECK(tp_saved_input_bytes(job, 1, 2) == 0);  // no TP, nothing gathered
  job.fp8_recipe = Fp8Recipe::kTensorwise;      // Float8ColwiseParallel gathers fp8
  CHECK(tp_saved_input_bytes(job, 8, 2) == 1);
  job.framework = Framework::kMegatron;         // gathered again in the backward
  CHECK(tp_saved_input_bytes(job, 8, 2) == 0);
  job.framework = Framework::kAny;
  CHECK(tp_saved_input_bytes(job, 8, 2) == 0);
  // The attention's and the FFN's norm outputs: whole at 2 bytes instead of split 8 ways.
  const double h = m.hidden;
  for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kSelective}) {
    CHECK(activation_bytes_per_token_layer(m, ck, 2, 8, 2) - activation_bytes_per_token_layer(m, ck, 2, 8) ==
          doctest::Approx(2 * h * (2 - 2.0 / 8)));
  }
  // The output layer's gathered input, saved whole in bf16 (float8 leaves `output` out).
  CHECK(final_hidden_bytes_per_token(m, 2, 8) == h * 2 / 8);
  CHECK(final_hidden_bytes_per_token(m, 2, 8, 1) == h * 2);
  // Full checkpointing stores the layer input only; the recomputed layer holds them.
  CHECK(activation_bytes_per_token_layer(m, Checkpointing::kFull, 2, 8, 2) ==
        activation_bytes_per_token_layer(m, Checkpointing::kFull, 2, 8));
  PlanChoice c = ring(1, 2, Checkpointing::kFull);
  c.strategy = Strategy::kFlashFsdp;
  c.tp = 8;
  const int64_t n = 8192;
  const LayerHolding torchtitan{.chunked_loss = false, .framework = Framework::kPytorch};
  LayerHolding saved = torchtitan;
  saved.saved_input_bytes = 2;
  CHECK(ring_buffers(m, c, n, a100(), saved).recompute - ring_buffers(m, c, n, a100(), torchtitan).recompute ==
        doctest::Approx(n * 2 * h * (2 - 2.0 / 8)));
}

TEST_CASE("a framework's layer holds its whole micro-batch's transients, its FFN unchunked") {
  const ModelSpec m = llama2_7b();
  PlanChoice c = ring(1, 8, Checkpointing::kFull);
  c.strategy = Strategy::kFlashFsdp;
  c.micro_batch = 4;
  const int64_t n = 32768;
  const RingBuffers ours = ring_buffers(m, c, n, a100(), {.chunked_loss = false, .framework = Framework::kAny});
  const RingBuffers theirs = ring_buffers(m, c, n, a100(), {.chunked_loss = false, .framework = Framework::kPytorch});
  CHECK(ours.batch == 1);
  CHECK(theirs.batch == 4);
  // ringmaster chunks its FFN in kFfnChunkTokens; a framework runs the sequence's c tokens.
  CHECK(theirs.ffn_chunk == doctest::Approx(ours.ffn_chunk * n / kFfnChunkTokens));
  // The residual gradients of all four sequences, and four sequences' larger phase.
  CHECK(theirs.grad_stream == doctest::Approx(4 * ours.grad_stream));
  const double one = std::max(theirs.attention_backward_bytes(), theirs.ffn_backward_bytes());
  CHECK(theirs.sequence_backward_bytes() == one);
  CHECK(theirs.layer_backward_bytes() == doctest::Approx(theirs.grad_stream + 4 * (one - theirs.grad_stream)));
  CHECK(ours.layer_backward_bytes() == doctest::Approx(ours.sequence_backward_bytes()));
  // One sequence per micro-step: the same but for the FFN chunking.
  c.micro_batch = 1;
  const RingBuffers single = ring_buffers(m, c, n, a100(), {.chunked_loss = false, .framework = Framework::kPytorch});
  CHECK(single.batch == 1);
  CHECK(single.grad_stream == ours.grad_stream);
}
