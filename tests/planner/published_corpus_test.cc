// The published-measurement corpus: the strict reader (exact messages), the shipped corpus,
// the sources' FLOP conventions, and how an entry maps onto a pinned plan.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "planner/attention_work.h"
#include "planner/input_error.h"
#include "planner/memory_model.h"
#include "planner/published_corpus.h"
#include "planner/published_prediction.h"
#include "planner/spec_library.h"

namespace {

// One entry, every key of the schema (line 3 is its id, line 8 its gpus).
const std::string kOneEntry = R"(version: 1
entries:
  - id: rfa-a100-fwd-zigzag
    source: "zhuzilin/ring-flash-attention README.md"
    gpu: a100-80gb
    cluster: "8x A100 in one node with NVLink"
    model: llama3-8b
    gpus: 8
    seq_len: 65536
    micro_batch: 1
    global_batch: null
    workload: attention
    passes: forward
    cp: 8
    cp_kind: zigzag
    tp: 1
    pp: 1
    dp: 1
    sharding: none
    checkpointing: none
    precision: bf16
    causal: true
    metric: iterations_per_s
    published: 38.2
    definitions: "iterations/s forward only"
    split: fit
    note: ""
    assumed: [gpu]
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

std::string corpus_error_of(const std::string& yaml) {
  try {
    rm::parse_published_corpus(yaml, "c.yaml");
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "no error";
}

const rm::PublishedEntry& shipped(const std::string& id) {
  static const rm::PublishedCorpus corpus = rm::load_published_corpus();
  for (const auto& e : corpus.entries)
    if (e.id == id) return e;
  FAIL("no shipped entry " << id);
  throw;
}

}  // namespace

TEST_CASE("a corpus entry reads every field") {
  const rm::PublishedCorpus c = rm::parse_published_corpus(kOneEntry, "c.yaml");
  REQUIRE(c.entries.size() == 1);
  const rm::PublishedEntry& e = c.entries[0];
  CHECK(e.id == "rfa-a100-fwd-zigzag");
  CHECK(e.location == "c.yaml:3");
  CHECK(e.gpus == 8);
  CHECK(e.micro_batch == 1);
  CHECK(!e.global_batch);
  CHECK(e.workload == rm::Workload::kAttention);
  CHECK(e.passes == rm::Passes::kForward);
  CHECK(e.cp_kind == rm::CpKind::kZigzag);
  CHECK(e.sharding == rm::Sharding::kNone);
  CHECK(e.checkpointing == rm::Checkpointing::kNone);
  CHECK(e.metric == rm::Metric::kIterationsPerS);
  CHECK(e.published == doctest::Approx(38.2));
  CHECK(e.assumed == std::vector<std::string>{"gpu"});
}

TEST_CASE("a corpus entry's optimizer states: fp32 unless it says, priced as it says, checked") {
  CHECK_FALSE(rm::precision_aware_optimizer(rm::parse_published_corpus(kOneEntry, "c.yaml").entries[0].optimizer));
  const rm::PublishedCorpus c = rm::parse_published_corpus(
      replaced(kOneEntry, "note: \"\"", "note: \"\"\n    store_param_remainders: true\n    exp_avg_sq_dtype: bf16"), "c.yaml");
  const rm::OptimizerStates& o = c.entries[0].optimizer;
  CHECK(o.store_param_remainders);
  CHECK(o.exp_avg_sq_dtype == rm::StateDtype::kBf16);
  CHECK(rm::optimizer_state_bytes(o) == 2 + 4 + 2);
  const std::string why = corpus_error_of(
      replaced(kOneEntry, "note: \"\"", "note: \"\"\n    main_params_dtype: fp16\n    store_param_remainders: true"));
  CHECK(why.find("rfa-a100-fwd-zigzag.store_param_remainders: needs main_params_dtype fp32") != std::string::npos);
  // NeMo 24.07's apex optimizer under bf16 O2 (validation/README.md): the shipped rows say so.
  CHECK(shipped("nemo-h100-gpt3-175b-2k-512gpu").optimizer.store_param_remainders);
  CHECK_FALSE(shipped("nemo-h100-llama3-70b-8k-tp4-pp4-cp2").optimizer.store_param_remainders);
}

TEST_CASE("a bad corpus is refused naming file, line, entry and field") {
  CHECK(corpus_error_of(replaced(kOneEntry, "gpus: 8", "gpus: eight")) ==
        "c.yaml:8: rfa-a100-fwd-zigzag.gpus: expected a whole number in [1, 131072] (got 'eight')");
  CHECK(corpus_error_of(replaced(kOneEntry, "micro_batch: 1", "micro_bach: 1")) ==
        "c.yaml:3: rfa-a100-fwd-zigzag.micro_batch: missing (required); found 'micro_bach' (a misspelling?)");
  CHECK(corpus_error_of(replaced(kOneEntry, "    split: fit\n", "")) ==
        "c.yaml:3: rfa-a100-fwd-zigzag.split: missing (required)");
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    comment: x")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.comment: unknown key; expected one of: account_for_embedding_in_pipeline_split, "
        "account_for_loss_in_pipeline_split, assumed, attention_kernel, causal, "
        "checkpointing, cluster, compile, compiled_loss, cp, cp_kind, definitions, dp, exp_avg_dtype, exp_avg_sq_dtype, "
        "fp8_recipe, framework, global_batch, gpu, gpus, grad_reduce_in_fp32, id, main_params_dtype, "
        "metric, micro_batch, model, note, passes, pp, pp_schedule, precision, published, repeat_kv, seq_len, sharding, source, "
        "split, store_param_remainders, topology, tp, tp_comm_overlap, virtual_stages, workload");
  // A split's accounting and virtual stages: only where the source pipelines (interleaved).
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    account_for_loss_in_pipeline_split: true")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.account_for_loss_in_pipeline_split: expected only with pp > 1");
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    virtual_stages: 8")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.virtual_stages: expected only with pp_schedule interleaved_1f1b");
  // fp8's recipe: required with fp8, refused without it, one of three names.
  CHECK(corpus_error_of(replaced(kOneEntry, "precision: bf16", "precision: fp8")) ==
        "c.yaml:3: rfa-a100-fwd-zigzag.fp8_recipe: expected with precision fp8: tensorwise (torchao), delayed or current "
        "(Transformer Engine's scalings)");
  CHECK(corpus_error_of(replaced(kOneEntry, "precision: bf16", "precision: bf16\n    fp8_recipe: delayed")) ==
        "c.yaml:22: rfa-a100-fwd-zigzag.fp8_recipe: expected only with precision fp8");
  // A compiled loss is the compiled model's.
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    compiled_loss: true")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.compiled_loss: expected only with compile: true");
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    compile: true\n    compiled_loss: true")) ==
        "no error");
  CHECK(corpus_error_of(replaced(kOneEntry, "note: \"\"", "note: \"\"\n    framework: jax")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.framework: expected megatron or pytorch (got 'jax')");
  CHECK(corpus_error_of(replaced(kOneEntry, "precision: bf16", "precision: fp8\n    fp8_recipe: rowwise")) ==
        "c.yaml:22: rfa-a100-fwd-zigzag.fp8_recipe: expected one of tensorwise, delayed, current (got 'rowwise')");
  CHECK(corpus_error_of(replaced(kOneEntry, "cp_kind: zigzag", "cp_kind: ulysses")) ==
        "c.yaml:15: rfa-a100-fwd-zigzag.cp_kind: expected one of none, ring, zigzag, striped, all_gather, "
        "a2a, a2a+p2p (got 'ulysses')");
  CHECK(corpus_error_of(replaced(kOneEntry, "gpus: 8", "gpus: 16")) ==
        "c.yaml:8: rfa-a100-fwd-zigzag.gpus: expected tp * pp * dp * cp = 1 * 1 * 1 * 8 = 8 (got 16)");
  CHECK(corpus_error_of(replaced(replaced(kOneEntry, "cp: 8", "cp: 1"), "dp: 1", "dp: 8")) ==
        "c.yaml:15: rfa-a100-fwd-zigzag.cp_kind: expected none when cp is 1 (got zigzag)");
  CHECK(corpus_error_of(replaced(kOneEntry, "assumed: [gpu]", "assumed: [gpu, flops]")) ==
        "c.yaml:28: rfa-a100-fwd-zigzag.assumed: item 1 is 'flops': expected the name of another field "
        "of the entry");
  CHECK(corpus_error_of(replaced(kOneEntry, "id: rfa-a100-fwd-zigzag", "id: Ring_1")) ==
        "c.yaml:3: entries[0].id: expected a kebab-case name: a-z, 0-9 and '-' (got 'Ring_1')");
  CHECK(corpus_error_of(replaced(kOneEntry, "version: 1", "version: 2")) ==
        "c.yaml:1: version: expected a whole number in [1, 1] (got 2)");
  const std::string entry = kOneEntry.substr(kOneEntry.find("  - id"));
  CHECK(corpus_error_of(kOneEntry + entry) ==
        "c.yaml:29: rfa-a100-fwd-zigzag.id: duplicate id (first at c.yaml:3)");
}

TEST_CASE("the shipped corpus loads: 145 entries, unique ids, 102 held out, own measurements held out") {
  const rm::PublishedCorpus c = rm::load_published_corpus();
  CHECK(c.source == "validation/published.yaml");
  CHECK(c.entries.size() == 145);
  std::set<std::string> ids;
  int heldout = 0, own = 0;
  for (const auto& e : c.entries) {
    ids.insert(e.id);
    heldout += e.split == rm::Split::kHeldout;
    // The project's own timings (validation/measured/) never join the fit split.
    if (rm::own_measurement(e)) {
      ++own;
      CHECK_MESSAGE(e.split == rm::Split::kHeldout, e.id);
    }
  }
  CHECK(ids.size() == c.entries.size());
  CHECK(heldout == 102);
  CHECK(own == 23);
}

TEST_CASE("the sources' FLOP conventions reproduce their own checks") {
  CHECK(rm::flop_convention(shipped("fa2-a100-gpt3xl-2k").definitions) == rm::FlopConvention::kMegatron);
  CHECK(rm::flop_convention(shipped("fa3-h100-fwd-noncausal-8448").definitions) ==
        rm::FlopConvention::kAttentionKernel);
  CHECK(!rm::flop_convention("TFLOPS / GPU; formula not given"));
  // NeMo's and the Llama 3 paper's, assumed (validation/published.yaml): Megatron's convention.
  CHECK(rm::flop_convention(shipped("nemo-h100-llama2-7b-4k").definitions) == rm::FlopConvention::kMegatron);
  CHECK(rm::flop_convention(shipped("llama3-paper-405b-8k-8192gpu").definitions) == rm::FlopConvention::kMegatron);
  // It reproduces NeMo's performance summary (NeMo 24.07, LLAMA2-7B FP8 on 8 H100, 4096):
  // 16847 tokens/s per GPU is 776 TFLOP/s.
  const double nemo = rm::megatron_flops_per_sequence(rm::load_model("llama2-7b"), 4096) / 4096;
  CHECK(16847 * nemo == doctest::Approx(776e12).epsilon(0.002).scale(0));
  // FlashAttention-3, Table 2: {batch 4, seqlen 8448, 16 heads x 128} forward in 3.538 ms is
  // 661 TFLOP/s.
  const double fa3 = 4 * rm::attention_kernel_flops_per_sequence(rm::load_model("gpt3-xl"), 8448, false,
                                                                  rm::Passes::kForward);
  CHECK(fa3 / 3.538e-3 == doctest::Approx(661e12).epsilon(0.001).scale(0));
  // Causal halves the forward; the backward adds 2.5x.
  const rm::ModelSpec m = rm::load_model("gpt3-xl");
  CHECK(rm::attention_kernel_flops_per_sequence(m, 4096, true, rm::Passes::kForwardBackward) ==
        doctest::Approx(3.5 * 0.5 * rm::attention_kernel_flops_per_sequence(m, 4096, false, rm::Passes::kForward)));
  // llm-foundry: MPT-7B at 2K, 4641 tokens/s per GPU is MFU 64.23 % of 312 TFLOP/s (its
  // NumParams 6.659e9; the shape's tied count is 0.15 % lower).
  const double per_token = rm::megatron_flops_per_sequence(rm::load_model("mpt-7b"), 2048) / 2048;
  CHECK(4641 * per_token / 312e12 == doctest::Approx(0.6423).epsilon(0.003).scale(0));
}

TEST_CASE("an entry maps onto the plan its source ran") {
  const rm::PublishedCheck ring = rm::check_published(shipped("rfa-a100-fwdbwd-zigzag"));
  REQUIRE(ring.modelled);
  CHECK(ring.topology == "a100-nvlink-box");
  CHECK(ring.plan.choice.strategy == rm::Strategy::kRing);
  CHECK(ring.plan.choice.cp == 8);
  CHECK(ring.plan.choice.dp == 1);
  CHECK(ring.plan.choice.load_balance == rm::LoadBalance::kZigzag);
  CHECK(ring.plan.choice.schedule == rm::Schedule::kFlat);
  CHECK(ring.plan.job.workload == rm::Workload::kAttention);
  CHECK(ring.predicted == doctest::Approx(1 / ring.plan.predicted.step_time_s));
  CHECK(ring.error == doctest::Approx((10.6 - ring.predicted) / ring.predicted));

  const rm::PublishedCheck fsdp = rm::check_published(shipped("llmfoundry-a100-mpt13b-32k"));
  REQUIRE(fsdp.modelled);
  CHECK(fsdp.topology == "a100-nvlink-box");
  CHECK(fsdp.plan.choice.cp == 1);
  CHECK(fsdp.plan.choice.dp == 8);
  CHECK(fsdp.plan.choice.grad_accum == 3);  // global batch 24 over 8 ranks
  CHECK(fsdp.plan.choice.checkpointing == rm::Checkpointing::kFull);
  CHECK(fsdp.predicted == doctest::Approx(fsdp.plan.predicted.tokens_per_s / 8));

  const rm::PublishedCheck mb = rm::check_published(shipped("llmfoundry-a100-mpt7b-2k"));
  REQUIRE(mb.modelled);
  CHECK(mb.plan.choice.micro_batch == 6);
  CHECK(mb.plan.choice.grad_accum == 2);  // global batch 96 = 6 x 2 x 8
  CHECK(mb.assumed.empty());

  const rm::PublishedCheck multi = rm::check_published(shipped("torchtitan-a100-llama3-8b-8k"));
  REQUIRE(multi.modelled);
  CHECK(multi.topology == "dgx-a100-ib");
  CHECK(multi.plan.choice.checkpointing == rm::Checkpointing::kSelective);

  const rm::PublishedCheck h800 = rm::check_published(shipped("rfa-h800-fwd-stripe"));
  REQUIRE(h800.modelled);
  CHECK(h800.topology == "h800-nvlink-box");
  CHECK(h800.plan.choice.load_balance == rm::LoadBalance::kStriped);
}

TEST_CASE("what the planner cannot express is not modelled, with every reason") {
  // all_gather CP, TP, PP (1F1B, as stated) and fp8 linear layers are plans the planner
  // prices (search.h, tensor_parallel.h, pipeline_parallel.h, linear_precision.h).
  const rm::PublishedCheck r = rm::check_published(shipped("torchtitan-h100-llama3-405b-cp8-256k"));
  REQUIRE(r.modelled);
  CHECK(r.plan.choice.pp == 8);
  CHECK(r.plan.choice.virtual_stages == 1);
  CHECK(r.topology == "grand-teton-h100-96gb");
  // The Llama 3 paper interleaves 126 layers over 16 stages, its first and last chunk
  // holding only the embedding and only the head: 8 virtual stages of one unit.
  const rm::PublishedCheck llama = rm::check_published(shipped("llama3-paper-405b-8k-8192gpu"));
  REQUIRE(llama.modelled);
  CHECK(llama.plan.choice.pp == 16);
  CHECK(llama.plan.choice.virtual_stages == 8);
  CHECK(llama.plan.choice.account_for_embedding_in_pipeline_split);
  CHECK(llama.plan.choice.account_for_loss_in_pipeline_split);
  CHECK(llama.plan.choice.sharding == rm::Sharding::kZero2);
  // FlashAttention-2's rows carry their repository's config (zero1, 8 sequences per GPU).
  rm::PublishedEntry fa2_entry = shipped("fa2-a100-gpt3xl-2k");
  const rm::PublishedCheck fa2 = rm::check_published(fa2_entry);
  REQUIRE(fa2.modelled);
  CHECK(fa2.assumed.empty());
  CHECK(fa2.plan.choice.sharding == rm::Sharding::kZero1);
  CHECK(fa2.plan.choice.micro_batch == 8);
  // What a source leaves unstated is priced at the planner's pick and default, and said.
  fa2_entry.micro_batch.reset();
  fa2_entry.global_batch.reset();
  fa2_entry.sharding.reset();
  const rm::PublishedCheck silent = rm::check_published(fa2_entry);
  CHECK(silent.modelled);
  REQUIRE(silent.assumed.size() == 3);
  CHECK(silent.assumed[0].rfind("micro_batch ", 0) == 0);
  CHECK(silent.assumed[1] == "global batch 2M tokens, the planner's default (not stated)");
  CHECK(silent.assumed[2] == "FSDP (sharding not stated)");
  // Every shipped entry is either priced or says why not.
  for (const auto& e : rm::load_published_corpus().entries) {
    CAPTURE(e.id);
    const rm::PublishedCheck c = rm::check_published(e);
    CHECK(c.modelled == c.not_modelled.empty());
  }
}

TEST_CASE("an entry's attention kernel scales the GPU's attention curve by the topology's factor") {
  // Absent: the one the GPU's curve describes, FlashAttention-2 on this A100.
  const rm::PublishedCorpus plain = rm::parse_published_corpus(kOneEntry, "c.yaml");
  CHECK(plain.entries[0].attention_kernel.empty());
  CHECK(rm::check_published(plain.entries[0]).plan.job.attention_kernel == "flash_attn_2");
  const std::string triton = replaced(kOneEntry, "    causal: true", "    attention_kernel: triton\n    causal: true");
  const rm::PublishedEntry t = rm::parse_published_corpus(triton, "c.yaml").entries[0];
  CHECK(t.attention_kernel == "triton");
  // The same call is slower by the a100 topology's triton factor (attention alone, fwd).
  const rm::PublishedCheck fa2 = rm::check_published(plain.entries[0]);
  const rm::PublishedCheck slow = rm::check_published(t);
  REQUIRE(fa2.modelled);
  REQUIRE(slow.modelled);
  const double factor = rm::load_topology(fa2.topology).gpu.attention_kernels.at("triton");
  CHECK(factor < 1);
  CHECK(slow.predicted < fa2.predicted);
  CHECK(slow.predicted > fa2.predicted * factor * 0.9);  // transfers and merges do not slow down
  // A kernel the topology has no constant for is not modelled, saying so.
  const std::string fa3 = replaced(kOneEntry, "    causal: true", "    attention_kernel: flash_attn_3\n    causal: true");
  const rm::PublishedCheck none = rm::check_published(rm::parse_published_corpus(fa3, "c.yaml").entries[0]);
  CHECK(!none.modelled);
  REQUIRE(none.not_modelled.size() == 1);
  CHECK(none.not_modelled[0].find("attention kernel flash_attn_3") == 0);
  // A malformed name is refused at reading.
  CHECK(corpus_error_of(replaced(kOneEntry, "    causal: true", "    attention_kernel: Flash-3\n    causal: true")) ==
        "c.yaml:22: rfa-a100-fwd-zigzag.attention_kernel: expected a name of a-z, 0-9 and '_' (got 'Flash-3')");
  // On the B200 the curve is Transformer Engine's fused attention: an entry that names no
  // kernel is priced as that, and FlashAttention-2 has no B200 constant.
  const rm::PublishedCheck b200 = rm::check_published(shipped("nemo-b200-llama3-8b-1m-cp16"));
  REQUIRE(b200.modelled);
  CHECK(b200.plan.job.attention_kernel == "cudnn");
  const std::string fa2_b200 = replaced(replaced(kOneEntry, "gpu: a100-80gb", "gpu: b200"), "    causal: true",
                                        "    attention_kernel: flash_attn_2\n    causal: true");
  const rm::PublishedCheck no_fa2 = rm::check_published(rm::parse_published_corpus(fa2_b200, "c.yaml").entries[0]);
  CHECK(!no_fa2.modelled);
  REQUIRE(no_fa2.not_modelled.size() == 1);
  CHECK(no_fa2.not_modelled[0] == "attention kernel flash_attn_2: topology dgx-b200-ib has no constant for it");
}

TEST_CASE("an entry's topology names the cluster its source ran on") {
  // The Llama 3 paper's runs are priced on Meta's RoCE cluster, not the 32-node DGX fabric:
  // 16,384 GPUs fit there.
  const rm::PublishedCheck llama = rm::check_published(shipped("llama3-paper-405b-8k-16384gpu"));
  CHECK(llama.modelled);
  CHECK(llama.topology == "llama3-h100-roce");
  CHECK(shipped("llama3-paper-405b-8k-16384gpu").topology == "llama3-h100-roce");
  // Named on a small run, it replaces the GPU's default box.
  const std::string roce = replaced(replaced(kOneEntry, "gpu: a100-80gb", "gpu: h100-80gb"), "    model:",
                                    "    topology: llama3-h100-roce\n    model:");
  const rm::PublishedCheck r = rm::check_published(rm::parse_published_corpus(roce, "c.yaml").entries[0]);
  REQUIRE(r.modelled);
  CHECK(r.topology == "llama3-h100-roce");
  // An unknown one and a malformed name are refused, naming the entry's field.
  const std::string unknown = replaced(roce, "topology: llama3-h100-roce", "topology: no-such-cluster");
  try {
    rm::check_published(rm::parse_published_corpus(unknown, "c.yaml").entries[0]);
    FAIL("an unknown topology was accepted");
  } catch (const rm::InputError& e) {
    CHECK(std::string(e.what()).find("c.yaml:3: rfa-a100-fwd-zigzag.topology: ") == 0);
  }
  CHECK(corpus_error_of(replaced(roce, "topology: llama3-h100-roce", "topology: ../x.yaml")) ==
        "c.yaml:7: rfa-a100-fwd-zigzag.topology: expected a shipped topology's name of a-z, 0-9, '-' and '_' "
        "(got '../x.yaml')");
}

TEST_CASE("an entry run without torch.compile pays for eager elementwise kernels") {
  // torchtitan's Llama without compile: RMSNorm, rotary, repeat_kv and SwiGLU as one kernel
  // per op (attention_work.h): about 3.3x the fused bytes for Llama 3 8B.
  const rm::ModelSpec llama = rm::load_model("llama3-8b");
  const double fused = rm::elementwise_bytes_per_token(llama, 2).layer_fwd;
  const double eager = rm::elementwise_bytes_per_token(llama, 2, true).layer_fwd;
  CHECK(fused == doctest::Approx(188416));
  CHECK(eager == doctest::Approx(626688));
  const rm::PublishedEntry& e = shipped("torchtitan-h100-llama3-8b-fsdp8");
  REQUIRE(e.compile.has_value());
  CHECK(!*e.compile);
  const rm::PublishedCheck eager_run = rm::check_published(e);
  rm::PublishedEntry compiled = e;
  compiled.compile = true;
  const rm::PublishedCheck compiled_run = rm::check_published(compiled);
  REQUIRE(eager_run.modelled);
  REQUIRE(compiled_run.modelled);
  CHECK(eager_run.predicted < compiled_run.predicted);
  // The key is optional: absent, the framework's own kernels are priced fused.
  CHECK(!rm::parse_published_corpus(kOneEntry, "c.yaml").entries[0].compile);
  CHECK(corpus_error_of(replaced(kOneEntry, "causal: true", "causal: true\n    compile: maybe")).find(
            "rfa-a100-fwd-zigzag.compile: ") != std::string::npos);
}

TEST_CASE("repeat_kv: K,V of every query head, where context parallelism moves them") {
  // torchtitan's Llama repeats K,V before SDPA, and PyTorch's context parallelism exchanges
  // SDPA's inputs: Llama 3 405B's 8 KV heads travel as 128 (16 per TP 8 rank).
  rm::ModelSpec llama = rm::load_model("llama3-405b");
  const double gqa = rm::kv_block_bytes(4096, llama, 2);
  llama.kv_repeated = true;
  CHECK(rm::kv_block_bytes(4096, llama, 2) == doctest::Approx(gqa * 16));
  CHECK(rm::dkv_block_bytes(4096, llama) == doctest::Approx(gqa * 16 * 2));
  CHECK(rm::linear_flops_per_token(llama).qkv == doctest::Approx(rm::linear_flops_per_token(rm::load_model("llama3-405b")).qkv));
  // A ring of 8 across hosts: slower with the repeated K,V; one GPU per sequence (CP 1): the same.
  for (const char* id : {"torchtitan-h100-llama3-405b-cp8-256k", "torchtitan-h100-llama3-405b-cp1-32k"}) {
    CAPTURE(id);
    const rm::PublishedEntry& e = shipped(id);
    CHECK(e.repeat_kv);
    rm::PublishedEntry plain = e;
    plain.repeat_kv = false;
    const rm::PublishedCheck repeated = rm::check_published(e), gqa_run = rm::check_published(plain);
    REQUIRE(repeated.modelled);
    REQUIRE(gqa_run.modelled);
    if (e.cp > 1) CHECK(repeated.predicted < 0.9 * gqa_run.predicted);
    else CHECK(repeated.predicted == doctest::Approx(gqa_run.predicted));
  }
  CHECK_FALSE(rm::parse_published_corpus(kOneEntry, "c.yaml").entries[0].repeat_kv);
  CHECK(corpus_error_of(replaced(kOneEntry, "causal: true", "causal: true\n    repeat_kv: 2")).find(
            "rfa-a100-fwd-zigzag.repeat_kv: ") != std::string::npos);
}

TEST_CASE("tp_comm_overlap: optional, tp > 1 only, pinned as the source ran it") {
  CHECK_FALSE(rm::parse_published_corpus(kOneEntry, "c.yaml").entries[0].tp_comm_overlap);
  CHECK(corpus_error_of(replaced(kOneEntry, "causal: true", "causal: true\n    tp_comm_overlap: true")).find(
            "rfa-a100-fwd-zigzag.tp_comm_overlap: expected only with tp > 1") != std::string::npos);
  // torchtitan's 70B row, without and with AsyncTP: the same run, its TP collectives
  // overlapped in chunks (tensor_parallel.h) in the second.
  const rm::PublishedEntry& sync = shipped("torchtitan-h100-llama3-70b-fsdp32-tp8");
  const rm::PublishedEntry& async = shipped("torchtitan-h100-llama3-70b-fsdp32-tp8-asynctp");
  CHECK_FALSE(sync.tp_comm_overlap);
  CHECK(async.tp_comm_overlap);
  const rm::PublishedCheck a = rm::check_published(sync), b = rm::check_published(async);
  REQUIRE(a.modelled);
  REQUIRE(b.modelled);
  CHECK_FALSE(a.plan.choice.tp_comm_overlap);
  CHECK(b.plan.choice.tp_comm_overlap);
  CHECK(b.predicted > a.predicted);
}
