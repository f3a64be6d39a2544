// Export to Megatron-LM and torchtitan: what each framework can express, where its ranks go,
// and Megatron's own argument rules on every plan `plan --target megatron` makes for the
// study's grid; `plan --target slurm`, the plans ringmaster's own executor runs. The rules, as Megatron-LM states them:
//  - megatron/training/arguments.py, validate_args: "world size ({}) is not divisible by tensor
//    parallel size ({}) times pipeline parallel size ({}) times context parallel size ({})";
//    data_parallel_size = world_size // (TP x PP x CP).
//  - the same: `if "a2a+p2p" in args.cp_comm_type: assert args.hierarchical_context_parallel_sizes
//    is not None`, and `context_parallel_size == prod(hierarchical_context_parallel_sizes)`.
//  - megatron/training/utils.py, get_batch_on_this_cp_rank: `val.view(..., 2 * cp_size,
//    val.shape[seq_dim] // (2 * cp_size), ...)`, rank r keeps chunks r and 2*cp_size - r - 1.
// torchtitan's fields: torchtitan/config/job_config.py (Parallelism.context_parallel_degree,
// context_parallel_rotate_method "allgather" | "alltoall", ActivationCheckpoint.mode).
#include <doctest/doctest.h>

#include "planner/cost_model.h"
#include "planner/export_megatron.h"
#include "planner/export_slurm.h"
#include "planner/export_target.h"
#include "planner/export_torchtitan.h"
#include "planner/input_error.h"
#include "planner/search.h"
#include "planner/spec_library.h"

using namespace rm;

namespace {

struct Study {
  explicit Study(int gpus) : fabric(topo, gpus), planner(model, fabric, CostParams::from_topology(topo)) {}
  Topology topo = load_topology(kStudyTopology);
  ModelSpec model = load_model(kDefaultModel);
  Fabric fabric;
  Planner planner;
};

}  // namespace

TEST_CASE("plan --target megatron: every plan of the study grid passes Megatron's argument rules") {
  for (int gpus : kStudyGpus) {
    Study s(gpus);
    for (int64_t n : kStudySeqs) {
      CAPTURE(gpus);
      CAPTURE(n);
      const Plan p = plan_for_target(s.planner, study_job(gpus, n), {}, ExportTarget::kMegatron, s.model,
                                     s.topo.gpus_per_node, "test");
      CHECK(export_refusal(p, s.model, s.topo.gpus_per_node, ExportTarget::kMegatron) == "");
      const MegatronArgs a = megatron_args(p, s.model);
      CHECK(megatron_rule_violations(a).empty());
      // The rules restated here, independently of megatron_rule_violations.
      CHECK(a.tp * a.pp * a.cp * a.dp == gpus);
      CHECK(a.seq_length % (2 * a.cp) == 0);
      CHECK(a.global_batch_size % (int64_t{a.micro_batch_size} * a.dp) == 0);
      CHECK((a.cp == 1 || a.cp_comm_type == "p2p" || a.cp_comm_type == "all_gather" || a.cp_comm_type == "a2a" ||
             a.cp_comm_type == "a2a+p2p"));
      // a2a+p2p: the split as --hierarchical-context-parallel-sizes, product CP.
      if (a.cp_comm_type == "a2a+p2p") {
        REQUIRE(a.hierarchical_cp_sizes.size() == 2);
        CHECK(a.hierarchical_cp_sizes[0] * a.hierarchical_cp_sizes[1] == a.cp);
      }
      CHECK(p.choice.schedule == Schedule::kFlat);
      // a2a attends over the whole sequence per head group: its split prices nothing.
      CHECK((p.choice.load_balance == LoadBalance::kZigzag || p.choice.strategy == Strategy::kUlysses));
    }
  }
}

