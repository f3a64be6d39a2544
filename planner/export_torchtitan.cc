#include "planner/export_torchtitan.h"

#include <algorithm>
#include <cstdio>

#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/export_target.h"
#include "planner/pipeline_parallel.h"
#include "planner/tensor_parallel.h"

namespace rm {

std::string torchtitan_export(const Plan& plan, const ModelSpec& model, int gpus_per_node,
                              const std::string& plan_path) {
  const PlanChoice& c = plan.choice;
  auto str = [](int64_t v) { return std::to_string(v); };
  std::string out = export_header(plan, ExportTarget::kTorchtitan, plan_path);
  out += "# Merge into your torchtitan job config; pick the [model] flavor of " + model.name + " (" +
         str(model.layers) + " layers, hidden " + str(model.hidden) + ", " + str(model.heads) + " heads, " +
         str(model.kv_heads) + " kv heads).\n";
  const bool replicas = c.sharding == Sharding::kDdp || c.sharding == Sharding::kHsdp;
  out += placement_comment(plan, gpus_per_node,
                           std::string("torchtitan's mesh [") + (c.pp > 1 ? "pp, " : "") + (replicas ? "dp_replicate, " : "") +
                               (c.tp > 1 ? "dp_shard, cp, tp], TP innermost" : "dp_shard, cp], TP 1"));
  out += "\n[training]\n";
  out += "seq_len = " + str(plan.job.seq_len) + "\n";
  // With pp > 1 one pipeline schedule runs the step's grad_accum micro-batches
  // (pipeline_parallel.h): torchtitan takes local_batch_size / pipeline_parallel_microbatch_size
  // of them, where a local batch of one micro-batch would flush the pipeline after each.
  out += "local_batch_size = " + str(int64_t{c.micro_batch} * (c.pp > 1 ? c.grad_accum : 1)) + "\n";
  out += "global_batch_size = " + str(sequences_per_step(plan.job)) + "\n";
  // The gradients' reduce dtype the plan priced (Job::grad_reduce_in_fp32); torchtitan's
  // default is float32.
  out += plan.job.grad_reduce_in_fp32
             ? "mixed_precision_reduce = \"float32\"\n"
             : "mixed_precision_reduce = \"bfloat16\"  # as priced; torchtitan's default float32 needs --grad-reduce-in-fp32\n";
  out += "\n[parallelism]\n";
  // torchtitan's FSDP2 mesh: ddp replicates only, hsdp shards dp_shard x cp and replicates
  // the rest; zero2 is FSDP2 with reshard_after_forward = False (params kept gathered from
  // the forward to the backward: no backward all-gather; data_parallel.h).
  const int replicate = c.sharding == Sharding::kDdp ? c.dp : c.sharding == Sharding::kHsdp ? c.dp / c.dp_shard : 1;
  out += "data_parallel_replicate_degree = " + str(replicate) + "\n";
  out += "data_parallel_shard_degree = " + str(c.dp / replicate) + "\n";
  if (c.sharding == Sharding::kZero2) out += "fsdp_reshard_after_forward = \"never\"\n";
  // torchtitan's TP plan shards the norms by sequence too (sequence parallelism).
  out += "tensor_parallel_degree = " + str(c.tp) + "\n";
  // Async TP (micro-pipeline TP, tensor_parallel.h): torchtitan refuses it without torch.compile.
  if (c.tp_comm_overlap)
    out += "enable_async_tensor_parallel = true  # needs torch.compile on ([compile] enable = true)\n";
  out += "pipeline_parallel_degree = " + str(c.pp) + "\n";
  if (c.pp > 1 && plan.job.framework != Framework::kPytorch &&
      (c.sharding == Sharding::kFsdp || c.sharding == Sharding::kZero2)) {
    // PyTorch's pipelining stage turns FSDP's gradient sync off until the step's last
    // micro-batch (PipelineStage._configure_data_parallel_mode): unsharded grads in the reduce
    // dtype that a plan priced for torchtitan holds (data_parallel.h's as_run) and this one did not.
    double params = 0;
    for (int s : pp_peak_stage_candidates(c.pp))
      params = std::max(params, pp_stage_params(tp_shard(model, c.tp), pp_layout(model.layers, c), s));
    char gib[32];
    const int grad_bytes = grad_reduce_element_bytes(plan.job, 2);  // torchtitan's bf16 pass
    std::snprintf(gib, sizeof gib, "%.1f", params * grad_bytes / (1 << 30));
    out += std::string("# note: torchtitan's pipeline keeps a stage's gradients unsharded in ") +
           (grad_bytes == 4 ? "fp32" : "bf16") +
           " until the step's\n"
           "# last micro-batch (" +
           gib + " GiB for the largest stage), where this plan priced FSDP's sharded ones:\n"
                 "# re-plan with --target torchtitan to price them.\n";
  }
  if (c.pp > 1) {
    // pipeline_parallel.h: 1F1B, or interleaved with v chunks per rank of U / (pp·v) units.
    // Both less-layers counts are written: torchtitan's default is 1 each, which splits as
    // the plan does only when it counted the embedding and the loss.
    out += std::string("pipeline_parallel_schedule = \"") + pp_schedule_name(c.virtual_stages) + "\"\n";
    out += "pipeline_parallel_microbatch_size = " + str(c.micro_batch) + "\n";
    const int first = c.account_for_embedding_in_pipeline_split ? 1 : 0;
    const int last = c.account_for_loss_in_pipeline_split ? 1 : 0;
    out += "pipeline_parallel_first_stage_less_layers = " + str(first) + "\n";
    out += "pipeline_parallel_last_stage_less_layers = " + str(last) + "\n";
    if (c.virtual_stages > 1)
      out += "pipeline_parallel_layers_per_stage = " + str((model.layers + first + last) / (c.pp * c.virtual_stages)) + "\n";
  }
  out += "context_parallel_degree = " + str(c.cp) + "\n";
  if (c.cp > 1)
    out += std::string("context_parallel_rotate_method = \"") +
           (c.strategy == Strategy::kAllGatherCp ? "allgather" : "alltoall") + "\"\n";
  if (plan.job.fp8_recipe != Fp8Recipe::kNone) {
    // torchao's float8 linears (torchtitan docs/float8.md); FSDP's float8 all-gather is off,
    // as priced (the plan gathers bf16 weights).
    out += "\n[model]\nconverters = [\"float8\"]\n";
    if (const std::string why = fp8_recipe_refusal(ExportTarget::kTorchtitan, plan.job.fp8_recipe); !why.empty())
      out += "# note: the plan was not priced for torchtitan: " + why + "\n";
  }
  out += "\n[activation_checkpoint]\n";
  out += std::string("mode = \"") + (c.checkpointing == Checkpointing::kFull ? "full" : "none") + "\"\n";
  // The plan priced the elementwise work as torch.compile fuses it, and the loss compiled
  // with the model only where it says so (Job::compiled_loss; torchtitan's `components`).
  out += "\n[compile]\nenable = true\n";
  if (plan.job.compiled_loss)
    out += "components = [\"model\", \"loss\"]\n";
  else if (plan.job.chunked_loss)
    out += "components = [\"model\"]\n";
  else
    out += "components = [\"model\"]  # the loss priced eager (12 bytes a logit); --compiled-loss prices it compiled\n";
  return out;
}

}  // namespace rm
