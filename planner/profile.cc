#include "planner/profile.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <set>

#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include "planner/atomic_file.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"
#include "planner/units.h"
#include "planner/yaml_reader.h"

namespace rm {
namespace {

constexpr LinkClass kAllLinkClasses[] = {LinkClass::kNvlink, LinkClass::kPcie,  LinkClass::kSocket,
                                         LinkClass::kNic,    LinkClass::kSpine, LinkClass::kTorus,
                                         LinkClass::kSharedMemory};

FitQuality read_quality(const YamlMap& m) {
  FitQuality q;
  q.points = m.count("points", 1, std::numeric_limits<int>::max());
  // Fit statistics are reported, not used: any finite value is read, bounded so sums stay finite.
  q.r2 = m.number("r2", Range::between(-1e30, 1));
  q.mape = m.number("mape", Range::between(0, 1e30));
  q.mean_residual = m.number("mean_residual", Range::between(-1e30, 1e30));
  q.max_abs_residual = m.number("max_abs_residual", Range::between(0, 1e30));
  q.p90_abs_residual = m.number("p90_abs_residual", Range::between(0, 1e30));
  m.finish();
  return q;
}

void emit_quality(YAML::Emitter& out, const FitQuality& q) {
  out << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "points" << YAML::Value << q.points;
  out << YAML::Key << "r2" << YAML::Value << q.r2;
  out << YAML::Key << "mape" << YAML::Value << q.mape;
  out << YAML::Key << "mean_residual" << YAML::Value << q.mean_residual;
  out << YAML::Key << "max_abs_residual" << YAML::Value << q.max_abs_residual;
  out << YAML::Key << "p90_abs_residual" << YAML::Value << q.p90_abs_residual;
  out << YAML::EndMap;
}

}  // namespace

LinkClass parse_link_class(const std::string& s, const std::string& where, const std::string& field) {
  std::string valid;
  for (LinkClass c : kAllLinkClasses) {
    if (s == to_string(c)) return c;
    valid += std::string(valid.empty() ? "" : ", ") + to_string(c);
  }
  fail_input(where, field, "unknown link class '" + s + "'; expected one of: " + valid);
}

Profile parse_profile(const std::string& yaml_text, const std::string& source) {
  YamlMap top(load_yaml(yaml_text, source), source);
  if (top.integer("format", Range::positive()) != 1) top.fail("format", "expected 1 (this ringmaster reads profile format 1)");
  Profile p;
  {
    YamlMap hw = top.map("hardware");
    p.hardware.hostname = hw.str("hostname");
    p.hardware.device_name = hw.str("device_name");
    p.hardware.device_count = hw.count("device_count", 1, kMaxGpus);
    p.hardware.backend = hw.str("backend");
    if (p.hardware.backend != "cpu" && p.hardware.backend != "cuda")
      hw.fail("backend", "expected cpu or cuda (got '" + p.hardware.backend + "')");
    hw.finish();
  }
  p.date = top.str("date");
  p.device_kind = top.str("device_kind");
  p.peak_flops = top.number("peak_flops", Range::above_up_to(0, kMaxTflops * kTera));
  {
    YamlMap par = top.map("parameters");
    YamlMap att = par.map("attention");
    // Efficiencies are fractions of peak_flops; above 1 means the peak is understated,
    // which the rescaling in apply keeps harmless, so only > 0 is required.
    // Upper bounds: 1e3 x peak or x forward is no measurement, and keeps products finite.
    p.attention.max_efficiency = att.number("max_efficiency", Range::above_up_to(0, 1e3));
    p.attention.half_flops = att.number("half_flops", Range::between(0, kMaxTflops * kTera));
    p.attention.backward_factor = att.number("backward_factor", Range::above_up_to(0, 1e3));
    att.finish();
    p.gemm_efficiency = par.number("gemm_efficiency", Range::above_up_to(0, 1e3));
    YamlMap links = par.map("links");
    for (const auto& kv : par.node("links")) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      LinkClass cls = parse_link_class(name, source + ":" + std::to_string(kv.first.Mark().line + 1),
                                       "parameters.links");
      YamlMap l = links.map(name);
      p.links[cls] = {l.number("alpha_s", Range::between(0, kMaxLatencyUs * kMicro)),
                      l.number("beta_bytes_per_s", Range::above_up_to(0, kMaxGbPerS * kGB))};
      l.finish();
    }
    links.finish();
    p.overlap_interference = par.number("overlap_interference", Range::between(1, 1e3));
    p.transfer_overlap = par.number("transfer_overlap", Range{0, false, 1, false});
    p.lockstep_jitter = par.number_or("lockstep_jitter", 0, Range{0, false, 1, true});  // [0, 1)
    if (par.has("hbm_bytes_per_s"))
      p.hbm_bytes_per_s = par.number("hbm_bytes_per_s", Range::above_up_to(0, kMaxGbPerS * kGB));
    if (par.has("optimizer_bytes_per_s"))
      p.optimizer_bytes_per_s =
          par.number("optimizer_bytes_per_s", Range::above_up_to(0, kMaxGbPerS * kGB));
    if (par.has("collectives")) {
      YamlMap c = par.map("collectives");
      p.collectives = {c.number("alpha_s", Range::between(0, kMaxLatencyUs * kMicro)),
                       c.number("beta_bytes_per_s", Range::above_up_to(0, kMaxGbPerS * kGB))};
      p.collective_overlap = c.number("overlap", Range::between(0, 1));
      c.finish();
    }
    par.finish();
  }
  if (top.has("fits")) {
    YamlMap fits = top.map("fits");
    for (const auto& kv : top.node("fits")) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      p.fits[name] = read_quality(fits.map(name));
    }
    fits.finish();
  }
  if (top.has("sources")) {
    YAML::Node s = top.node("sources");
    if (!s.IsSequence()) top.fail("sources", "expected a list of strings (got " + describe_node(s) + ")");
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].IsScalar()) {
        top.fail("sources", "expected a list of strings (item " + std::to_string(i) + " is " + describe_node(s[i]) + ")");
      }
      p.sources.push_back(s[i].Scalar());
    }
  }
  top.finish();
  return p;
}