TEST_CASE("Megatron's rules catch what Megatron would reject") {
  Study s(16);
  const Plan p = plan_for_target(s.planner, study_job(16, 1048576), {}, ExportTarget::kMegatron, s.model,
                                 s.topo.gpus_per_node, "test");
  const MegatronArgs good = megatron_args(p, s.model);
  REQUIRE(megatron_rule_violations(good).empty());
  MegatronArgs a = good;
  a.dp += 1;
  CHECK(megatron_rule_violations(a).front().rfind("world size 16 != TP x PP x CP x DP", 0) == 0);
  a = good;
  a.cp_comm_type = "a2a+p2p";
  a.hierarchical_cp_sizes.clear();  // whatever the plan chose
  REQUIRE(!megatron_rule_violations(a).empty());
  CHECK(megatron_rule_violations(a).front().find("--hierarchical-context-parallel-sizes") != std::string::npos);
  a.hierarchical_cp_sizes = {2, a.cp / 2};
  CHECK(megatron_rule_violations(a).empty());  // 32 heads split 2 ways
  a = good;
  a.seq_length = 2 * a.cp * 1000 + a.cp;  // divisible by CP, not by 2 x CP
  CHECK(megatron_rule_violations(a).front().find("2 x CP") != std::string::npos);
  a = good;
  a.sequence_parallel = true;  // TP is 1
  CHECK(megatron_rule_violations(a).size() == 1);
}

TEST_CASE("refusals name the plan field and the framework's rule") {
  Study s(16);
  const Job job = study_job(16, 1048576);
  SearchPins pins;
  pins.cp = 16;
  const int gpn = s.topo.gpus_per_node;
  auto refusal = [&](SearchPins extra, ExportTarget t) {
    return export_refusal(s.planner.best_ring_plan(job, extra), s.model, gpn, t);
  };
  SearchPins bi = pins;
  bi.schedule = Schedule::kBidirectional;
  CHECK(refusal(bi, ExportTarget::kMegatron).rfind("plan.schedule: Megatron-LM's ring passes K,V in one direction", 0) == 0);
  SearchPins two = pins;
  two.schedule = Schedule::kTwoLevel;
  CHECK(refusal(two, ExportTarget::kMegatron).find("a2a+p2p") != std::string::npos);
  CHECK(refusal(two, ExportTarget::kSlurm) == "");  // ringmaster run executes its own schedules
  SearchPins striped = pins;
  striped.schedule = Schedule::kFlat;
  striped.load_balance = LoadBalance::kStriped;
  CHECK(refusal(striped, ExportTarget::kTorchtitan).rfind("plan.load_balance:", 0) == 0);
  SearchPins sel = pins;
  sel.schedule = Schedule::kFlat;
  sel.checkpointing = Checkpointing::kSelective;
  CHECK(refusal(sel, ExportTarget::kTorchtitan).rfind("plan.checkpointing:", 0) == 0);
  CHECK(refusal(sel, ExportTarget::kMegatron) == "");  // --recompute-modules mlp
  Job attention = job;
  attention.workload = Workload::kAttention;
  CHECK(export_refusal(s.planner.best_ring_plan(attention, sel), s.model, gpn, ExportTarget::kMegatron)
            .rfind("workload:", 0) == 0);
  // An order that moves a ring position to another node: torchrun cannot place it.
  Plan moved = s.planner.best_ring_plan(job, sel);
  std::swap(moved.choice.order[0], moved.choice.order[8]);
  CHECK(export_refusal(moved, s.model, gpn, ExportTarget::kMegatron).rfind("plan.order: rank 0", 0) == 0);
}

TEST_CASE("a pin the target cannot run is bad input: the target's search avoids what it lacks") {
  Study s(16);
  SearchPins pins;
  pins.schedule = Schedule::kTwoLevel;
  CHECK_THROWS_AS(plan_for_target(s.planner, study_job(16, 1048576), pins, ExportTarget::kMegatron, s.model, 8, "t"),
                  InputError);
  for (int64_t n : kStudySeqs) {
    const Plan p = plan_for_target(s.planner, study_job(16, n), {}, ExportTarget::kTorchtitan, s.model, 8, "t");
    CAPTURE(n);
    CHECK(p.choice.checkpointing != Checkpointing::kSelective);
    CHECK(export_refusal(p, s.model, 8, ExportTarget::kTorchtitan) == "");
  }
}

