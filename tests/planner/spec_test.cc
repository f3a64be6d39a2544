// Shipped specs, YAML validation messages, model parameter counts, parse_size.
#include <doctest/doctest.h>

#include <string>

#include "planner/cost_params.h"
#include "planner/input_error.h"
#include "planner/kernel_efficiency.h"
#include "planner/shipped_specs.h"
#include "planner/spec_library.h"
#include "planner/units.h"
#include "planner/input_file.h"
#include "planner/yaml_reader.h"

namespace {

std::string error_of(const std::string& yaml, bool topology) {
  try {
    if (topology) {
      rm::parse_topology(yaml, "x.yaml");
    } else {
      rm::parse_model(yaml, "x.yaml");
    }
  } catch (const rm::InputError& e) {
    return e.what();
  }
  return "no error";
}

// A shipped topology's text with `from` (which must occur) replaced by `to`.
std::string shipped_topology_with(const std::string& name, const std::string& from, const std::string& to) {
  std::string text =
      rm::read_input_file(std::string(RM_SOURCE_DIR) + "/topologies/" + name + ".yaml", rm::InputKind::kTopology);
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

const char* kTinyModel = R"(name: m
layers: 2
hidden: 256
heads: 4
kv_heads: 2
head_dim: 64
ffn_hidden: 512
vocab: 1024
)";

}  // namespace

TEST_CASE("every shipped spec loads, and its name is its file name") {
  int topologies = 0, models = 0;
  for (const auto& s : rm::shipped_specs()) {
    CAPTURE(s.path);
    if (std::string(s.kind) == "topology") {
      const rm::Topology t = rm::load_topology(s.name);
      CHECK(t.name == s.name);
      CHECK(t.source == std::string("builtin:") + s.name);
      CHECK(t.max_gpus() >= 1);
      CHECK(!t.note.empty());
      ++topologies;
    } else {
      const rm::ModelSpec m = rm::load_model(s.name);
      CHECK(m.name == s.name);
      CHECK(m.params() > 0);
      ++models;
    }
  }
  CHECK(topologies == 15);
  CHECK(models == 19);
  CHECK(rm::load_topology(rm::kStudyTopology).max_gpus() == 128);
  CHECK_NOTHROW(rm::load_model(rm::kDefaultModel));
}

TEST_CASE("the study's cluster carries the published figures") {
  const rm::Topology t = rm::load_topology("dgx-a100-ib");
  CHECK(t.gpu.peak_flops == doctest::Approx(312e12));
  CHECK(t.gpu.memory_bytes == doctest::Approx(80.0 * rm::kGiB));
  CHECK(t.intra.kind == rm::IntraKind::kNvswitch);
  CHECK(t.intra.bytes_per_s == doctest::Approx(300e9));
  CHECK(t.inter.kind == rm::InterKind::kFatTree);
  CHECK(t.inter.nics_per_node == 8);
  CHECK(t.inter.rail_optimized);
  // A 64x64 tile at d = 128 sits near FlashAttention-2's low end, big tiles near its top.
  CHECK(t.gpu.attention.efficiency(64, 64, 128) == doctest::Approx(0.5).epsilon(0.05).scale(0));
  CHECK(t.gpu.attention.efficiency(128, 128, 128) > 0.6);
  CHECK(t.gpu.attention.efficiency(256, 256, 128) == 0);  // does not fit in shared memory
}