Profile read_profile(const std::string& path) {
  return parse_profile(read_input_file(path, InputKind::kProfile), path);
}

std::string profile_to_yaml_string(const Profile& p) {
  YAML::Emitter out;
  out.SetDoublePrecision(8);
  out << YAML::Comment("ringmaster calibration profile (format: planner/profile.h)");
  out << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << 1;
  out << YAML::Key << "hardware" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "hostname" << YAML::Value << p.hardware.hostname;
  out << YAML::Key << "device_name" << YAML::Value << p.hardware.device_name;
  out << YAML::Key << "device_count" << YAML::Value << p.hardware.device_count;
  out << YAML::Key << "backend" << YAML::Value << p.hardware.backend;
  out << YAML::EndMap;
  out << YAML::Key << "date" << YAML::Value << p.date;
  out << YAML::Key << "device_kind" << YAML::Value << p.device_kind;
  out << YAML::Key << "peak_flops" << YAML::Value << p.peak_flops
      << YAML::Comment("FLOP/s the efficiencies are fractions of");
  out << YAML::Key << "parameters" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "attention" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "max_efficiency" << YAML::Value << p.attention.max_efficiency;
  out << YAML::Key << "half_flops" << YAML::Value << p.attention.half_flops
      << YAML::Comment("tile FLOPs (4*bq*bkv*d) at half of max_efficiency");
  out << YAML::Key << "backward_factor" << YAML::Value << p.attention.backward_factor
      << YAML::Comment("backward time over forward time, same tiles");
  out << YAML::EndMap;
  out << YAML::Key << "gemm_efficiency" << YAML::Value << p.gemm_efficiency;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
  for (const auto& [cls, l] : p.links) {
    out << YAML::Key << to_string(cls) << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "alpha_s" << YAML::Value << l.alpha_s;
    out << YAML::Key << "beta_bytes_per_s" << YAML::Value << l.beta_bytes_per_s;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "overlap_interference" << YAML::Value << p.overlap_interference
      << YAML::Comment("compute time while transfers run over compute time alone");
  out << YAML::Key << "transfer_overlap" << YAML::Value << p.transfer_overlap
      << YAML::Comment("share of a transfer that proceeds while computing (0..1)");
  if (p.lockstep_jitter > 0)
    out << YAML::Key << "lockstep_jitter" << YAML::Value << p.lockstep_jitter
        << YAML::Comment("spread of the GPUs' speeds across a ring");
  if (p.hbm_bytes_per_s > 0)
    out << YAML::Key << "hbm_bytes_per_s" << YAML::Value << p.hbm_bytes_per_s
        << YAML::Comment("memory-bound (elementwise) ops");
  if (p.optimizer_bytes_per_s > 0)
    out << YAML::Key << "optimizer_bytes_per_s" << YAML::Value << p.optimizer_bytes_per_s
        << YAML::Comment("optimizer update, over 30 bytes per parameter");
  if (p.collectives.beta_bytes_per_s > 0) {
    out << YAML::Key << "collectives" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "alpha_s" << YAML::Value << p.collectives.alpha_s;
    out << YAML::Key << "beta_bytes_per_s" << YAML::Value << p.collectives.beta_bytes_per_s;
    out << YAML::Key << "overlap" << YAML::Value << p.collective_overlap;
    out << YAML::EndMap
        << YAML::Comment("data-parallel collectives: per pass, bus bandwidth, share hidden");
  }
  out << YAML::EndMap;
  out << YAML::Key << "fits" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, q] : p.fits) {
    out << YAML::Key << name << YAML::Value;
    emit_quality(out, q);
  }
  out << YAML::EndMap;
  out << YAML::Key << "sources" << YAML::Value << YAML::BeginSeq;
  for (const auto& s : p.sources) out << s;
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void write_profile(const Profile& p, const std::string& path) {
  // Read back by the reader `plan --profile` uses before it replaces the old profile, so a
  // fit that went wrong (a NaN r2) never leaves a file that plan then refuses.
  const std::string text = profile_to_yaml_string(p);
  try {
    parse_profile(text, path);
  } catch (const InputError& e) {
    throw InputError(std::string("the fitted profile fails its own reader, so it was not written: ") + e.what());
  }
  write_file_atomically(path, text);
}