TEST_CASE("plan --target searches the collective kinds the framework (or ringmaster run) runs") {
  // 256K tokens on 128 A100s: all-to-all (Ulysses) is the fastest plan (README), Megatron-LM
  // runs it (--cp-comm-type a2a); torchtitan has no all-to-all CP and gets another kind.
  Study s(128);
  const Job job = study_job(128, 262144);
  const Plan any = s.planner.plan(job, {});
  REQUIRE(any.choice.strategy == Strategy::kUlysses);
  const Plan mega = plan_for_target(s.planner, job, {}, ExportTarget::kMegatron, s.model, 8, "t");
  CHECK(mega.choice.strategy == Strategy::kUlysses);
  // The fastest plan shards ZeRO-2 (grads and optimizer states), which Megatron-LM does not
  // run; its FSDP plan, at Megatron-Core's GEMM rate, is within 0.3 %.
  CHECK(mega.predicted.tokens_per_s == doctest::Approx(any.predicted.tokens_per_s).epsilon(0.01).scale(0));
  CHECK(megatron_args(mega, s.model).cp_comm_type == "a2a");
  const Plan titan = plan_for_target(s.planner, job, {}, ExportTarget::kTorchtitan, s.model, 8, "t");
  CHECK(titan.choice.strategy != Strategy::kUlysses);
  CHECK(export_refusal(titan, s.model, 8, ExportTarget::kTorchtitan) == "");
  CHECK(titan.predicted.tokens_per_s <= mega.predicted.tokens_per_s);
  // A pinned kind is searched alone; torchtitan refuses a2a naming the strategy.
  SearchPins a2a;
  a2a.cp_comm_type = Strategy::kUlysses;
  CHECK_THROWS_WITH_AS(plan_for_target(s.planner, job, a2a, ExportTarget::kTorchtitan, s.model, 8, "t"),
                       doctest::Contains("plan.strategy: torchtitan has no all-to-all"), InputError);
  SearchPins ag;
  ag.cp_comm_type = Strategy::kAllGatherCp;
  CHECK(plan_for_target(s.planner, job, ag, ExportTarget::kTorchtitan, s.model, 8, "t").choice.strategy ==
        Strategy::kAllGatherCp);
  // --target slurm: what `ringmaster run` executes (tp 1, pp 1, p2p or all_gather on GPUs), and none
  // of those plans, pinned, beats its pick.
  const Plan ours = plan_for_target(s.planner, job, {}, ExportTarget::kSlurm, s.model, 8, "t");
  CHECK(run_refusal(ours, s.model, s.topo, "cuda") == "");
  Plan fp8 = ours;  // the executor's linear layers have no float8
  fp8.job.fp8_recipe = Fp8Recipe::kDelayed;
  CHECK(run_refusal(fp8, s.model, s.topo, "cuda").rfind("fp8_recipe: the executor's linear layers run in fp32 or bf16", 0) == 0);
  CHECK(launch_backend(s.topo) == "cuda");
  CHECK(ours.choice.tp == 1);
  CHECK(ours.choice.pp == 1);
  CHECK((ours.choice.strategy == Strategy::kRing || ours.choice.strategy == Strategy::kAllGatherCp));
  CHECK(ours.predicted.tokens_per_s <= any.predicted.tokens_per_s * (1 + 1e-9));
  for (Strategy kind : {Strategy::kRing, Strategy::kAllGatherCp}) {
    SearchPins pins;
    pins.cp_comm_type = kind;
    pins.tp = 1;
    pins.pp = 1;
    const Plan p = s.planner.plan(job, pins);
    if (p.predicted.fits) CHECK(p.predicted.tokens_per_s <= ours.predicted.tokens_per_s * (1 + 1e-9));
  }
  // A pin the executor cannot run is named.
  SearchPins tp2;
  tp2.tp = 2;
  CHECK_THROWS_WITH_AS(plan_for_target(s.planner, job, tp2, ExportTarget::kSlurm, s.model, 8, "t"),
                       doctest::Contains("t: --target: no plan `ringmaster run` can run:"), InputError);
  CHECK_THROWS_WITH_AS(plan_for_target(s.planner, job, tp2, ExportTarget::kSlurm, s.model, 8, "t"),
                       doctest::Contains("plan.tp: the cuda backend runs plans without tensor parallelism"), InputError);
}

