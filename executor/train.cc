// One rank of `ringmaster train` (see train.h).
#include "executor/train.h"

#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "executor/bf16_kernels.h"
#include "executor/checkpoint.h"
#include "executor/cuda_module.h"
#include "executor/fsdp.h"
#include "executor/measurements.h"
#include "executor/pipeline_stage.h"
#include "executor/post_log.h"
#include "executor/ring_attention.h"
#include "executor/run.h"
#include "executor/token_stream.h"
#include "executor/reference_attention.h"
#include "executor/tensor_parallel_group.h"
#include "executor/train_kernels.h"
#include "executor/transformer.h"
#include "executor/verify.h"
#include "executor/watchdog.h"
#include "planner/attention_work.h"
#include "planner/cost_model.h"
#include "planner/cost_params.h"
#include "planner/input_error.h"
#include "planner/pipeline_parallel.h"
#include "planner/tensor_parallel.h"

namespace rm::exec {

namespace {

struct Loaded {
  LoadedPlanFile lp;
  Transformer model;
  Sharding sharding;
};

// Whether the pass runs in bf16 (TrainOptions::mixed_precision_param).
bool mixed_precision_bf16(const TrainOptions& opt, const LoadedPlanFile& lp) {
  if (!opt.mixed_precision_param.empty()) return opt.mixed_precision_param == "bfloat16";
  return opt.backend == "cuda" && lp.topology.gpu.element_bytes == 2;
}

// The type gradients are summed in (TrainOptions::mixed_precision_reduce): the option's,
// else fp32 where the plan says grad_reduce_in_fp32 (and priced it so), else the pass's.
ReduceType reduce_type(const TrainOptions& opt, const LoadedPlanFile& lp) {
  if (!opt.mixed_precision_reduce.empty())
    return opt.mixed_precision_reduce == "bfloat16" ? ReduceType::kBfloat16 : ReduceType::kFloat32;
  return !lp.plan.job.grad_reduce_in_fp32 && mixed_precision_bf16(opt, lp) ? ReduceType::kBfloat16
                                                                            : ReduceType::kFloat32;
}

// run --verify's tolerance under bf16 storage: every activation and gradient of the pass
// rounded to 8 bits of mantissa (2^-9 relative each) over a layer's few dozen ops; the
// tiny model's step measures 1.3-1.4e-2 on the cpu (README "Training").
constexpr double kMixedPrecisionVerifyTolerance = 3e-2;

// The model-state layout to run: the option's, else the plan's: every level the planner
// prices (FsdpParams: fsdp over all ranks, hsdp over the plan's groups, zero2 and zero1
// holding whole parameters (and zero1 whole gradients) through the step, ddp replicated).
Sharding executed_sharding(const TrainOptions& opt, const Plan& plan) {
  if (opt.sharding) return *opt.sharding;
  switch (plan.choice.sharding) {
    case rm::Sharding::kFsdp: return Sharding::kFsdp;
    case rm::Sharding::kDdp: return Sharding::kDdp;
    case rm::Sharding::kHsdp: return Sharding::kHsdp;
    case rm::Sharding::kZero2: return Sharding::kZero2;
    case rm::Sharding::kZero1: return Sharding::kZero1;
    default:
      fail_input(opt.plan_path, "plan.sharding",
                 std::string("the executor runs ddp, zero1, zero2, fsdp and hsdp, not ") +
                     to_string(plan.choice.sharding));
  }
}

Loaded load_inputs(const TrainOptions& opt) {
  LoadedPlanFile lp = load_plan_file(opt.plan_path);
  check_backend_available(opt.backend);
  check_plan_runnable(lp, opt.plan_path, opt.backend);
  const Sharding sharding = executed_sharding(opt, lp.plan);
  Transformer model(lp.model, opt.plan_path);
  return {std::move(lp), std::move(model), sharding};
}

// How the model state is laid out, for the header (the plan's degrees, executed_sharding's level).
std::string model_state_text(const Loaded& in) {
  const Plan& p = in.lp.plan;
  const int tp = p.choice.tp, pp = p.choice.pp;
  const int n = p.job.gpus / tp / pp;
  const std::string all = tp > 1 || pp > 1 ? std::string("sharded over each ") + (pp > 1 ? "stage's " : "") +
                                                 (tp > 1 ? "TP rank's " : "") + std::to_string(n) +
                                                 (n == 1 ? " rank" : " ranks")
                                           : "sharded over all " + std::to_string(p.job.gpus) + " ranks";
  switch (in.sharding) {
    case Sharding::kFsdp:
      return all + " (FSDP: each holds its shard of every unit's parameters, gradients and AdamW state";
    case Sharding::kHsdp:
      return "sharded over groups of " + std::to_string(p.choice.cp * p.choice.dp_shard) + " ranks, replicated " +
             std::to_string(p.choice.dp / std::max(1, p.choice.dp_shard)) +
             "x (HSDP: FSDP in each group, the gradient shards all-reduced over the replicas";
    case Sharding::kZero2:
      return all + " but the parameters (ZeRO-2: each unit gathered once a step and held, gradients "
                   "reduce-scattered every micro-step";
    case Sharding::kZero1:
      return all + " but the parameters and gradients (ZeRO-1: each unit gathered once a step and held, "
                   "whole gradients reduce-scattered in the last micro-step";
    case Sharding::kDdp: break;
  }
  return "replicated on every rank (DDP: one gradient all-reduce";
}

// The header's words for AdamW's moments when the plan keeps them in bf16 (fsdp.h), else "".
std::string moments_text(const OptimizerStates& o) {
  if (o.exp_avg_dtype != StateDtype::kBf16) return "";
  return ", AdamW's exp_avg and exp_avg_sq kept in bf16 (the plan's precision-aware optimizer)";
}

std::string header(const TrainOptions& opt, const Loaded& in, int64_t sequences, int64_t start,
                   const std::string& collectives) {
  const Plan& p = in.lp.plan;
  const std::string state = model_state_text(in) + ", collectives over " + collectives + ")";
  char line[4096];  // two paths and the state's text
  std::snprintf(
      line, sizeof line,
      "# ringmaster train: %s: %s (%.2fM params) on %s, %d ranks = %scp %d x dp %d, %s%s\n"
      "#   N = %lld tokens, %lld sequences per step (micro-batch %d x grad-accum %d x dp %d), "
      "AdamW lr %.3g (warm-up %d), data %s\n"
      "#   model state %s; '%s' activation checkpointing%s%s, gradients reduced in %s%s\n",
      opt.plan_path.c_str(), in.lp.model.name.c_str(), in.model.num_params() / 1e6,
      in.lp.topology.name.c_str(), p.job.gpus,
      ((p.choice.tp > 1 ? "tp " + std::to_string(p.choice.tp) + " (sequence parallel) x " : std::string()) +
       (p.choice.pp > 1 ? "pp " + std::to_string(p.choice.pp) +
                              (p.choice.virtual_stages > 1
                                   ? " (interleaved 1F1B, " + std::to_string(p.choice.virtual_stages) + " virtual stages) x "
                                   : " (1F1B) x ")
                        : std::string()))
          .c_str(),
      p.choice.cp,
      p.choice.dp,
      cp_exchange_text(p.choice).c_str(),
      has_load_balance(p.choice) ? (std::string(", ") + to_string(p.choice.load_balance)).c_str() : "",
      static_cast<long long>(p.job.seq_len), static_cast<long long>(sequences),
      p.choice.micro_batch, p.choice.grad_accum, p.choice.dp, opt.optimizer.lr,
      opt.optimizer.warmup_steps, opt.synthetic_data ? "synthetic (run)" : opt.data_path.c_str(),
      state.c_str(), to_string(p.choice.checkpointing),
      mixed_precision_bf16(opt, in.lp)
          ? "; bf16 mixed precision (bf16 activations and gathered units, fp32 shards and AdamW)"
          : "; fp32",
      moments_text(p.job.optimizer).c_str(),
      reduce_type(opt, in.lp) == ReduceType::kBfloat16 ? "bf16" : "fp32",
      start > 0 ? (", resumed after step " + std::to_string(start)).c_str() : "");
  return line;
}

// run --verify of a step plan (rank 0): the step's mean loss and gradients recomputed on
// one rank in fp64 from the same parameters and sequences, each tensor compared with
// what the ranks computed (`grads`, all-reduced; `loss`, the summed token losses).
VerifyResult verify_step(const Transformer& model, const Plan& plan,
                         const std::vector<float>& params, const std::vector<float>& grads,
                         double loss, const std::vector<std::vector<int32_t>>& seqs,
                         double grad_scale, double tolerance) {
  const ModelSpec& m = model.spec();
  const int64_t N = plan.job.seq_len;
  const ReferenceShape shape{N, m.head_dim, m.heads, m.kv_heads, plan.job.causal, effective_window(m, plan.job)};
  TrainKernels<double>& kernels = cpu_train_kernels<double>();
  const AttentionFnOf<double> fwd = [&](int, LayerAttention<double>& t) {
    reference_layer_attention(shape, kernels, t, false);
  };
  const AttentionFnOf<double> bwd = [&](int, LayerAttention<double>& t) {
    reference_layer_attention(shape, kernels, t, true);
  };
  const std::vector<double> p64(params.begin(), params.end());
  std::vector<double> g64(params.size());  // zeros
  std::vector<int64_t> positions(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) positions[i] = i;
  double loss64 = 0;
  for (const auto& seq : seqs)
    loss64 += model.forward_backward<double>(p64, g64, seq.data(), seq.data() + 1, positions.data(),
                                             N, grad_scale, fwd, bwd);
  VerifyResult res;
  res.checks.push_back(compare_tensor("loss", {loss * grad_scale}, {loss64 * grad_scale}, tolerance));
  for (const ParamTensor& t : model.tensors()) {
    const auto begin = static_cast<std::ptrdiff_t>(t.offset);
    const auto end = begin + static_cast<std::ptrdiff_t>(t.rows * t.cols);
    res.checks.push_back(compare_tensor("d" + t.name,
                                        std::vector<double>(grads.begin() + begin, grads.begin() + end),
                                        std::vector<double>(g64.begin() + begin, g64.begin() + end),
                                        tolerance));
  }
  return res;
}

// The kernels of everything but the attention on the backend's device: null for cpu
// (the shared Eigen kernels), cuBLAS and CUDA kernels on the device the ring attention's
// backend chose for cuda, their GEMMs in bf16 where the plan's GPUs compute in bf16.
std::unique_ptr<TrainKernels<float>> make_device_kernels(const std::string& backend,
                                                         const LoadedPlanFile& lp) {
  if (backend == "cuda") return cuda_module().make_train_kernels(lp.topology.gpu.element_bytes == 2);
  return nullptr;
}

// The layers of a pipeline stage's chunks k·pp + stage, k < v (planner/pipeline_parallel.h).
std::vector<LayerRange> stage_chunks(const PipelineLayout& layout, int stage) {
  std::vector<LayerRange> chunks;
  for (int k = 0; k < layout.virtual_stages; ++k) {
    const int g = k * layout.pp + stage;
    chunks.push_back({pp_chunk_first_layer(layout, g), pp_chunk_layer_count(layout, g)});
  }
  return chunks;
}

// Model FLOPs per token of a training step, MFU's numerator: the planner's own count
// (model_flops_per_step, PaLM's convention: what the model needs, no recompute), so the
// MFU train prints is the one plan predicts.
double model_flops_per_token(const LoadedPlanFile& lp) {
  const Job& job = lp.plan.job;
  return model_flops_per_step(lp.model, job) / (static_cast<double>(sequences_per_step(job)) * job.seq_len);
}

int train_body(const TrainOptions& opt, int rank, int size) {
  const Loaded in = load_inputs(opt);
  const Plan& plan = in.lp.plan;
  if (size != plan.job.gpus)
    fail_input(opt.plan_path, "gpus",
               "the plan is for " + std::to_string(plan.job.gpus) + " ranks but the MPI world has " +
                   std::to_string(size));
  const int64_t N = plan.job.seq_len;
  std::optional<TokenStream> data;
  if (!opt.synthetic_data) data.emplace(opt.data_path, N);
  uint64_t synthetic_state = opt.seed;  // counter hashed into synthetic byte tokens
  auto next_sequence = [&] {
    if (data) return data->next();
    std::vector<int32_t> seq(static_cast<size_t>(N + 1));
    for (auto& t : seq) t = static_cast<int32_t>(splitmix64(synthetic_state++) % 256);
    return seq;
  };
  Watchdog watchdog(rank, opt.timeout_s);
  RingAttention attention(in.lp, opt.plan_path, rank, opt.backend, &watchdog);
  // This rank's part of the model (`member`; the whole model with tp 1 and pp 1): with
  // pipeline parallelism (pipeline_stage.h) its stage's chunk of layers, stage s being the
  // GPUs [s G/pp, (s + 1) G/pp) (planner/pipeline_parallel.h); with tensor parallelism
  // (transformer.h) member tp_rank's part of that, beside the other members of its TP
  // group, which hold the same tokens. Checkpoints and run --verify see the whole model.
  const PlanChoice& pc = plan.choice;
  const int tp = pc.tp, pp = pc.pp, stage_ranks = plan.job.gpus / pp, stage = rank / stage_ranks;
  const std::vector<int> stage_order(pc.order.begin() + stage * stage_ranks,
                                     pc.order.begin() + (stage + 1) * stage_ranks);
  std::vector<int> tp_group{rank};
  for (const std::vector<int>& g : tp_groups(stage_order, tp, pc.cp))
    if (std::find(g.begin(), g.end(), rank) != g.end()) tp_group = g;
  const int tp_rank = static_cast<int>(std::find(tp_group.begin(), tp_group.end(), rank) - tp_group.begin());
  const PipelineLayout chunks = pp_layout(in.lp.model.layers, pc);
  const Transformer member(in.lp.model, opt.plan_path,
                           {.tp = tp,
                            .tp_rank = tp_rank,
                            .chunks = stage_chunks(chunks, stage),
                            .embedding = stage == 0,
                            .head = stage == pp - 1});
  std::optional<MpiTensorParallel> tp_comm;
  if (tp > 1) tp_comm.emplace(tp_group, rank, &watchdog, attention.epoch());
  const int64_t mb_rows = int64_t{pc.micro_batch} * static_cast<int64_t>(attention.tokens().size()) / tp;
  std::optional<PipelineStage<float>> float_stage;
  std::optional<PipelineStage<Bf16>> half_stage;
  PipelinePeers* peers = nullptr;  // whichever of the two runs
  // Every part's model-state array (`mine`, unsharded) as the whole model's, and back.
  auto whole = [&](const std::vector<float>& mine) {
    std::vector<float> all = tp > 1 ? member.part_join(tp_comm->members(mine)) : member.part_join(mine);
    if (pp > 1) peers->sum(all);
    return all;
  };
  auto mine = [&](const std::vector<float>& all) { return member.part_slice(all); };

  TrainState st;
  st.seed = opt.seed;
  std::optional<TrainState> resumed;
  if (opt.resume) resumed = read_latest_checkpoint(opt.checkpoint_dir, in.model);
  if (resumed) {
    st = std::move(*resumed);
    if (data) data->seek(st.data);
  } else {
    if (opt.resume && rank == 0)
      std::fprintf(stderr, "ringmaster train: no complete checkpoint in %s; starting from step 0\n",
                   opt.checkpoint_dir.c_str());
    st.params = in.model.init(opt.seed);
  }
  st.params = mine(st.params);
  // The pass, the shards and AdamW run on the device's kernels, the collectives on the
  // backend's transport (NCCL for cuda): nothing of the model state crosses the host link
  // during a step. From here on this rank holds only its shards; st keeps the step, seed
  // and data position.
  const std::unique_ptr<TrainKernels<float>> device_kernels = make_device_kernels(opt.backend, in.lp);
  TrainKernels<float>& kernels = device_kernels ? *device_kernels : cpu_train_kernels<float>();
  // Mixed precision (bf16_kernels.h): the pass in bf16 over the same kernels, the units
  // gathered in bf16, the shards and AdamW in fp32.
  const bool bf16 = mixed_precision_bf16(opt, in.lp);
  const ReduceType reduce = reduce_type(opt, in.lp);
  const ShardGroups groups = shard_groups(in.sharding, stage_order, tp, pc.cp, pc.dp_shard, rank);
  Bf16Kernels half(kernels);
  if (bf16)
    peers = &half_stage.emplace(half, rank, pp, pc.virtual_stages, stage_ranks, pc.grad_accum,
                                pp_interleaved_warmup(plan.job.framework), mb_rows, in.lp.model.hidden, &watchdog,
                                attention.epoch());
  else
    peers = &float_stage.emplace(kernels, rank, pp, pc.virtual_stages, stage_ranks, pc.grad_accum,
                                 pp_interleaved_warmup(plan.job.framework), mb_rows, in.lp.model.hidden, &watchdog,
                                 attention.epoch());
  // run_refusal lets both moments be fp32 or both bf16 (planner/export_target.h).
  const bool bf16_moments = plan.job.optimizer.exp_avg_dtype == StateDtype::kBf16;
  std::unique_ptr<FsdpState> state;
  FsdpParams<float>* full_pass = nullptr;
  FsdpParams<Bf16>* half_pass = nullptr;
  if (bf16) {
    auto p = std::make_unique<FsdpParams<Bf16>>(member, groups, reduce, st.params, kernels, half, opt.backend,
                                                &watchdog, attention.epoch(), bf16_moments);
    half_pass = p.get();
    state = std::move(p);
  } else {
    auto p = std::make_unique<FsdpParams<float>>(member, groups, reduce, st.params, kernels, kernels, opt.backend,
                                                 &watchdog, attention.epoch(), bf16_moments);
    full_pass = p.get();
    state = std::move(p);
  }
  FsdpState& model_state = *state;
  model_state.set_optimizer_steps(st.optimizer.step);
  const FaultSpec fault = fault_from_env();
  if (fault.kind == FaultSpec::Kind::kFsdpUnit && fault.rank == rank) model_state.inject_wrong_unit(fault.step - 1);
  if (fault.kind == FaultSpec::Kind::kPpOrder && fault.rank == rank)
    peers->inject_wrong_tag(fault.step - 1);
  if (fault.kind == FaultSpec::Kind::kCommOrder && fault.rank == rank) model_state.inject_late_gathers(fault.step - 1);
  // Everything this rank posts to a communicator, for the order across them (post_log.h).
  PostLog posts;
  attention.log_posts(&posts);
  model_state.log_posts(&posts);
  peers->log_posts(&posts);
  if (tp_comm) tp_comm->log_posts(&posts);
  if (resumed) {
    model_state.load(StateArray::kMoment1, mine(st.optimizer.m));
    model_state.load(StateArray::kMoment2, mine(st.optimizer.v));
  }
  std::vector<float>().swap(st.params);
  std::vector<float>().swap(st.optimizer.m);
  std::vector<float>().swap(st.optimizer.v);

  const int dp = plan.choice.dp, mb = plan.choice.micro_batch, ga = plan.choice.grad_accum;
  const int replica = attention.ring() / tp;  // the schedule's ring d·tp + t is replica d's
  const int64_t sequences = int64_t{dp} * mb * ga;
  const double grad_scale = 1.0 / (static_cast<double>(sequences) * N);
  const auto& idx = attention.tokens();
  const int64_t c = static_cast<int64_t>(idx.size());
  // Each micro-batch's tokens and targets (the pipeline's passes of several are alive at once).
  std::vector<std::vector<int32_t>> tok(static_cast<size_t>(ga)), tgt(static_cast<size_t>(ga));
  std::vector<size_t> held_by(static_cast<size_t>(ga) * member.chunks());  // by micro-batch, then chunk
  const TokenStepWork step_work =
      token_step_work(tp_shard(in.lp.model, tp), plan.choice.checkpointing,  // a TP member's part, as the cost model prices it
                      in.lp.topology.gpu.element_bytes);
  const AttentionFn fwd = [&](int l, LayerAttention<float>& t) { attention.forward(l, t); };
  const AttentionFn bwd = [&](int l, LayerAttention<float>& t) { attention.backward(l, t); };
  Bf16Attention half_attention = bf16_attention(half, fwd, bwd);
  TensorParallel<float>* tp_float = tp_comm ? &*tp_comm : nullptr;
  TensorParallel<Bf16>* tp_half = tp_comm ? &*tp_comm : nullptr;
  // One step's micro-batches through this rank's stage, in the run's precision: the pass
  // of micro-batch a (its mb sequences of this ring, stacked) and what it stored.
  auto run_micro_steps = [&](const std::vector<std::vector<int32_t>>& seqs, PassTimes* times, size_t* held) {
    auto batch = [&](int a) {
      tok[a].resize(static_cast<size_t>(c * mb));
      tgt[a].resize(static_cast<size_t>(c * mb));
      for (int m = 0; m < mb; ++m) {
        const auto& seq = seqs[static_cast<size_t>((int64_t{a} * dp + replica) * mb + m)];
        for (int64_t i = 0; i < c; ++i) {
          tok[a][m * c + i] = seq[static_cast<size_t>(idx[i])];
          tgt[a][m * c + i] = seq[static_cast<size_t>(idx[i] + 1)];
        }
      }
      return TokenBatch{tok[a].data(), tgt[a].data(), idx.data(), c, mb};
    };
    auto before = [&](int a) { model_state.set_micro_step(a, ga); };
    auto held_at = [&](int a, int k) -> size_t& { return held_by[static_cast<size_t>(a * member.chunks() + k)]; };
    auto held_of = [&](int a, int k) { return held_at(a, k); };
    if (half_pass == nullptr)
      return float_stage->run_step(
          [&](int a, int k, StageIo<float>* io) {
            return member.pass<float>(kernels, *full_pass, batch(a), grad_scale, fwd, bwd, plan.choice.checkpointing,
                                      io, &held_at(a, k), times, tp_float, k);
          },
          before, held_of, held);
    const double l = half_stage->run_step(
        [&](int a, int k, StageIo<Bf16>* io) {
          return member.pass<Bf16>(half, *half_pass, batch(a), grad_scale, half_attention.forward,
                                   half_attention.backward, plan.choice.checkpointing, io, &held_at(a, k), times,
                                   tp_half, k);
        },
        before, held_of, held);
    half_attention.reset();
    return l;
  };
  // bf16 storage rounds every activation and gradient: run --verify's fp64 comparison
  // allows for it (measured on the cpu: README "Training").
  const double verify_tolerance = bf16 ? std::max(attention.verify_tolerance(), kMixedPrecisionVerifyTolerance)
                                       : attention.verify_tolerance();
  const bool json = opt.format == "json";
  const bool checkpoints = !opt.checkpoint_dir.empty();

  if (rank == 0) {
    std::fputs(header(opt, in, sequences, st.step, model_state.collectives()).c_str(),
               json ? stderr : stdout);
    if (!json)
      std::printf("%8s  %8s  %10s  %10s  %12s  %8s  %8s\n%8s  %8s  %10s  %10s  %12s  %8s  %8s\n",
                  "step", "loss", "tokens/s", "step time", "exposed comm", "exposed", "ETA", "",
                  "(nats)", "(tok/s)", "(ms)", "(ms)", "(%)", "(s)");
    std::fflush(stdout);
  }
  std::vector<Measurement> records;
  std::optional<VerifyResult> verified;
  double elapsed = 0;
  int64_t timed = 0;
  size_t held_activations = 0;  // the most stored for backward at once (a pipeline's micro-batches in flight)
  for (int64_t step = st.step; step < opt.steps; ++step) {
    watchdog.arm("the barrier before training step " + std::to_string(step + 1));
    MPI_Barrier(MPI_COMM_WORLD);
    watchdog.disarm();
    const double t0 = MPI_Wtime();
    std::vector<std::vector<int32_t>> seqs;
    for (int64_t s = 0; s < sequences; ++s) seqs.push_back(next_sequence());
    model_state.zero_grads();
    model_state.set_step(static_cast<int>(step));
    if (tp_comm) tp_comm->set_step(static_cast<int>(step));
    peers->set_step(static_cast<int>(step));
    PassTimes pass_times;
    attention.reset_exposed();
    attention.set_step(static_cast<int>(step));
    size_t held = 0;
    double loss = run_micro_steps(seqs, &pass_times, &held);
    held_activations = std::max(held_activations, held);
    // The gradient shards summed over the replicas (DDP) and the loss over every rank:
    // blocking, so wholly exposed; FSDP's collectives count the time blocked in them.
    const double ta = MPI_Wtime();
    model_state.finish_gradients();
    if (tp_comm) tp_comm->check_order();
    watchdog.arm("comparing the ranks' posts across communicators");
    posts.check(MPI_COMM_WORLD);
    watchdog.disarm();
    watchdog.arm("the loss all-reduce of training step " + std::to_string(step + 1));
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    watchdog.disarm();
    const double exposed = attention.exposed_comm_s() + model_state.comm_s() + (tp_comm ? tp_comm->comm_s() : 0) +
                           peers->comm_s() + (MPI_Wtime() - ta);
    if (opt.verify && step == 0) {  // the full parameters and gradients, on every rank
      const std::vector<float> params = whole(model_state.unshard(StateArray::kParams));
      const std::vector<float> grads = whole(model_state.unshard(StateArray::kGrads));
      if (rank == 0)
        verified = verify_step(in.model, plan, params, grads, loss, seqs, grad_scale,
                               verify_tolerance);
    }
    // With tp > 1 the members' norms add up, the tensors they all hold counted by member 0;
    // with pp > 1 the stages'.
    double grad_sq = tp_comm ? tp_comm->sum(model_state.grad_squared_norm(tp_rank == 0))
                             : model_state.grad_squared_norm();
    if (pp > 1) grad_sq = peers->sum(grad_sq);
    const double grad_norm = std::sqrt(grad_sq);
    const double to = MPI_Wtime();
    model_state.optimizer_step(opt.optimizer, grad_norm);
    kernels.synchronize();  // the update's time, not its posting
    const double optimizer_s = MPI_Wtime() - to;
    const double my_step_s = MPI_Wtime() - t0;
    double times[2] = {my_step_s, exposed};  // the slowest rank's
    MPI_Allreduce(MPI_IN_PLACE, times, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    st.step = step + 1;
    if (data) st.data = data->position();
    if (step >= opt.untimed_steps) {
      elapsed += times[0];
      ++timed;
    }
    std::vector<Measurement> mine = attention.take_records();
    std::vector<Measurement> collectives = model_state.take_records();
    if (tp_comm) {
      std::vector<Measurement> t = tp_comm->take_records();
      collectives.insert(collectives.end(), t.begin(), t.end());
    }
    {
      std::vector<Measurement> p = peers->take_records();
      collectives.insert(collectives.end(), p.begin(), p.end());
    }
    if ((!opt.measurements_path.empty() || !opt.trace_path.empty()) && step >= opt.untimed_steps) {
      records.insert(records.end(), mine.begin(), mine.end());
      records.insert(records.end(), collectives.begin(), collectives.end());
      // The rest of the step, labelled with the work the cost model charges for it.
      const double rows = static_cast<double>(c) * mb * ga;
      auto add = [&](const char* kind, double start, double seconds, double flops, double bytes) {
        Measurement r;
        r.rank = rank;
        r.ring = attention.ring();
        r.position = attention.position();
        r.iteration = static_cast<int>(step);
        r.layer = -1;
        r.step = -1;
        r.kind = kind;
        r.start = start - attention.epoch();
        r.seconds = seconds;
        r.flops = flops;
        r.bytes = bytes;
        records.push_back(r);
      };
      add("linear", t0, pass_times.linear_s, rows * step_work.gemm_flops, 0);
      add("elementwise", t0, pass_times.elementwise_s, 0, rows * step_work.elementwise_bytes);
      add("optimizer", to, optimizer_s, 0,
          optimizer_update_bytes(sizeof(float) + 2.0 * model_state.moment_bytes()) * model_state.local_elements());
      add("step", t0, my_step_s, 0, 0);
    }

    if (rank == 0) {
      const double mean_loss = loss * grad_scale;
      const double tokens_per_s = static_cast<double>(sequences) * N / times[0];
      const double eta = timed > 0 ? elapsed / timed * static_cast<double>(opt.steps - st.step) : 0;
      if (json) {
        nlohmann::json j = {{"step", st.step},          {"loss", mean_loss},
                            {"tokens_per_s", tokens_per_s}, {"step_time_s", times[0]},
                            {"exposed_comm_s", times[1]}, {"grad_norm", grad_norm},
                            {"lr", adamw_lr(opt.optimizer, model_state.optimizer_steps() - 1)},
                            {"eta_s", eta}};
        if (kernels.peak_flops() > 0)  // per GPU: the step's tokens are spread over all ranks
          j["mfu"] = tokens_per_s * model_flops_per_token(in.lp) /
                     (kernels.peak_flops() * size);
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%8lld  %8.4f  %10.0f  %10.1f  %12.1f  %8.1f  %8.0f\n",
                    static_cast<long long>(st.step), mean_loss, tokens_per_s, times[0] * 1e3,
                    times[1] * 1e3, 100.0 * times[1] / times[0], eta);
      }
      std::fflush(stdout);
    }
    if (checkpoints && ((opt.checkpoint_every > 0 && st.step % opt.checkpoint_every == 0) ||
                        st.step == opt.steps)) {
      // The unsharded state (so any rank count can resume it), gathered on every rank.
      TrainState all = st;
      all.params = whole(model_state.unshard(StateArray::kParams));
      all.optimizer.step = model_state.optimizer_steps();
      all.optimizer.m = whole(model_state.unshard(StateArray::kMoment1));
      all.optimizer.v = whole(model_state.unshard(StateArray::kMoment2));
      if (rank == 0) {
        const bool kill = fault.kind == FaultSpec::Kind::kCheckpointKill && fault.rank == rank &&
                          fault.step == st.step;
        write_checkpoint(opt.checkpoint_dir, in.model, opt.data_path, all, kill);
        std::fprintf(stderr, "ringmaster train: checkpoint of step %lld written to %s\n",
                     static_cast<long long>(st.step), opt.checkpoint_dir.c_str());
      }
      watchdog.arm("the barrier after the checkpoint of step " + std::to_string(st.step));
      MPI_Barrier(MPI_COMM_WORLD);
      watchdog.disarm();
    }
  }
  {
    // What a rank held (the largest over ranks): model state (parameter, gradient and
    // AdamW shards), unsharded unit buffers at once, stored activations, peak RSS.
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    double held[5] = {static_cast<double>(model_state.sharded_bytes()),
                      static_cast<double>(model_state.peak_unsharded_bytes()),
                      static_cast<double>(held_activations), ru.ru_maxrss * 1024.0,
                      static_cast<double>(member.num_params() * (2 * sizeof(float) + 2 * model_state.moment_bytes()))};
    MPI_Allreduce(MPI_IN_PLACE, held, 5, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
      std::fprintf(json ? stderr : stdout,
                   "# per rank: model state %.2f MiB (replicated: %.2f MiB), unsharded units at "
                   "most %.2f MiB, stored activations %.2f MiB ('%s' checkpointing), peak RSS "
                   "%.1f MiB\n",
                   held[0] / 1048576.0, held[4] / 1048576.0,
                   held[1] / 1048576.0, held[2] / 1048576.0, to_string(plan.choice.checkpointing),
                   held[3] / 1048576.0);
  }
  if (rank == 0 && opt.synthetic_data && timed > 0 && plan.predicted.step_time_s > 0) {
    const double mean = elapsed / timed;
    std::fprintf(json ? stderr : stdout,
                 "# planner predicted %.3f ms per step; measured %.3f ms (%+.0f %%; mean of %lld "
                 "steps after %d untimed)\n",
                 plan.predicted.step_time_s * 1e3, mean * 1e3,
                 100.0 * (mean / plan.predicted.step_time_s - 1.0), static_cast<long long>(timed),
                 opt.untimed_steps);
  }
  bool ok = true;
  if (rank == 0 && verified) {
    double worst = 0;
    for (const TensorCheck& c : verified->checks) worst = std::max(worst, c.rel_err);
    ok = verified->ok();
    std::fprintf(json ? stderr : stdout,
                 "%s# verification of step 1 against a one-rank fp64 reference: %s (max rel err "
                 "%.2e, tolerance %.0e)\n",
                 format_verify_table({*verified}, verify_tolerance).c_str(),
                 ok ? "OK" : "FAILED", worst, verify_tolerance);
  }
  if (!opt.measurements_path.empty()) {
    watchdog.arm("gathering measurements to rank 0");
    const std::vector<Measurement> all = gather_measurements(records);
    watchdog.disarm();
    if (rank == 0) write_measurements_jsonl(all, opt.measurements_path);
  }
  if (!opt.trace_path.empty()) {
    watchdog.arm("gathering the trace to rank 0");
    const std::vector<Measurement> all = gather_measurements(records);
    watchdog.disarm();
    if (rank == 0) write_measurements_trace(all, opt.trace_path, opt.plan_path);
  }
  return ok ? 0 : 1;
}

}  // namespace

TrainOptions run_step_options(const RunOptions& run) {
  TrainOptions t;
  t.plan_path = run.plan_path;
  t.steps = 1 + run.iters;
  t.seed = run.seed;
  t.measurements_path = run.measurements_path;
  t.trace_path = run.trace_path;
  t.backend = run.backend;
  t.mixed_precision_param = run.mixed_precision_param;
  t.mixed_precision_reduce = run.mixed_precision_reduce;
  t.timeout_s = run.timeout_s;
  t.synthetic_data = true;
  t.untimed_steps = 1;
  t.verify = run.verify;
  return t;
}

int check_train_inputs(const TrainOptions& opt) {
  const Loaded in = load_inputs(opt);
  if (!opt.synthetic_data) (void)TokenStream(opt.data_path, in.lp.plan.job.seq_len);
  if (opt.resume) read_latest_checkpoint(opt.checkpoint_dir, in.model);
  return in.lp.plan.job.gpus;
}

int train_rank(const TrainOptions& options) {
  init_mpi_rank();
  int size = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    code = train_body(options, rank, size);
  } catch (const InputError& e) {
    if (rank == 0) std::fprintf(stderr, "ringmaster: %s\n", e.what());
    code = kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringmaster train: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return code;
}

}  // namespace rm::exec
