// Topology and model YAML: parsing, validation, shipped-name lookup.
//
// Units are in the key names: *_gib (GiB = 2^30 bytes), *_kib, *_tflops (1e12 FLOP/s),
// *_gb_per_s (decimal GB/s = 1e9 bytes/s, per direction), *_us (microseconds, per link
// crossed). The shipped files repeat this convention in their header comment.
#include "planner/spec_library.h"

#include <algorithm>
#include <cctype>

#include "planner/hf_config.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"
#include "planner/kernel_efficiency.h"
#include "planner/shipped_specs.h"
#include "planner/units.h"
#include "planner/yaml_reader.h"

namespace rm {

namespace {

bool is_path(const std::string& s) {
  auto ends_with = [&](const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  return s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml") ||
         ends_with(".json");
}

std::vector<std::string> shipped_names(const char* kind) {
  std::vector<std::string> names;
  for (const auto& s : shipped_specs()) {
    if (std::string(s.kind) == kind) names.push_back(s.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Finds a shipped spec or throws an InputError listing the shipped names.
const ShippedSpec& find_shipped(const std::string& name, const char* kind) {
  for (const auto& s : shipped_specs()) {
    if (std::string(s.kind) == kind && name == s.name) return s;
  }
  std::string list;
  for (const auto& n : shipped_names(kind)) list += (list.empty() ? "" : ", ") + n;
  throw InputError(std::string(kind) + " '" + name + "': not a shipped " + kind + " (shipped: " +
                   list + "); a file of your own is taken by path (contains '/' or ends in .yaml or .json)");
}

// The fields every spec file starts with: its name (letters, digits, '-', '_' or '.') and
// an optional note; `source` is where it was read from.
template <class Spec>
void parse_head(const YamlMap& m, const std::string& source, Spec& spec) {
  const std::string name = m.str("name");
  const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!ok) m.fail("name", "expected letters, digits, '-', '_' or '.' (got '" + name + "')");
  spec.source = source;
  spec.name = name;
  spec.note = m.str_or("note", "");
}

IntraKind parse_intra_kind(const YamlMap& m) {
  const std::string k = m.str("kind");
  for (IntraKind v : {IntraKind::kNvswitch, IntraKind::kPcieTree, IntraKind::kSharedMemory, IntraKind::kNone}) {
    if (k == to_string(v)) return v;
  }
  m.fail("kind", "expected nvswitch, pcie-tree, shared-memory or none (got '" + k + "')");
}

InterKind parse_inter_kind(const YamlMap& m) {
  const std::string k = m.str("kind");
  for (InterKind v : {InterKind::kFatTree, InterKind::kTorus, InterKind::kNone}) {
    if (k == to_string(v)) return v;
  }
  m.fail("kind", "expected fat-tree, torus or none (got '" + k + "')");
}

GpuSpec parse_gpu(const YamlMap& m) {
  GpuSpec g;
  g.name = m.str("name");
  g.memory_bytes = m.number("memory_gib", Range::above_up_to(0, kMaxMemoryGib)) * kGiB;
  g.peak_flops = m.number("peak_tflops", Range::above_up_to(0, kMaxTflops)) * kTera;
  g.hbm_bytes_per_s = m.number("hbm_gb_per_s", Range::above_up_to(0, kMaxGbPerS)) * kGB;
  g.runtime_reserve_bytes = m.number("runtime_reserve_gib", Range::between(0, kMaxMemoryGib)) * kGiB;
  if (g.runtime_reserve_bytes >= g.memory_bytes) {
    m.fail("runtime_reserve_gib", "expected less than memory_gib");
  }
  g.gemm_efficiency = m.number("gemm_efficiency", Range::fraction());
  g.gemm_half_flops = m.number_or("gemm_half_flops", 0, Range::between(0, 1e18));
  g.lockstep_jitter = m.number_or("lockstep_jitter", 0, Range{0, false, 1, true});  // [0, 1)
  g.element_bytes = m.count("element_bytes", 2, 4);
  if (g.element_bytes != 2 && g.element_bytes != 4) {
    m.fail("element_bytes", "expected 2 (bf16) or 4 (fp32) (got " + std::to_string(g.element_bytes) + ")");
  }
  const YamlMap a = m.map("attention");
  g.attention_curve = a.str_or("kernel", kDefaultAttentionKernel);
  if (!valid_attention_kernel_name(g.attention_curve))
    a.fail("kernel", "expected a name of a-z, 0-9 and '_' (got '" + g.attention_curve + "')");
  g.attention.max_efficiency = a.number("max_efficiency", Range::fraction());
  g.attention.half_flops = a.number("half_flops", Range::between(0, kMaxTflops * kTera));
  g.attention.tile_bytes_limit = a.number("tile_kib", Range::above_up_to(0, 1 << 20)) * kKiB;
  g.attention.backward_factor = a.number_or("backward_factor", kBackwardFlopsFactor, Range::above_up_to(0, 1e3));
  g.attention.merge_bytes = a.number_or("merge_bytes", 0, Range::between(0, 1e6));
  g.attention.dq_merge_bytes = a.number_or("dq_merge_bytes", 0, Range::between(0, 1e6));
  g.attention.slice_merge_bytes = a.number_or("slice_merge_bytes", 0, Range::between(0, 1e6));
  if (a.has("kernels")) {
    const YamlMap k = a.map("kernels");
    for (const auto& item : a.node("kernels")) {
      const std::string name = item.first.as<std::string>();
      if (name == g.attention_curve)
        k.fail(name, "is the curve above itself (list other implementations only)");
      g.attention_kernels[name] = k.number(name, Range{0, true, 4, false});
    }
    k.finish();
  }
  a.finish();
  if (m.has("fp8")) {
    const YamlMap f = m.map("fp8");
    g.fp8_peak_flops = f.number("peak_tflops", Range::above_up_to(0, kMaxTflops)) * kTera;
    g.fp8_gemm_efficiency = f.number_or("gemm_efficiency", 0, Range::fraction());
    f.finish();
  }
  m.finish();
  return g;
}

// Link bandwidths (GB/s per direction) and latencies (microseconds per link crossed).
const Range kBandwidth = Range::above_up_to(0, kMaxGbPerS);
const Range kLatency = Range::between(0, kMaxLatencyUs);

IntraNode parse_intra(const YamlMap& m, int gpus_per_node) {
  IntraNode in;
  in.kind = parse_intra_kind(m);
  if (in.kind == IntraKind::kNone) {
    if (gpus_per_node != 1) m.fail("kind", "'none' needs gpus_per_node: 1 (got " + std::to_string(gpus_per_node) + ")");
    m.finish();
    return in;
  }
  in.bytes_per_s = m.number("gb_per_s", kBandwidth) * kGB;
  in.latency_s = m.number("latency_us", kLatency) * kMicro;
  if (in.kind == IntraKind::kPcieTree) {
    in.gpus_per_switch = m.count("gpus_per_switch", 1, gpus_per_node);
    if (gpus_per_node % in.gpus_per_switch != 0) {
      m.fail("gpus_per_switch", "expected a divisor of gpus_per_node " + std::to_string(gpus_per_node) +
                                    " (got " + std::to_string(in.gpus_per_switch) + ")");
    }
    const int switches = gpus_per_node / in.gpus_per_switch;
    in.switches_per_socket = m.count_or("switches_per_socket", 1, 1, kMaxGpusPerNode);
    if (switches % in.switches_per_socket != 0) {
      m.fail("switches_per_socket", "expected a divisor of the " + std::to_string(switches) +
                                        " PCIe switches (got " + std::to_string(in.switches_per_socket) + ")");
    }
    in.switch_uplink_bytes_per_s = m.number("switch_uplink_gb_per_s", kBandwidth) * kGB;
    const bool two_sockets = switches / in.switches_per_socket > 1;
    if (two_sockets || m.has("socket_gb_per_s")) {
      in.socket_bytes_per_s = m.number("socket_gb_per_s", kBandwidth) * kGB;
      in.socket_latency_s = m.number("socket_latency_us", kLatency) * kMicro;
    }
  }
  m.finish();
  return in;
}

InterNode parse_inter(const YamlMap& m, int gpus_per_node, int max_nodes) {
  InterNode ex;
  ex.kind = parse_inter_kind(m);
  if (ex.kind == InterKind::kNone) {
    if (max_nodes > 1) m.fail("kind", "'none' needs max_nodes: 1 (got " + std::to_string(max_nodes) + ")");
    m.finish();
    return ex;
  }
  ex.latency_s = m.number("latency_us", kLatency) * kMicro;
  if (ex.kind == InterKind::kFatTree) {
    ex.nics_per_node = m.count("nics_per_node", 1, kMaxNicsPerNode);
    ex.nic_bytes_per_s = m.number("nic_gb_per_s", kBandwidth) * kGB;
    ex.rail_optimized = m.boolean_or("rail_optimized", true);
    ex.nodes_per_leaf = m.count_or("nodes_per_leaf", max_nodes, 1, kMaxNodes);
    ex.oversubscription = m.number_or("oversubscription", 1.0, Range::between(1, 1e3));
  } else {
    const auto dims = m.int_list("dims", Range::between(1, kMaxNodes));
    if (dims.size() != 3) m.fail("dims", "expected three sizes [x, y, z] (got " + std::to_string(dims.size()) + ")");
    ex.torus_dims = {static_cast<int>(dims[0]), static_cast<int>(dims[1]), static_cast<int>(dims[2])};
    const int64_t product = dims[0] * dims[1] * dims[2];
    if (product != max_nodes) {
      m.fail("dims", "expected x*y*z == max_nodes " + std::to_string(max_nodes) + " (got " +
                         std::to_string(product) + ")");
    }
    if (gpus_per_node != 1) m.fail("kind", "a torus has one device per node: expected gpus_per_node: 1");
    ex.torus_link_bytes_per_s = m.number("link_gb_per_s", kBandwidth) * kGB;
  }
  m.finish();
  return ex;
}

}  // namespace

Topology parse_topology(const std::string& yaml_text, const std::string& source) {
  const YamlMap root(load_yaml(yaml_text, source), source);
  Topology t;
  parse_head(root, source, t);
  t.gpus_per_node = root.count("gpus_per_node", 1, kMaxGpusPerNode);
  t.max_nodes = root.count("max_nodes", 1, kMaxNodes);
  if (static_cast<int64_t>(t.gpus_per_node) * t.max_nodes > kMaxGpus) {
    root.fail("max_nodes", "expected gpus_per_node * max_nodes <= " + std::to_string(kMaxGpus) + " (got " +
                               std::to_string(t.gpus_per_node) + " * " + std::to_string(t.max_nodes) + ")");
  }
  t.gpu = parse_gpu(root.map("gpu"));
  t.intra = parse_intra(root.map("intra"), t.gpus_per_node);
  if (root.has("inter")) {
    t.inter = parse_inter(root.map("inter"), t.gpus_per_node, t.max_nodes);
  } else if (t.max_nodes > 1) {
    root.fail("inter", "missing: needed when max_nodes > 1 (kind: fat-tree or torus)");
  }
  root.finish();
  return t;
}

ModelSpec parse_model(const std::string& yaml_text, const std::string& source) {
  const YamlMap root(load_yaml(yaml_text, source), source);
  ModelSpec m;
  parse_head(root, source, m);
  m.layers = root.count("layers", 1, kMaxLayers);
  m.hidden = root.count("hidden", 1, kMaxHidden);
  m.heads = root.count("heads", 1, kMaxHeads);
  m.kv_heads = root.count("kv_heads", 1, kMaxHeads);
  m.head_dim = root.count("head_dim", 1, kMaxHeadDim);
  m.ffn_hidden = root.count("ffn_hidden", 1, kMaxFfnHidden);
  m.vocab = root.count("vocab", 1, kMaxVocab);
  m.gated_ffn = root.boolean_or("gated_ffn", true);
  m.sliding_window = root.integer_or("sliding_window", 0, Range{1, false, static_cast<double>(kMaxSeqTokens), false});
  m.tied_embeddings = root.boolean_or("tied_embeddings", false);
  if (root.has("norm")) m.norm = parse_norm(root.str("norm"), root.location("norm"), root.field("norm"));
  if (root.has("position_embedding"))
    m.position_embedding = parse_position_embedding(root.str("position_embedding"), root.location("position_embedding"),
                                                    root.field("position_embedding"));
  if (root.has("bias")) m.bias = parse_linear_bias(root.str("bias"), root.location("bias"), root.field("bias"));
  const Range probability{0, false, 1, true};  // [0, 1)
  m.hidden_dropout = root.number_or("hidden_dropout", 0, probability);
  m.attention_dropout = root.number_or("attention_dropout", 0, probability);
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    root.fail("kv_heads", "expected a divisor of heads " + std::to_string(m.heads) + " (got " +
                              std::to_string(m.kv_heads) + ")");
  }
  if (static_cast<int64_t>(m.heads) * m.head_dim != m.hidden) {
    root.fail("head_dim", "expected heads * head_dim == hidden (" + std::to_string(m.heads) + " * " +
                              std::to_string(m.head_dim) + " != " + std::to_string(m.hidden) + ")");
  }
  root.finish();
  return m;
}

namespace {

// A user's file by path, else a shipped spec by name (its source becomes "builtin:<name>").
template <typename Spec>
Spec load_spec(const std::string& name_or_path, const char* kind, InputKind input_kind,
               Spec (*parse)(const std::string&, const std::string&)) {
  if (name_or_path.empty()) throw InputError(std::string(kind) + ": empty name; expected a shipped name or a YAML path");
  if (is_path(name_or_path)) return parse(read_input_file(name_or_path, input_kind), name_or_path);
  const ShippedSpec& s = find_shipped(name_or_path, kind);
  Spec spec = parse(s.text, s.path);
  spec.source = std::string("builtin:") + s.name;
  return spec;
}

}  // namespace

Topology load_topology(const std::string& name_or_path) {
  return load_spec(name_or_path, "topology", InputKind::kTopology, &parse_topology);
}

ModelSpec load_model(const std::string& name_or_path) {
  if (is_hf_config_path(name_or_path))
    return parse_hf_config(read_input_file(name_or_path, InputKind::kModel), name_or_path);
  return load_spec(name_or_path, "model", InputKind::kModel, &parse_model);
}

std::vector<std::string> shipped_topologies() { return shipped_names("topology"); }
std::vector<std::string> shipped_models() { return shipped_names("model"); }

}  // namespace rm