TEST_CASE("plan --target picks the best plan the framework runs when a faster one breaks two of its rules") {
  // 256K tokens on 16 A100s for torchtitan: the fastest plan checkpoints selectively
  // (torchtitan has no FFN-only mode) and the fastest with full checkpointing shards zero1
  // (torchtitan has no zero1). The search offers only what torchtitan runs
  // (SearchPins::refusal), so its pick fits and no plan pinned to a level and a policy
  // torchtitan has beats it.
  Study s(16);
  const Job job = study_job(16, 262144);
  const int gpn = s.topo.gpus_per_node;
  const Plan titan = plan_for_target(s.planner, job, {}, ExportTarget::kTorchtitan, s.model, gpn, "t");
  CHECK(titan.predicted.fits);
  CHECK(export_refusal(titan, s.model, gpn, ExportTarget::kTorchtitan) == "");
  for (Checkpointing ck : {Checkpointing::kNone, Checkpointing::kFull}) {
    for (Sharding level : {Sharding::kZero2, Sharding::kFsdp, Sharding::kHsdp, Sharding::kDdp}) {
      CAPTURE(to_string(ck));
      CAPTURE(to_string(level));
      SearchPins pins;
      pins.checkpointing = ck;
      pins.sharding = level;
      try {
        const Plan p = plan_for_target(s.planner, job, pins, ExportTarget::kTorchtitan, s.model, gpn, "t");
        if (p.predicted.fits) CHECK(p.predicted.tokens_per_s <= titan.predicted.tokens_per_s * (1 + 1e-9));
      } catch (const InputError&) {
        // this level cannot split the job (hsdp on these GPUs)
      }
    }
  }
}