TEST_CASE("model parameter counts match the published sizes") {
  // Published totals (model cards / papers cited in each YAML).
  CHECK(rm::load_model("llama2-7b").params() == doctest::Approx(6.74e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama2-13b").params() == doctest::Approx(13.0e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama-30b").params() == doctest::Approx(32.5e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama3-8b").params() == doctest::Approx(8.03e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama3-70b").params() == doctest::Approx(70.6e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("openllama-3b").params() == doctest::Approx(3.43e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama2-70b").params() == doctest::Approx(69.0e9).epsilon(0.03).scale(0));
  // NeMo's GPT-3 sizes by name (5B, 20B) and Brown et al.'s 175B, tied embeddings.
  CHECK(rm::load_model("gpt3-5b").params() == doctest::Approx(5.0e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("gpt3-20b").params() == doctest::Approx(20.0e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("gpt3-175b").params() == doctest::Approx(175.0e9).epsilon(0.03).scale(0));
  CHECK(rm::load_model("llama3-70b").kv_heads == 8);
  const rm::ModelSpec tiny = rm::parse_model(kTinyModel, "m.yaml");
  // 2 x (256*256*2 + 2*256*128 + 3*256*512) + 2*1024*256
  CHECK(tiny.params() == doctest::Approx(2 * (131072 + 65536 + 393216) + 524288));
}

TEST_CASE("a model's norm and position embedding: Llama's by default, as its file says otherwise") {
  const rm::ModelSpec tiny = rm::parse_model(kTinyModel, "m.yaml");
  CHECK(tiny.norm == rm::Norm::kRmsNorm);
  CHECK(tiny.position_embedding == rm::PositionEmbedding::kRope);
  const rm::ModelSpec gpt = rm::parse_model(std::string(kTinyModel) + "norm: layernorm\nposition_embedding: alibi\n", "m.yaml");
  CHECK(gpt.norm == rm::Norm::kLayerNorm);
  CHECK(gpt.position_embedding == rm::PositionEmbedding::kAlibi);
  CHECK(rm::load_model("gpt3-175b").position_embedding == rm::PositionEmbedding::kLearned);
  CHECK(rm::load_model("mpt-7b").norm == rm::Norm::kLayerNorm);
  CHECK(rm::load_model("llama3-70b").norm == rm::Norm::kRmsNorm);
}

TEST_CASE("unknown names and paths") {
  CHECK_THROWS_WITH_AS(rm::load_topology("dgx-z"), doctest::Contains("dgx-a100-ib"), rm::InputError);
  CHECK_THROWS_WITH_AS(rm::load_model("/nonexistent/m.yaml"),
                       doctest::Contains("/nonexistent/m.yaml: cannot read file"), rm::InputError);
}

TEST_CASE("model validation names file, line and field") {
  CHECK(error_of(std::string(kTinyModel) + "dropout: 0.1\n", false) ==
        "x.yaml:9: dropout: unknown key; expected one of: attention_dropout, bias, ffn_hidden, gated_ffn, head_dim, "
        "heads, hidden, hidden_dropout, kv_heads, layers, name, norm, note, position_embedding, sliding_window, "
        "tied_embeddings, vocab");
  CHECK(error_of(std::string(kTinyModel) + "norm: batchnorm\n", false) ==
        "x.yaml:9: norm: expected one of rmsnorm, layernorm (got 'batchnorm')");
  CHECK(error_of(std::string(kTinyModel) + "position_embedding: sinusoidal\n", false) ==
        "x.yaml:9: position_embedding: expected one of rope, learned, alibi (got 'sinusoidal')");
  std::string typo = kTinyModel;
  typo.replace(typo.find("vocab"), 5, "vocabb");
  CHECK(error_of(typo, false) == "x.yaml:1: vocab: missing (required); found 'vocabb' (a misspelling?)");
  std::string neg = kTinyModel;
  neg.replace(neg.find("layers: 2"), 9, "layers: -2");
  CHECK(error_of(neg, false) == "x.yaml:2: layers: expected a whole number in [1, 16384] (got -2)");
  std::string gqa = kTinyModel;
  gqa.replace(gqa.find("kv_heads: 2"), 11, "kv_heads: 3");
  CHECK(error_of(gqa, false) == "x.yaml:5: kv_heads: expected a divisor of heads 4 (got 3)");
  CHECK(error_of("", false) == "x.yaml: file is empty (expected a mapping)");
  CHECK(error_of("- 1\n- 2\n", false).find("expected a mapping") != std::string::npos);
  CHECK(error_of("name: [unclosed\n", false).find("x.yaml:") == 0);
}

TEST_CASE("parse_size: binary suffixes, fractions only when whole, strict") {
  CHECK(rm::parse_size("8k", "--seq", "seq") == 8192);
  CHECK(rm::parse_size("8K", "--seq", "seq") == 8192);
  CHECK(rm::parse_size("1M", "--seq", "seq") == 1048576);
  CHECK(rm::parse_size("1m", "--seq", "seq") == 1048576);
  CHECK(rm::parse_size("2M", "--seq", "seq") == 2097152);
  CHECK(rm::parse_size("1048576", "--seq", "seq") == 1048576);
  CHECK(rm::parse_size("128000", "--seq", "seq") == 128000);
  // A fraction with a suffix, when it gives whole tokens.
  CHECK(rm::parse_size("1.5M", "--seq", "seq") == 1572864);
  CHECK(rm::parse_size("0.5k", "--seq", "seq") == 512);
  for (const char* bad : {"0", "-8k", "8kb", "", "k", "1.3M", "1.5", "1.k", ".5M", "0.0M", "abc",
                          "99999999999999999999", "0k"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(rm::parse_size(bad, "--seq", "seq"), doctest::Contains("--seq: seq: expected"),
                         rm::InputError);
  }
  CHECK(rm::format_size(8192) == "8K");
  CHECK(rm::format_size(1048576) == "1M");
  CHECK(rm::format_size(1536 * 1024) == "1.5M");
  CHECK(rm::format_size(3000) == "3000");
}

TEST_CASE("a GPU's other attention kernels: relative factors, read strictly") {
  const rm::Topology a100 = rm::load_topology("dgx-a100-ib");
  REQUIRE(a100.gpu.attention_kernels.count("triton") == 1);
  CHECK(a100.gpu.attention_kernels.at("triton") == doctest::Approx(0.55));
  CHECK(a100.gpu.attention_kernels.count("flash_attn_3") == 0);  // Hopper only
  CHECK(rm::load_topology("dgx-h100-ib").gpu.attention_kernels.at("flash_attn_3") == doctest::Approx(1.73));
  // cuDNN's attention as torch's SDPA runs it: measured on an H100 and an H200, Hopper only.
  CHECK(a100.gpu.attention_kernels.count("cudnn") == 0);
  for (const char* hopper : {"dgx-h100-ib", "dgx-h200-ib", "h800-nvlink-box"})
    CHECK(rm::load_topology(hopper).gpu.attention_kernels.at("cudnn") == doctest::Approx(1.72));
  // The curve's own implementation: FlashAttention-2 unless the topology names another.
  CHECK(a100.gpu.attention_curve == "flash_attn_2");
  const rm::Topology b200 = rm::load_topology("dgx-b200-ib");
  CHECK(b200.gpu.attention_curve == "cudnn");
  CHECK(b200.gpu.attention_kernels.empty());
  std::string kernel;  // "" names the curve's own, priced as it is
  rm::Topology t = b200;
  rm::apply_attention_kernel(t, kernel, "x", "k");
  CHECK(kernel == "cudnn");
  CHECK(t.gpu.attention.max_efficiency == b200.gpu.attention.max_efficiency);
  kernel = "flash_attn_2";
  CHECK_THROWS_WITH_AS(rm::apply_attention_kernel(t, kernel, "x", "k"),
                       "x: k: topology dgx-b200-ib prices no attention kernel 'flash_attn_2' (expected one of: cudnn)",
                       rm::InputError);
  CHECK(error_of(shipped_topology_with("dgx-b200-ib", "    kernel: cudnn", "    kernel: Cu-DNN"), true)
            .find("gpu.attention.kernel: expected a name of a-z, 0-9 and '_' (got 'Cu-DNN')") != std::string::npos);
  CHECK(error_of(shipped_topology_with("dgx-h100-ib", "    max_efficiency: 0.38", "    kernel: triton\n    max_efficiency: 0.38"),
                 true)
            .find("gpu.attention.kernels.triton: is the curve above itself") != std::string::npos);
  // Bad factors name the field.
  CHECK(error_of(shipped_topology_with("dgx-a100-ib", "      triton: 0.55", "      triton: 9.00"), true)
            .find("gpu.attention.kernels.triton: expected a number in (0, 4]") != std::string::npos);
  CHECK(error_of(shipped_topology_with("dgx-a100-ib", "      triton: 0.55", "      flash_attn_2: 1"), true)
            .find("is the curve above itself") != std::string::npos);
}

TEST_CASE("a GPU's fp8 block and slice merge bytes: optional, read strictly") {
  const rm::Topology a100 = rm::load_topology("dgx-a100-ib");
  CHECK(a100.gpu.fp8_peak_flops == 0);  // Ampere: no fp8 tensor cores
  CHECK(a100.gpu.attention.slice_merge_bytes == doctest::Approx(46));
  const rm::Topology h200 = rm::load_topology("dgx-h200-ib");
  CHECK(h200.gpu.fp8_peak_flops == doctest::Approx(1979e12));
  CHECK(h200.gpu.fp8_gemm_efficiency == doctest::Approx(0.571));  // measured (the topology's note)
  // Not stated: 0, the bf16 GEMMs' fraction (linear_precision.h); stated, read strictly.
  const std::string eff = "    gemm_efficiency: 0.571";
  CHECK(rm::parse_topology(shipped_topology_with("dgx-h200-ib", eff, ""), "x.yaml").gpu.fp8_gemm_efficiency == 0);
  CHECK(error_of(shipped_topology_with("dgx-h200-ib", eff, "    gemm_efficiency: 1.354"), true)
            .find("gpu.fp8.gemm_efficiency: expected a number in (0, 1]") != std::string::npos);
  CHECK(error_of(shipped_topology_with("dgx-h200-ib", eff, "    gemm_efficency: 0.354"), true).find("gpu.fp8.") !=
        std::string::npos);
}

// Each fp8 GEMM limit is its GPU's bf16 limit times the fp8/bf16 ratio of the best matmuls
// mamf-finder.py measured on that GPU (the topologies' notes): refitting one limit moves the other.
TEST_CASE("a GPU's fp8 GEMM limit follows its bf16 limit by the measured matmul ratio") {
  const struct {
    const char* topology;
    double ratio;  // FP8 over BF16 matmul efficiency, each of its peak
  } gpus[] = {{"dgx-h100-ib", 70.9 / 80.3},
              {"dgx-h200-ib", 73.4 / 80.3},
              {"dgx-b200-ib", 76.3 / 77.6},
              {"dgx-gb200-nvl72", 72.3 / 72.9}};
  for (const auto& g : gpus) {
    CAPTURE(g.topology);
    const rm::GpuSpec gpu = rm::load_topology(g.topology).gpu;
    CHECK(gpu.fp8_gemm_efficiency == doctest::Approx(gpu.gemm_efficiency * g.ratio).epsilon(0.002).scale(0));
  }
}

// No GB200 constant is fitted: its GEMM limit and attention top are the B200's fitted ones by
// the ratio of the best bf16 matmul efficiencies measured on the two (the topologies' notes), so
// refitting the B200 moves the GB200 with it.
TEST_CASE("the GB200's efficiencies are the B200's by the measured matmul ratio") {
  const rm::GpuSpec b200 = rm::load_topology("dgx-b200-ib").gpu;
  const rm::GpuSpec gb200 = rm::load_topology("dgx-gb200-nvl72").gpu;
  const double ratio = 72.9 / 77.6;  // GB200 1822.0 of 2500, B200 1745.0 of 2250 TFLOP/s
  CHECK(gb200.gemm_efficiency == doctest::Approx(b200.gemm_efficiency * ratio).epsilon(0.002).scale(0));
  CHECK(gb200.attention.max_efficiency ==
        doctest::Approx(b200.attention.max_efficiency * ratio).epsilon(0.002).scale(0));
  CHECK(gb200.attention_curve == b200.attention_curve);
  CHECK(gb200.attention.backward_factor == b200.attention.backward_factor);
}

TEST_CASE("a GPU's GEMM size curve: optional, read strictly") {
  CHECK(rm::load_topology("dgx-h100-ib").gpu.gemm_half_flops == doctest::Approx(1e12));
  CHECK(rm::load_topology("cpu-local").gpu.gemm_half_flops == 0);  // flat: the executor's measured rate
  const std::string half = "  gemm_half_flops: 1.0e12";
  CHECK(error_of(shipped_topology_with("dgx-a100-ib", half, "  gemm_half_flops: -1"), true)
            .find("gpu.gemm_half_flops: expected a number in [0, 1e+18]") != std::string::npos);
}

TEST_CASE("a GPU's lockstep jitter: optional, read strictly, a constant the corpus's record holds for") {
  const rm::Topology shipped = rm::load_topology("dgx-h100-ib");
  CHECK(shipped.gpu.lockstep_jitter == 0);  // absent on every shipped GPU type
  const std::string half = "  gemm_half_flops: 1.0e12";
  const rm::Topology own =
      rm::parse_topology(shipped_topology_with("dgx-h100-ib", half, half + "\n  lockstep_jitter: 0.02"), "x.yaml");
  CHECK(own.gpu.lockstep_jitter == doctest::Approx(0.02));
  CHECK(rm::CostParams::from_topology(own).lockstep_jitter == doctest::Approx(0.02));
  // Another spread is another GPU type than the corpus priced.
  CHECK_FALSE(rm::same_gpu_spec(own.gpu, shipped.gpu));
  CHECK(error_of(shipped_topology_with("dgx-h100-ib", half, half + "\n  lockstep_jitter: 1"), true)
            .find("gpu.lockstep_jitter: expected a number in [0, 1)") != std::string::npos);
}