ProfileHardware local_cpu_hardware(int device_count) {
  ProfileHardware hw;
  char host[256] = {};
  hw.hostname = ::gethostname(host, sizeof host - 1) == 0 ? host : "unknown";
  hw.device_name = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) hw.device_name = line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  hw.device_count = device_count;
  hw.backend = "cpu";
  return hw;
}

std::string iso8601_now() {
  std::time_t t = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

std::vector<std::string> profile_mismatches(const Profile& p, const Topology& topo,
                                            const std::vector<LinkClass>& fabric_classes) {
  std::vector<std::string> why;
  if (p.device_kind != topo.gpu.name)
    why.push_back("profile was measured on device kind '" + p.device_kind + "' but topology '" +
                  topo.name + "' has '" + topo.gpu.name + "'");
  if (topo.intra.kind == IntraKind::kSharedMemory && p.hardware.backend == "cpu") {
    // cpu-local describes whatever machine runs ringmaster: compare with this CPU.
    ProfileHardware here = local_cpu_hardware(0);
    if (here.device_name != p.hardware.device_name)
      why.push_back("profile was measured on CPU '" + p.hardware.device_name + "' (" +
                    p.hardware.hostname + ") but this machine has '" + here.device_name + "'");
  }
  std::set<LinkClass> seen;
  for (LinkClass c : fabric_classes) {
    if (!seen.insert(c).second || p.links.count(c)) continue;
    why.push_back(std::string("profile has no parameters for link class '") + to_string(c) +
                  "'; the topology's values are used for it");
  }
  return why;
}

void apply_profile(const Profile& p, CostParams& params) {
  const double rescale = p.peak_flops / params.peak_flops;
  const double tile_limit = params.attention.tile_bytes_limit;
  params.attention = p.attention;
  params.attention.tile_bytes_limit = tile_limit;
  params.attention.max_efficiency *= rescale;
  params.gemm_efficiency = p.gemm_efficiency * rescale;
  params.gemm_half_flops = 0;  // the profile's rate was measured on the executor's GEMMs: flat
  params.overlap_interference = p.overlap_interference;
  params.transfer_overlap = p.transfer_overlap;
  params.lockstep_jitter = p.lockstep_jitter;
  if (p.hbm_bytes_per_s > 0) params.hbm_bytes_per_s = p.hbm_bytes_per_s;
  if (p.optimizer_bytes_per_s > 0) params.optimizer_bytes_per_s = p.optimizer_bytes_per_s;
  if (p.collectives.beta_bytes_per_s > 0) {
    params.collectives = {p.collectives.alpha_s, p.collectives.beta_bytes_per_s};
    params.collective_overlap = p.collective_overlap;
  }
  for (const auto& [cls, l] : p.links)
    params.links[static_cast<int>(cls)] = {l.alpha_s, l.beta_bytes_per_s};
}

void load_and_apply_profile(const std::string& path, const Fabric& fabric, CostParams& params) {
  Profile p = read_profile(path);
  std::vector<LinkClass> classes;
  for (const Link& l : fabric.links()) classes.push_back(l.cls);
  for (const auto& why : profile_mismatches(p, fabric.topology(), classes))
    std::fprintf(stderr, "ringmaster: warning: %s: %s\n", path.c_str(), why.c_str());
  apply_profile(p, params);
}

}  // namespace rm