TEST_CASE("rank placement: the snake order reverses every other node's devices") {
  Study s(16);
  SearchPins pins;
  pins.cp = 16;
  pins.order = "snake";
  pins.schedule = Schedule::kFlat;
  const Plan p = s.planner.best_ring_plan(study_job(16, 1048576), pins);
  const RankPlacement pl = rank_placement(p, 8);
  CHECK(pl.nodes == 2);
  CHECK(!pl.node_major);
  CHECK(pl.off_node_rank == -1);
  CHECK(pl.visible_devices[0] == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(pl.visible_devices[1] == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  const std::string toml = torchtitan_export(p, s.model, 8, "plan.yaml");
  CHECK(toml.find("node 1: export CUDA_VISIBLE_DEVICES=7,6,5,4,3,2,1,0") != std::string::npos);
  CHECK(toml.find("context_parallel_degree = 16\n") != std::string::npos);
  CHECK(toml.find("context_parallel_rotate_method = \"alltoall\"") != std::string::npos);
}

TEST_CASE("Megatron's defaults that differ from the priced block are overridden: biases, dropout, tied embeddings") {
  Study s(16);
  const Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  const std::string untied = megatron_command_line(megatron_args(p, s.model));
  // Megatron-LM's arguments.py: add_bias_linear on, --attention-dropout and --hidden-dropout
  // 0.1, embeddings tied unless --untie-embeddings-and-output-weights.
  CHECK(untied.find("--disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0") != std::string::npos);
  CHECK(untied.find("--untie-embeddings-and-output-weights") != std::string::npos);
  ModelSpec tied = s.model;
  tied.tied_embeddings = true;
  const std::string line = megatron_command_line(megatron_args(p, tied));
  CHECK(line.find("--untie-embeddings-and-output-weights") == std::string::npos);
  CHECK(line.find("--hidden-dropout 0.0") != std::string::npos);
}

TEST_CASE("the biases and dropout exported are the model file's, and torchtitan refuses either") {
  Study s(16);
  const Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  // GPT-3 as NeMo builds it: Megatron-LM's defaults (biases on every layer), dropout stated.
  ModelSpec gpt = s.model;
  gpt.bias = LinearBias::kAll;
  gpt.hidden_dropout = 0.1;
  gpt.attention_dropout = 0.1;
  const std::string all = megatron_command_line(megatron_args(p, gpt));
  CHECK(all.find("--disable-bias-linear") == std::string::npos);
  CHECK(all.find("--add-qkv-bias") == std::string::npos);
  CHECK(all.find("--attention-dropout 0.1 --hidden-dropout 0.1") != std::string::npos);
  // Qwen2's Q, K, V biases: no biases elsewhere, then the QKV ones back.
  ModelSpec qwen = s.model;
  qwen.bias = LinearBias::kQkv;
  CHECK(megatron_command_line(megatron_args(p, qwen)).find("--disable-bias-linear --add-qkv-bias --attention-dropout 0.0") !=
        std::string::npos);
  CHECK(export_refusal(p, qwen, 8, ExportTarget::kTorchtitan).find("model.bias: torchtitan") == 0);
  ModelSpec dropped = s.model;
  dropped.attention_dropout = 0.05;
  CHECK(megatron_command_line(megatron_args(p, dropped)).find("--attention-dropout 0.05 --hidden-dropout 0.0") !=
        std::string::npos);
  CHECK(export_refusal(p, dropped, 8, ExportTarget::kTorchtitan).find("model.attention_dropout: torchtitan") == 0);
  // Every field that differs is named.
  gpt.norm = Norm::kLayerNorm;
  CHECK(export_refusal(p, gpt, 8, ExportTarget::kTorchtitan) ==
        "model.norm, model.bias, model.hidden_dropout, model.attention_dropout: torchtitan's models build RMSNorm "
        "blocks with rotary embeddings, SwiGLU FFNs, no biases, no sliding window and no dropout; " + gpt.name +
        " has layernorm, biases (all), hidden dropout, attention dropout: export to Megatron-LM (--to megatron)");
  // GPT's plain FFN too: torchtitan's Llama FFN is SwiGLU only.
  ModelSpec plain = s.model;
  plain.gated_ffn = false;
  CHECK(export_refusal(p, plain, 8, ExportTarget::kTorchtitan).find("model.gated_ffn: torchtitan") == 0);
  CHECK(export_refusal(p, s.model, 8, ExportTarget::kTorchtitan).rfind("model.", 0) != 0);  // Llama: the plan's own
}

TEST_CASE("optimizer states export as Megatron's precision-aware optimizer, torchtitan and the executor refuse them") {
  Study s(16);
  Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  p.choice.sharding = Sharding::kZero1;  // the distributed optimizer
  CHECK(megatron_command_line(megatron_args(p, s.model)).find("precision-aware") == std::string::npos);
  // NeMo's bf16 O2 under apex: the remainders, Megatron-Core's default under the flag.
  p.job.optimizer.store_param_remainders = true;
  std::string line = megatron_command_line(megatron_args(p, s.model));
  CHECK(line.find("--use-precision-aware-optimizer") != std::string::npos);
  CHECK(line.find("store-param-remainders") == std::string::npos);
  CHECK(line.find("--main-params-dtype") == std::string::npos);
  // bf16 moments with a whole fp32 master: the remainders turned off.
  p.job.optimizer = {StateDtype::kFp32, false, StateDtype::kBf16, StateDtype::kBf16};
  line = megatron_command_line(megatron_args(p, s.model));
  CHECK(line.find("--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
                  "--no-store-param-remainders") != std::string::npos);
  CHECK(megatron_rule_violations(megatron_args(p, s.model)).empty());
  p.job.optimizer.main_params_dtype = StateDtype::kFp16;
  line = megatron_command_line(megatron_args(p, s.model));
  CHECK(line.find("--main-params-dtype fp16") != std::string::npos);
  CHECK(line.find("--no-store-param-remainders") == std::string::npos);  // no fp32 master to split
  // Megatron-Core asserts the distributed optimizer under it.
  p.choice.sharding = Sharding::kDdp;
  const std::vector<std::string> broken = megatron_rule_violations(megatron_args(p, s.model));
  REQUIRE(broken.size() == 1);
  CHECK(broken[0].find("only supported with distributed optimizer") != std::string::npos);
  CHECK(export_refusal(p, s.model, 8, ExportTarget::kTorchtitan).find("optimizer states: torchtitan's AdamW") == 0);
  CHECK(run_refusal(p, s.model, s.topo, "cuda").find("the executor's AdamW keeps fp32") != std::string::npos);
  p.job.optimizer = {};
  CHECK(run_refusal(p, s.model, s.topo, "cuda").find("AdamW") == std::string::npos);
}

TEST_CASE("a sliding window exports as Megatron's --window-size, and torchtitan refuses it") {
  Study s(16);
  const Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  CHECK(megatron_command_line(megatron_args(p, s.model)).find("--window-size") == std::string::npos);
  // Mistral's 4096: query i attends keys i-4095..i, Transformer Engine's (left, right) = (4095, 0).
  ModelSpec mistral = s.model;
  mistral.sliding_window = 4096;
  CHECK(megatron_command_line(megatron_args(p, mistral)).find("--swiglu --window-size 4095,0 --disable-bias-linear") !=
        std::string::npos);
  CHECK(export_refusal(p, mistral, 8, ExportTarget::kTorchtitan).find("model.sliding_window: torchtitan") == 0);
  CHECK(export_refusal(p, mistral, 8, ExportTarget::kTorchtitan).find("has a sliding window of 4096") !=
        std::string::npos);
  // Without the causal mask the window does not apply (effective_window), and none is asked for.
  Plan bidirectional = p;
  bidirectional.job.causal = false;
  CHECK(megatron_command_line(megatron_args(bidirectional, mistral)).find("--window-size") == std::string::npos);
}

TEST_CASE("the norm and position embedding exported are the model file's, and a framework without them refuses") {
  Study s(16);
  const Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  // Megatron-LM's defaults are LayerNorm and learned_absolute: a Llama needs both flags.
  CHECK(megatron_command_line(megatron_args(p, s.model)).find("--normalization RMSNorm --position-embedding-type rope") !=
        std::string::npos);
  ModelSpec gpt = s.model;
  gpt.norm = Norm::kLayerNorm;
  gpt.position_embedding = PositionEmbedding::kLearned;
  CHECK(megatron_command_line(megatron_args(p, gpt)).find("--normalization LayerNorm --position-embedding-type "
                                                          "learned_absolute") != std::string::npos);
  CHECK(export_refusal(p, gpt, 8, ExportTarget::kTorchtitan).find("model.norm, model.position_embedding: torchtitan") ==
        0);
  gpt.position_embedding = PositionEmbedding::kAlibi;
  CHECK(export_refusal(p, gpt, 8, ExportTarget::kMegatron).find("model.position_embedding alibi") == 0);
}

TEST_CASE("Megatron's environment and overlap flags: CUDA_DEVICE_MAX_CONNECTIONS=1 with TP or CP, FSDP overlapped") {
  Study s(16);
  SearchPins pins;
  pins.tp = 4;
  pins.sharding = Sharding::kZero1;
  const Plan tp = s.planner.best_ring_plan(study_job(16, 131072), pins);
  REQUIRE(tp.choice.tp == 4);
  // arguments.py: "Using tensor model parallelism or context parallelism require setting the
  // environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1" (before Blackwell).
  CHECK(megatron_export(tp, s.model, 8, "plan.yaml").find("export CUDA_DEVICE_MAX_CONNECTIONS=1") != std::string::npos);
  pins.sharding = Sharding::kFsdp;
  const Plan fsdp = s.planner.best_ring_plan(study_job(16, 131072), pins);
  const std::string out = megatron_export(fsdp, s.model, 8, "plan.yaml");
  CHECK(out.find("CUDA_DEVICE_MAX_CONNECTIONS unset") != std::string::npos);
  CHECK(out.find("CUDA_DEVICE_MAX_CONNECTIONS=1") == std::string::npos);
  CHECK(out.find("--ckpt-format fsdp_dtensor --overlap-grad-reduce --overlap-param-gather") != std::string::npos);
}

TEST_CASE("slurm: a job of part of a node asks for every GPU of it, numbered by PCI bus id, a CPU job overcommits") {
  Study s(4);
  const Plan p = s.planner.best_ring_plan(study_job(4, 131072), SearchPins{});
  SlurmLaunch launch;
  launch.backend = "cuda";
  const std::string script = slurm_export(p, s.topo, "plan.yaml", launch);
  // Four ranks on one node; the step sees GPUs 0..7, rank k uses GPU k (srun --exclusive and
  // --gres: an exclusive job's step otherwise gets GPUs Slurm picks).
  CHECK(script.find("#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-node=8\n") != std::string::npos);
  CHECK(script.find("export CUDA_DEVICE_ORDER=PCI_BUS_ID") < script.find("\nsrun "));
  launch.backend = "cpu";
  const std::string cpu = slurm_export(p, s.topo, "plan.yaml", launch);
  CHECK(cpu.find("gpus-per-node") == std::string::npos);
  CHECK(cpu.find("CUDA_DEVICE_ORDER") == std::string::npos);
  // More ranks than a node's cores, as cpu-local runs them: allowed in the allocation and the step.
  CHECK(cpu.find("#SBATCH --exclusive\n#SBATCH --overcommit\n") != std::string::npos);
  CHECK(cpu.find("--cpu-bind=none --overcommit \\\n") != std::string::npos);
  CHECK(script.find("overcommit") == std::string::npos);
}

TEST_CASE("the attention kernel priced is the one Megatron is told to run") {
  Study s(16);
  Plan p = s.planner.best_ring_plan(study_job(16, 131072), SearchPins{});
  // auto (Megatron's default) lets Transformer Engine choose, cuDNN's on Hopper.
  CHECK(megatron_command_line(megatron_args(p, s.model)).find("--attention-backend flash") != std::string::npos);
  p.job.attention_kernel = "cudnn";
  CHECK(megatron_command_line(megatron_args(p, s.model)).find("--attention-backend fused") != std::string::npos);
  p.job.attention_kernel = "triton";
  const std::vector<std::string> v = megatron_rule_violations(megatron_args(p, s.model));
  REQUIRE(v.size() == 1);
  CHECK(v.front().find("job.attention_kernel 'triton'") == 0);
  CHECK(export_refusal(p, s.model, 8, ExportTarget::kMegatron) == v.front());
}

TEST_CASE("TP comm overlap exports as Megatron's --tp-comm-overlap and torchtitan's async TP") {
  Study s(16);
  SearchPins pins;
  pins.tp = 4;
  pins.tp_comm_overlap = true;
  const Plan on = s.planner.best_ring_plan(study_job(16, 131072), pins);
  REQUIRE(on.choice.tp_comm_overlap);
  const MegatronArgs a = megatron_args(on, s.model);
  CHECK(megatron_rule_violations(a).empty());
  const std::string line = megatron_command_line(a);
  CHECK(line.find("--sequence-parallel --tp-comm-overlap") != std::string::npos);
  CHECK(torchtitan_export(on, s.model, 8, "plan.yaml").find("enable_async_tensor_parallel = true") !=
        std::string::npos);
  pins.tp_comm_overlap = false;
  const Plan off = s.planner.best_ring_plan(study_job(16, 131072), pins);
  CHECK(megatron_command_line(megatron_args(off, s.model)).find("--tp-comm-overlap") == std::string::npos);
  CHECK(torchtitan_export(off, s.model, 8, "plan.yaml").find("async") == std::string::npos);
  // Megatron's rule: overlap only with sequence parallelism.
  MegatronArgs bad = a;
  bad.sequence_parallel = false;
  bool named = false;
  for (const std::string& v : megatron_rule_violations(bad)) named |= v.find("--tp-comm-overlap") != std::string::npos;
  CHECK(named);
}
