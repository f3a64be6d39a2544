// `ringmaster list [--format table|json] [--show NAME]`: the shipped topologies and models,
// or one shipped YAML as it is compiled in (to copy and edit into a spec of one's own).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/table.h"
#include "planner/input_error.h"
#include "planner/shipped_specs.h"
#include "planner/spec_library.h"
#include "planner/units.h"

namespace rm::cli {

namespace {

std::string intra_text(const Topology& t) {
  const IntraNode& in = t.intra;
  switch (in.kind) {
    case IntraKind::kNvswitch: return "NVSwitch " + fixed(in.bytes_per_s / kGB, 0) + " GB/s";
    case IntraKind::kPcieTree:
      return "PCIe tree " + fixed(in.bytes_per_s / kGB, 0) + " GB/s, sockets " +
             fixed(in.socket_bytes_per_s / kGB, 0) + " GB/s";
    case IntraKind::kSharedMemory: return "shared memory " + sig(in.bytes_per_s / kGB) + " GB/s";
    case IntraKind::kNone: return "-";
  }
  return "?";
}

std::string inter_text(const Topology& t) {
  const InterNode& ex = t.inter;
  switch (ex.kind) {
    case InterKind::kFatTree:
      return std::string(ex.rail_optimized ? "rail-optimised " : "") + "fat tree " +
             std::to_string(ex.nics_per_node) + "x" + fixed(ex.nic_bytes_per_s / kGB, 0) + " GB/s" +
             (ex.oversubscription > 1 ? ", " + sig(ex.oversubscription) + ":1 oversubscribed" : "");
    case InterKind::kTorus:
      return "3D torus " + std::to_string(ex.torus_dims[0]) + "x" + std::to_string(ex.torus_dims[1]) + "x" +
             std::to_string(ex.torus_dims[2]) + " " + fixed(ex.torus_link_bytes_per_s / kGB, 0) + " GB/s";
    case InterKind::kNone: return "-";
  }
  return "?";
}

nlohmann::json topology_json(const Topology& t) {
  nlohmann::json intra = {{"kind", to_string(t.intra.kind)}, {"gb_per_s", t.intra.bytes_per_s / kGB}};
  nlohmann::json inter = {{"kind", to_string(t.inter.kind)}};
  if (t.inter.kind == InterKind::kFatTree) {
    inter["nics_per_node"] = t.inter.nics_per_node;
    inter["nic_gb_per_s"] = t.inter.nic_bytes_per_s / kGB;
    inter["rail_optimized"] = t.inter.rail_optimized;
    inter["oversubscription"] = t.inter.oversubscription;
  } else if (t.inter.kind == InterKind::kTorus) {
    inter["dims"] = t.inter.torus_dims;
    inter["link_gb_per_s"] = t.inter.torus_link_bytes_per_s / kGB;
  }
  return {{"name", t.name},
          {"gpu", t.gpu.name},
          {"memory_gib", t.gpu.memory_bytes / kGiB},
          {"peak_tflops", t.gpu.peak_flops / kTera},
          {"gpus_per_node", t.gpus_per_node},
          {"max_gpus", t.max_gpus()},
          {"intra", intra},
          {"inter", inter},
          {"note", t.note}};
}

nlohmann::json model_json(const ModelSpec& m) {
  return {{"name", m.name},         {"params", m.params()},     {"layers", m.layers},
          {"hidden", m.hidden},     {"heads", m.heads},         {"kv_heads", m.kv_heads},
          {"head_dim", m.head_dim}, {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab},
          {"sliding_window", m.sliding_window}, {"tied_embeddings", m.tied_embeddings},
          {"note", m.note}};
}

// The shipped YAML named `name`, verbatim.
void show_spec(const std::string& name) {
  std::string names;
  for (const ShippedSpec& s : shipped_specs()) {
    if (name == s.name) {
      std::fputs(s.text, stdout);
      return;
    }
    names += (names.empty() ? "" : ", ") + std::string(s.name);
  }
  fail_input(kCommandLine, "--show", "expected a shipped topology or model: " + names + " (got '" + name + "')");
}

void run_list(const std::string& format) {
  if (format == "json") {
    nlohmann::json out = {{"topologies", nlohmann::json::array()}, {"models", nlohmann::json::array()}};
    for (const auto& name : shipped_topologies()) out["topologies"].push_back(topology_json(load_topology(name)));
    for (const auto& name : shipped_models()) out["models"].push_back(model_json(load_model(name)));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  Table topos({{"topology", "", Align::kLeft},
               {"GPU", "", Align::kLeft},
               {"memory", "GiB", Align::kRight},
               {"peak", "TFLOP/s", Align::kRight},
               {"GPUs/node", "", Align::kRight},
               {"max GPUs", "", Align::kRight},
               {"intra-node", "per direction", Align::kLeft},
               {"inter-node", "per NIC/link, per direction", Align::kLeft}});
  for (const auto& name : shipped_topologies()) {
    const Topology t = load_topology(name);
    topos.add_row({t.name, t.gpu.name, fixed(t.gpu.memory_bytes / kGiB, 1), sig(t.gpu.peak_flops / kTera, 4),
                   std::to_string(t.gpus_per_node), std::to_string(t.max_gpus()), intra_text(t), inter_text(t)});
  }
  Table models({{"model", "", Align::kLeft},
                {"params", "B", Align::kRight},
                {"layers", "", Align::kRight},
                {"hidden", "", Align::kRight},
                {"heads", "", Align::kRight},
                {"kv heads", "", Align::kRight},
                {"head dim", "", Align::kRight},
                {"ffn", "", Align::kRight},
                {"vocab", "", Align::kRight},
                {"window", "tokens", Align::kRight}});
  for (const auto& name : shipped_models()) {
    const ModelSpec m = load_model(name);
    models.add_row({m.name, m.params() >= 1e8 ? fixed(m.params() / 1e9, 2) : sig(m.params() / 1e9),
                    std::to_string(m.layers), std::to_string(m.hidden), std::to_string(m.heads),
                    std::to_string(m.kv_heads), std::to_string(m.head_dim), std::to_string(m.ffn_hidden),
                    std::to_string(m.vocab), m.sliding_window > 0 ? format_size(m.sliding_window) : "-"});
  }
  std::printf("Topologies (use --topology NAME, or a path to your own YAML)\n%s\n", topos.render().c_str());
  std::printf("Models (use --model NAME, a path to your own YAML, or a Hugging Face config.json)\n%s",
              models.render().c_str());
}

}  // namespace

void add_list_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("list", "Shipped topologies and models");
  auto format = std::make_shared<std::string>("table");
  auto show = std::make_shared<std::string>();
  cmd->add_option("--format", *format, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--show", *show, "print one shipped topology or model YAML, to copy and edit");
  cmd->callback([format, show] { show->empty() ? run_list(*format) : show_spec(*show); });
}

}  // namespace rm::cli
