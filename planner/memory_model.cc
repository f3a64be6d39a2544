#include "planner/memory_model.h"

#include <algorithm>
#include <optional>

#include "planner/data_parallel.h"
#include "planner/linear_precision.h"
#include "planner/pipeline_parallel.h"
#include "planner/tensor_parallel.h"

namespace rm {

namespace {

// Stored per token per layer, split as the policies need it (bytes).
struct ActivationParts {
  double attention = 0;     // norm in/out, Q, K, V, out, lse
  double ffn_norm = 0;      // FFN norm in/out
  double ffn_inter = 0;     // gate, up, activation output
};

ActivationParts activation_parts(const ModelSpec& m, int e) {
  const double hq = static_cast<double>(m.heads) * m.head_dim;
  const double hkv = static_cast<double>(m.kv_heads) * m.head_dim;
  ActivationParts a;
  a.attention = e * (2.0 * m.hidden + 2 * hq + 2 * hkv) + 4.0 * m.heads;
  a.ffn_norm = e * 2.0 * m.hidden;
  a.ffn_inter = e * (m.gated_ffn ? 3.0 : 2.0) * m.ffn_hidden;
  return a;
}

// Per token and layer: the two norm outputs (attention's, FFN's) saved whole at `saved` bytes
// an element rather than split tp ways at e (activation_parts counts them split).
double whole_input_extra_bytes(const ModelSpec& m, int e, int tp, int saved) {
  return saved > 0 && tp > 1 ? 2.0 * m.hidden * (saved - static_cast<double>(e) / tp) : 0;
}

}  // namespace

int tp_saved_input_bytes(const Job& job, int tp, int element_bytes) {
  return job.framework == Framework::kPytorch && tp > 1 ? tp_gather_element_bytes(job.fp8_recipe, element_bytes) : 0;
}

double final_hidden_bytes_per_token(const ModelSpec& m, int e, int tp, int saved_input_bytes) {
  return static_cast<double>(m.hidden) * e / (saved_input_bytes > 0 ? 1 : std::max(1, tp));
}

double activation_bytes_per_token_layer(const ModelSpec& m, Checkpointing ckpt, int e, int tp, int saved_input_bytes) {
  const ActivationParts a = activation_parts(m, e);
  const double t = std::max(1, tp);  // sequence parallelism splits every stored tensor
  const double whole = whole_input_extra_bytes(m, e, tp, saved_input_bytes);
  switch (ckpt) {
    case Checkpointing::kNone: return (a.attention + a.ffn_norm + a.ffn_inter) / t + whole;
    case Checkpointing::kSelective: return (a.attention + a.ffn_norm) / t + whole;
    case Checkpointing::kFull: return static_cast<double>(e) * m.hidden / t;
  }
  return 0;
}

double RingBuffers::attention_backward_bytes() const {
  return recompute + grad_stream + kv_ring_buffers * kv_block + dkv_accumulators * dkv_block +
         dkv_partial + gathered + dq + dout + delta + score_tiles;
}

double RingBuffers::working_set_bytes() const { return std::max(layer_backward_bytes(), logits_bytes()); }

namespace {

// ring_buffers, given `m` = tp_shard(model, choice.tp): one TP member's heads, FFN columns
// and vocabulary (memory_breakdown has it already; a copy of a ModelSpec copies its strings).
RingBuffers shard_ring_buffers(const ModelSpec& model, const ModelSpec& m, const PlanChoice& choice,
                               int64_t seq_len, const GpuSpec& gpu, const LayerHolding& h) {
  const int e = gpu.element_bytes;
  const int tp = std::max(1, choice.tp);
  const int P = std::max(1, choice.cp);
  const int64_t c = seq_len / P;
  const double cd = static_cast<double>(c);
  const double hq = static_cast<double>(m.heads) * m.head_dim;
  RingBuffers b;
  b.c = c;
  b.q = cd * hq * e;
  b.kv_block = kv_block_bytes(c, m, e);
  b.dkv_block = dkv_block_bytes(c, m);
  b.dkv_partial = b.dkv_block;
  b.dq = cd * hq * 4;
  b.out_acc = cd * hq * 4;
  b.lse = cd * m.heads * 4;
  b.dout = cd * hq * e;
  b.delta = cd * m.heads * 4;
  b.score_tiles = m.heads * KernelCurve::tile_bytes(choice.block_q, choice.block_kv, m.head_dim);
  const int blocks_needed = all_gather_blocks(choice, c, h.window);
  switch (choice.strategy) {
    case Strategy::kUsp:
      // The all-to-all's staging (send + receive) for Q and for K,V; then the ring's
      // buffers: its block of N / r tokens of h_kv / u heads has the bytes of an
      // N / cp-token block of all heads (b.kv_block).
      b.gathered = 2 * (b.q + b.kv_block);
      [[fallthrough]];
    case Strategy::kRing:
      if (P > 1 && blocks_needed > 1) {
        const bool two_streams = choice.schedule != Schedule::kFlat;
        b.kv_ring_buffers = two_streams ? 4 : 2;
        b.dkv_accumulators = two_streams ? 4 : 2;
      }
      break;
    case Strategy::kFlashFsdp:
      break;  // cp = 1: the own K,V block only
    case Strategy::kAllGatherCp:
      // The whole sequence's K,V (gathered) and dK,dV (fp32, before the reduce-scatter);
      // dkv_partial is the block each reduce-scatter step receives before it is added.
      b.gathered = blocks_needed * (b.kv_block + b.dkv_block);
      break;
    case Strategy::kUlysses: {
      // After the all-to-all a GPU holds all N tokens of h/P query heads and of h_kv/P
      // K,V heads (P divides both: CostModel::why_invalid).
      const double kv_heads_here = static_cast<double>(m.kv_heads) / P;
      const double kv_full = 2.0 * static_cast<double>(seq_len) * m.head_dim * kv_heads_here;
      b.dkv_partial = kv_full * 4;
      // Staging of the all-to-all (send + receive) for Q and for K,V.
      b.gathered = 2 * (b.q + kv_full * e);
      break;
    }
  }
  const ActivationParts a = activation_parts(m, e);
  // ringmaster runs a micro-step's sequences through a layer one after another, its FFN in
  // chunks; torchtitan and Megatron-Core run the whole micro-batch, FFN unchunked.
  const bool whole_batch = h.framework != Framework::kAny;
  b.batch = whole_batch ? std::max(1, choice.micro_batch) : 1;
  if (choice.checkpointing == Checkpointing::kFull) {
    const ActivationParts whole = activation_parts(model, e);
    b.recompute = cd * ((whole.attention + whole.ffn_norm) / tp +  // sequence-parallel
                        whole_input_extra_bytes(model, e, tp, h.saved_input_bytes));
  }
  // All c tokens: with tp > 1 the gathered (all-gathered) gradient of the layer's input.
  b.grad_stream = 2 * cd * m.hidden * e * b.batch;
  const double ffn_tokens = static_cast<double>(whole_batch ? c : std::min(c, kFfnChunkTokens));
  b.ffn_chunk = ffn_tokens * a.ffn_inter * 2;
  b.logits_chunk = h.chunked_loss ? static_cast<double>(std::min(c, kLogitsChunkTokens)) * m.vocab * 4.0 * 2
                                : std::max(1, choice.micro_batch) * cd * m.vocab *
                                      whole_loss_bytes_per_logit(whole_loss(h.framework, h.compiled_loss, tp), e);
  return b;
}

}  // namespace

WholeLoss whole_loss(Framework framework, bool compiled, int tp) {
  switch (framework) {
    case Framework::kMegatron: return WholeLoss::kMegatron;  // not compiled
    case Framework::kPytorch:
      return compiled ? WholeLoss::kCompiled : tp > 1 ? WholeLoss::kLossParallel : WholeLoss::kEagerPytorch;
    case Framework::kAny: break;
  }
  return compiled ? WholeLoss::kCompiled : WholeLoss::kFp32Pair;
}

double whole_loss_bytes_per_logit(WholeLoss loss, int element_bytes) {
  switch (loss) {
    case WholeLoss::kEagerPytorch: return 12;
    case WholeLoss::kLossParallel: return 16;
    case WholeLoss::kCompiled: return 2.0 * element_bytes;
    case WholeLoss::kMegatron: return 4.0 + element_bytes;
    case WholeLoss::kFp32Pair: break;
  }
  return 8;
}

RingBuffers ring_buffers(const ModelSpec& model, const PlanChoice& choice, int64_t seq_len,
                         const GpuSpec& gpu, const LayerHolding& holding) {
  return shard_ring_buffers(model, tp_shard(model, std::max(1, choice.tp)), choice, seq_len, gpu, holding);
}

int shard_group_gpus(const PlanChoice& ch) {
  const int data = std::max(1, ch.cp) * std::max(1, ch.dp);
  return ch.sharding == Sharding::kHsdp ? std::max(1, ch.cp) * std::max(1, ch.dp_shard) : data;
}

StateShards state_shards(const PlanChoice& ch) {
  const int n = shard_group_gpus(ch);
  switch (ch.sharding) {
    case Sharding::kNone:
    case Sharding::kDdp: return {1, 1, 1};
    case Sharding::kZero1: return {1, 1, n};
    case Sharding::kZero2: return {1, n, n};
    case Sharding::kFsdp:
    case Sharding::kHsdp: return {n, n, n};
  }
  return {n, n, n};
}

namespace {

// stage_model_state_bytes for one TP member's weights, `shard` (tp_shard's), gradients at `g` bytes.
double shard_state_bytes(const ModelSpec& shard, const PlanChoice& choice, int e, int g, double optimizer, int stage) {
  const StateShards n = state_shards(choice);
  const double psi = pp_stage_params(shard, pp_layout(shard.layers, choice), stage);
  return e * psi / n.params + g * psi / n.grads + optimizer * psi / n.optimizer;
}

}  // namespace

std::string optimizer_states_why_invalid(const OptimizerStates& j, int element_bytes) {
  if (!j.store_param_remainders) return "";
  if (j.main_params_dtype != StateDtype::kFp32)
    return std::string("needs main_params_dtype fp32: the remainders complete a bf16 param to its fp32 master (got ") +
           to_string(j.main_params_dtype) + ")";
  if (element_bytes != 0 && element_bytes != 2)
    return "needs 16-bit (bf16) params: the GPU's element type has " + std::to_string(element_bytes) + " bytes";
  return "";
}

bool precision_aware_optimizer(const OptimizerStates& j) {
  return j.store_param_remainders || j.main_params_dtype != StateDtype::kFp32 ||
         j.exp_avg_dtype != StateDtype::kFp32 || j.exp_avg_sq_dtype != StateDtype::kFp32;
}

StateBytes job_state_bytes(const Job& job, const PlanChoice& choice, int element_bytes) {
  return {grad_element_bytes(job, choice, element_bytes), optimizer_state_bytes(job.optimizer)};
}

double stage_model_state_bytes(const ModelSpec& m, const PlanChoice& choice, int e, int stage, StateBytes state) {
  return shard_state_bytes(tp_shard(m, std::max(1, choice.tp)), choice, e, state.grads > 0 ? state.grads : e,
                           state.optimizer, stage);
}

MemoryBreakdown memory_breakdown(const ModelSpec& m, const PlanChoice& choice, int64_t seq_len,
                                 const GpuSpec& gpu, const LayerHolding& holding, StateBytes state) {
  const int e = gpu.element_bytes;
  const int g = state.grads > 0 ? state.grads : e;
  const int P = std::max(1, choice.cp);
  const int tp = std::max(1, choice.tp);
  const double c = static_cast<double>(seq_len / P);
  std::optional<ModelSpec> sharded;  // one TP member's weights (m / tp); m itself at tp 1
  const ModelSpec& shard = tp > 1 ? sharded.emplace(tp_shard(m, tp)) : m;
  MemoryBreakdown mem;
  const StateShards n = state_shards(choice);
  const double layer_unit = std::max(shard.layer_params(), static_cast<double>(shard.vocab) * shard.hidden);
  // A TP member whose shard no other GPU shares holds it unsharded already: nothing to gather.
  mem.layer_buffers = n.params > 1 ? (e + g) * 2.0 * layer_unit : n.grads > 1 ? g * 2.0 * layer_unit : 0;
  // Stored activations of every sequence of the micro-step (PlanChoice::micro_batch); the
  // working set is one sequence's at a time in ringmaster's loop, the whole micro-batch's in
  // a framework's (RingBuffers::batch). Sequence parallelism divides both by tp.
  const double per_layer =
      std::max(1, choice.micro_batch) * c *
      activation_bytes_per_token_layer(m, choice.checkpointing, e, tp, holding.saved_input_bytes);
  const double final_hidden =
      std::max(1, choice.micro_batch) * c * final_hidden_bytes_per_token(m, e, tp, holding.saved_input_bytes);
  // A stage before the last holds its boundary activation as it crosses to the next stage:
  // split tp ways whatever the framework (torchtitan's blocks end in a RowwiseParallel with
  // output_layouts=Shard(1), a local sequence shard), the message pp_p2p_bytes sends.
  const double boundary = pp_p2p_bytes(m, static_cast<int64_t>(c), std::max(1, choice.micro_batch), e, tp);
  const int64_t micro_batches = std::max(1, choice.grad_accum);
  // Pipeline stages (pipeline_parallel.h): the stage with the most states and stored
  // activations sets the peak (the first holds the most micro-batches in flight, the
  // second may hold more layers, the last the head; pp_peak_stage_candidates). Without a
  // pipeline: one stage of every layer, one micro-batch held.
  const int pp = std::max(1, choice.pp);
  const PipelineLayout layout = pp_layout(m.layers, choice);
  // Only the last computes the logits: the others' working set is the attention's or the
  // FFN's (a stage's op lists allocate no logits chunk, schedule.cc).
  const RingBuffers rb = shard_ring_buffers(m, shard, choice, seq_len, gpu, holding);
  double peak = -1;
  for (int s : pp_peak_stage_candidates(pp)) {
    const double states = shard_state_bytes(shard, choice, e, g, state.optimizer, s);
    const PipelineStageBuffers buffers =
        pipeline_stage_buffers(layout, s, holding.framework, holding.backward, micro_batches, boundary, final_hidden);
    std::vector<double> chunk_bytes(static_cast<size_t>(layout.virtual_stages));
    for (int ch = 0; ch < layout.virtual_stages; ++ch) {
      chunk_bytes[static_cast<size_t>(ch)] = pp_chunk_layer_count(layout, ch * pp + s) * per_layer +
                                             buffers.held_output[static_cast<size_t>(ch)] -
                                             buffers.shared_input[static_cast<size_t>(ch)];
    }
    const InterleavedWarmup order = pp_interleaved_warmup(holding.framework);
    auto held = [&](bool at_head) {
      return pp > 1 ? pp_held_in_flight(layout, choice.grad_accum, s, order, chunk_bytes, at_head)
                    : m.layers * per_layer;
    };
    const double at_rest = buffers.persistent + buffers.boundary;
    // The last stage's head (its working set) runs right after a forward of its last chunk,
    // whose micro-batch may hold less than another chunk's (a PyTorch stage's last chunk
    // saves its input in the receive buffer); elsewhere a layer's backward.
    std::vector<std::pair<double, double>> moments = {{held(false), rb.layer_backward_bytes()}};
    if (s == pp - 1) moments.push_back({held(true), rb.working_set_bytes()});
    for (const auto& [act_held, working] : moments) {
      if (states + act_held + at_rest + working > peak) {
        peak = states + act_held + at_rest + working;
        mem.model_states = states;
        mem.activations = act_held + at_rest;
        mem.pipeline_buffers = buffers.persistent;
        mem.working_set = working;
      }
    }
  }
  mem.runtime_reserve = gpu.runtime_reserve_bytes;
  mem.allocator_cache = std::clamp(kAllocatorCacheFraction * mem.live(), 0.0,
                                   std::max(0.0, gpu.memory_bytes - mem.total()));
  return mem;
}

LayerHolding layer_holding(const ModelSpec& m, const Job& job, int tp, int element_bytes) {
  return {effective_window(m, job), job.chunked_loss, job.framework, job.compiled_loss,
          tp_saved_input_bytes(job, tp, element_bytes), job.passes != Passes::kForward};
}

RingBuffers plan_ring_buffers(const ModelSpec& m, const Job& job, const PlanChoice& choice, const GpuSpec& gpu) {
  return ring_buffers(m, choice, job.seq_len, gpu, layer_holding(m, job, choice.tp, gpu.element_bytes));
}

MemoryBreakdown plan_memory(const ModelSpec& m, const Job& job, const PlanChoice& choice, const GpuSpec& gpu) {
  return memory_breakdown(m, as_run(job, choice), job.seq_len, gpu,
                          layer_holding(m, job, choice.tp, gpu.element_bytes),
                          job_state_bytes(job, choice, gpu.element_bytes));
}

}  // namespace rm
