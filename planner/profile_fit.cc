#include "planner/profile_fit.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "planner/calibration_fit.h"
#include "planner/input_error.h"
#include "planner/kernel_efficiency.h"
#include "planner/stats.h"

namespace rm {
namespace {

bool is_kernel(const CalibrationRecord& m) {
  return m.kind == "attention_forward" || m.kind == "attention_backward";
}
bool is_compute(const CalibrationRecord& m) {
  return is_kernel(m) || m.kind == "accumulate" || m.kind == "gemm";
}
bool is_transfer(const CalibrationRecord& m) { return m.kind == "send" || m.kind == "recv"; }
// FSDP's collectives and the TP group's, priced by the same collective model (the TP
// group's all-to-alls are not: the loss's exchange).
bool is_collective(const std::string& kind) {
  return kind == "all_gather" || kind == "reduce_scatter" || kind == "all_reduce" || kind == "tp_all_gather" ||
         kind == "tp_reduce_scatter" || kind == "tp_all_reduce";
}
double end_of(const CalibrationRecord& m) { return m.start + m.seconds; }
// Spans that share more than a sliver of time (clock reads around back-to-back ops
// touch at their ends).
bool overlaps(const CalibrationRecord& a, const CalibrationRecord& b) {
  const double slack = 1e-7;
  return a.start < end_of(b) - slack && b.start < end_of(a) - slack;
}

// The link class a transfer from `src` to `dst` is limited by: the slowest link on its
// route (the route function of topology.h).
LinkClass route_class(const Fabric& fabric, int src, int dst) {
  const auto& route = fabric.route(src, dst);
  if (route.empty())
    throw InputError("measurements: a recv record from rank " + std::to_string(src) +
                     " to itself has no link to calibrate");
  const Link* slowest = &fabric.links()[route.front()];
  for (int id : route)
    if (fabric.links()[id].bytes_per_s < slowest->bytes_per_s) slowest = &fabric.links()[id];
  return slowest->cls;
}

}  // namespace

Profile fit_profile(const std::vector<CalibrationRecord>& records, const Topology& topo,
                    const ProfileHardware& hardware, const std::vector<std::string>& sources,
                    std::vector<std::string>* notes) {
  auto note = [&](const std::string& s) { if (notes) notes->push_back(s); };
  const double peak = topo.gpu.peak_flops;
  Profile p;
  p.hardware = hardware;
  p.date = iso8601_now();
  p.device_kind = topo.gpu.name;
  p.peak_flops = peak;
  p.attention = topo.gpu.attention;
  p.gemm_efficiency = topo.gpu.gemm_efficiency;
  p.sources = sources;

  // Records of one rank and iteration, the unit inside which spans are compared.
  std::map<std::pair<int, int>, std::vector<const CalibrationRecord*>> groups;
  int max_rank = 0;
  for (const CalibrationRecord& m : records) {
    groups[{m.rank, m.iteration}].push_back(&m);
    max_rank = std::max({max_rank, m.rank, m.peer});
  }

  std::vector<KernelSample> alone;
  std::vector<std::pair<KernelSample, double>> overlapped;  // sample, measured seconds
  std::vector<GemmSample> gemms;
  // Memory-bound work: seconds at the topology's HBM rate, and measured.
  std::vector<std::pair<double, double>> elementwise, optimizer;
  // Data-parallel collectives: peers x shard bytes per pass, passes, seconds (blocked).
  struct CollectiveSample { double per_pass_bytes; int passes; double seconds; bool blocking; };
  std::vector<CollectiveSample> collectives;
  std::map<LinkClass, std::vector<TransferSample>> pure;
  struct Busy { LinkClass cls; double bytes, compute, exposed, span; };
  std::vector<Busy> busy;
  std::unique_ptr<Fabric> fabric;
  auto link_class = [&](int src, int dst) {
    if (!fabric) fabric = std::make_unique<Fabric>(topo, max_rank + 1);
    return route_class(*fabric, src, dst);
  };

  // Ring kernels by run and ring: the k-th of each (iteration, layer, step, pass) on every
  // position is one lockstep step (records keep each rank's op order).
  using StepKey = std::tuple<int, int, int, bool, int>;  // iteration, layer, step, bwd, k
  std::map<std::pair<int, int>, std::map<StepKey, std::map<int, double>>> ring_steps;  // -> position -> s/FLOP
  std::map<std::tuple<int, int, int, int, int, bool>, int> seen;  // run, rank, iteration, layer, step, bwd
  for (const CalibrationRecord& m : records) {
    if (!is_kernel(m) || m.ring < 0 || m.flops <= 0 || m.seconds <= 0) continue;
    const bool bwd = m.kind == "attention_backward";
    const int k = seen[{m.run, m.rank, m.iteration, m.layer, m.step, bwd}]++;
    ring_steps[{m.run, m.ring}][{m.iteration, m.layer, m.step, bwd, k}][m.position] = m.seconds / m.flops;
  }

  for (const auto& [key, g] : groups) {
    for (const CalibrationRecord* m : g) {
      if (m->seconds <= 0) continue;
      if (is_kernel(*m)) {
        if (m->flops <= 0 || m->block_q <= 0 || m->block_kv <= 0 || m->head_dim <= 0) continue;
        const bool bwd = m->kind == "attention_backward";
        KernelSample s{m->block_q, m->block_kv, m->head_dim, bwd,
                       m->flops / (bwd ? kBackwardFlopsFactor : 1.0), m->seconds};
        const bool in_flight = std::any_of(g.begin(), g.end(), [&](const CalibrationRecord* x) {
          return is_transfer(*x) && overlaps(*x, *m);
        });
        if (in_flight)
          overlapped.push_back({s, m->seconds});
        else
          alone.push_back(s);
      } else if ((m->kind == "gemm" || m->kind == "linear") && m->flops > 0) {
        gemms.push_back({m->flops, m->seconds});
      } else if ((m->kind == "elementwise" || m->kind == "a2a_pack" || m->kind == "a2a_unpack") && m->bytes > 0) {
        elementwise.push_back({m->bytes / topo.gpu.hbm_bytes_per_s, m->seconds});
      } else if (m->kind == "optimizer" && m->bytes > 0) {
        optimizer.push_back({m->bytes / topo.gpu.hbm_bytes_per_s, m->seconds});
      } else if (is_collective(m->kind) && m->group > 1 && m->bytes > 0) {
        // The executor waits on a prefetched FSDP all-gather; it calls the others (the TP
        // group's all of them) blocking.
        const int passes = m->kind == "all_reduce" || m->kind == "tp_all_reduce" ? 2 : 1;
        collectives.push_back({(m->group - 1) * m->bytes / m->group, passes, m->seconds,
                               m->kind != "all_gather"});
      } else if (m->kind == "recv" && m->bytes > 0 && m->peer >= 0) {
        double compute = 0, last_end = -1;
        double bytes = 0;  // all messages arriving in this span share the link
        for (const CalibrationRecord* x : g) {
          if (is_compute(*x) && overlaps(*x, *m)) {
            compute += x->seconds;
            last_end = std::max(last_end, end_of(*x));
          }
          if (x->kind == "recv" && overlaps(*x, *m)) bytes += x->bytes;
        }
        const LinkClass cls = link_class(m->peer, m->rank);
        if (compute == 0)
          pure[cls].push_back({m->bytes, m->seconds});
        else if (last_end <= end_of(*m))
          busy.push_back({cls, bytes, compute, end_of(*m) - last_end, m->seconds});
      }
    }
  }

  // Kernel curve.
  std::set<double> tile_sizes;
  for (const auto& s : alone)
    if (!s.backward) tile_sizes.insert(KernelCurve::tile_flops(s.block_q, s.block_kv, s.head_dim));
  if (tile_sizes.empty())
    throw InputError("measurements: no attention_forward record without a transfer in flight "
                     "(with tile sizes and head_dim): nothing to fit the kernel curve on");
  const double limit = p.attention.tile_bytes_limit;
  KernelFit k;
  if (tile_sizes.size() < 2) {
    note("one tile size in the records: half_flops kept from the topology (" +
         std::to_string(p.attention.half_flops) + "), only max_efficiency fitted");
    k = fit_kernel_height(alone, peak, p.attention.half_flops);
  } else {
    k = fit_kernel_curve(alone, peak);
  }
  p.attention = k.curve;
  p.attention.tile_bytes_limit = limit;
  p.fits["attention_forward"] = k.forward;

  // Interference: kernels with a transfer in flight against the curve. Forward ones when
  // there are any; backward ones too once the backward factor is known from backward
  // kernels alone. In a ring run every backward step has a transfer in flight (K,V and
  // dK,dV travel until the last step), so there the backward factor comes from the
  // in-flight backward kernels divided by the interference, the one factor both share.
  std::vector<std::pair<KernelSample, double>> in_flight_fwd, in_flight_bwd;
  for (const auto& o : overlapped) (o.first.backward ? in_flight_bwd : in_flight_fwd).push_back(o);
  const bool bwd_alone = k.backward.points > 0;
  if (bwd_alone)
    p.fits["attention_backward"] = k.backward;
  else
    p.attention.backward_factor = topo.gpu.attention.backward_factor;  // until fitted below
  auto predicted = [&](const std::vector<std::pair<KernelSample, double>>& v) {
    std::vector<InterferenceSample> s;
    for (const auto& [ks, sec] : v) s.push_back({predict_kernel_seconds(p.attention, peak, ks), sec});
    return s;
  };
  std::vector<InterferenceSample> with_transfer = predicted(in_flight_fwd);
  if (bwd_alone || in_flight_fwd.empty()) {
    const auto b = predicted(in_flight_bwd);
    with_transfer.insert(with_transfer.end(), b.begin(), b.end());
  }
  if (!with_transfer.empty()) {
    InterferenceFit f = fit_interference(with_transfer);
    p.overlap_interference = f.factor;
    p.fits["interference"] = f.quality;
  } else {
    note("no kernel ran with a transfer in flight: overlap_interference = 1");
  }
  if (!bwd_alone && !in_flight_bwd.empty() && !in_flight_fwd.empty()) {
    // measured = backward_factor * interference * forward curve.
    std::vector<double> fwd_time, meas;
    KernelCurve fwd_only = p.attention;
    fwd_only.backward_factor = p.overlap_interference;
    for (const auto& [ks, sec] : in_flight_bwd) {
      fwd_time.push_back(predict_kernel_seconds(fwd_only, peak, ks));
      meas.push_back(sec);
    }
    const ScaleFit scale = fit_scale(fwd_time, meas);
    p.attention.backward_factor = scale.factor;
    p.fits["attention_backward"] = scale.quality;
  } else if (!bwd_alone) {
    note("no attention_backward records to fit: backward_factor kept at " +
         std::to_string(p.attention.backward_factor));
  }

  // Each ring's steps timed on all of its positions (a causal ring's skipped blocks leave
  // some steps short).
  std::vector<RingTimings> rings;
  for (const auto& [ring, steps] : ring_steps) {
    size_t positions = 0;
    for (const auto& [key, by_position] : steps) positions = std::max(positions, by_position.size());
    RingTimings t;
    for (const auto& [key, by_position] : steps) {
      if (by_position.size() != positions) continue;
      t.emplace_back();
      for (const auto& [position, rate] : by_position) t.back().push_back(rate);
    }
    if (positions > 1 && t.size() > 1) rings.push_back(std::move(t));
  }
  if (!rings.empty() && hardware.backend != "cuda") {
    // The cpu backend's ranks time-share cores: their speeds are the scheduler's shares, not
    // devices' (validation/README.md, "A lockstep ring's straggler term").
    note("cpu backend: its ranks' kernels share cores, so their spread is the scheduler's, no GPU's: lockstep_jitter = 0");
  } else if (!rings.empty()) {
    const JitterFit j = fit_lockstep_jitter(rings);
    p.lockstep_jitter = j.jitter;
    p.fits["lockstep"] = j.quality;
    note("lockstep: the GPUs' speeds spread " + std::to_string(j.jitter) + " (lockstep_jitter), each kernel " +
         std::to_string(j.noise) + " around its GPU's (which a ring's one step of slack absorbs)");
  } else {
    note("no ring was timed on two positions or more over two steps or more: lockstep_jitter = 0");
  }

  if (!gemms.empty()) {
    GemmFit g = fit_gemm(gemms, peak);
    p.gemm_efficiency = g.efficiency;
    p.fits["gemm"] = g.quality;
  } else {
    note("no gemm or linear records: gemm_efficiency kept from the topology (" +
         std::to_string(p.gemm_efficiency) + ")");
  }
  // Elementwise and optimizer rates: measured = factor x (bytes / topology's HBM rate).
  auto rate = [&](const std::vector<std::pair<double, double>>& samples, const char* name,
                  double& out) {
    if (samples.empty()) {
      note(std::string("no ") + name + " records: its rate kept from the topology's hbm_bytes_per_s");
      return;
    }
    std::vector<double> at_hbm, measured;
    for (const auto& [x, sec] : samples) {
      at_hbm.push_back(x);
      measured.push_back(sec);
    }
    const ScaleFit f = fit_scale(at_hbm, measured);
    out = topo.gpu.hbm_bytes_per_s / f.factor;
    p.fits[name] = f.quality;
  };
  rate(elementwise, "elementwise", p.hbm_bytes_per_s);
  rate(optimizer, "optimizer", p.optimizer_bytes_per_s);

  // Collectives: alpha and bus bandwidth from the blocking calls, then how much of every
  // collective the machine hid (a prefetched all-gather's wait is what stayed exposed).
  std::vector<TransferSample> blocking;
  for (const auto& c : collectives)
    if (c.blocking) blocking.push_back({c.per_pass_bytes, c.seconds / c.passes});
  if (!blocking.empty()) {
    try {
      const LinkFit l = fit_link(blocking);
      p.collectives = {l.alpha_s, l.beta_bytes_per_s};
      p.fits["collectives"] = l.quality;
      double blocked = 0, fitted = 0;
      for (const auto& c : collectives) {
        blocked += c.seconds;
        fitted += c.passes * (l.alpha_s + c.per_pass_bytes / l.beta_bytes_per_s);
      }
      p.collective_overlap = std::clamp(1 - blocked / fitted, 0.0, 1.0);
    } catch (const InputError& e) {
      note(std::string("collectives not calibrated (priced as rings over the links): ") + e.what());
    }
  }

  for (const auto& [cls, samples] : pure) {
    std::set<double> sizes;
    for (const auto& s : samples) sizes.insert(s.bytes);
    if (sizes.size() < 2) {
      note(std::string("link class ") + to_string(cls) +
           ": transfers of one size only; alpha and beta need two (not calibrated)");
      continue;
    }
    LinkFit l = fit_link(samples);
    p.links[cls] = {l.alpha_s, l.beta_bytes_per_s};
    p.fits[std::string("link_") + to_string(cls)] = l.quality;
  }
  if (p.links.empty()) note("no link calibrated (needs recv records of two sizes or more with nothing computing)");

  // Transfer overlap, where the link of the busy transfer was calibrated.
  std::vector<double> f;
  std::vector<const Busy*> used;
  for (const Busy& b : busy) {
    auto it = p.links.find(b.cls);
    if (it == p.links.end()) continue;
    const double t = it->second.alpha_s + b.bytes / it->second.beta_bytes_per_s;
    f.push_back(std::clamp((t - b.exposed) / std::min(b.compute, t), 0.0, 1.0));
    used.push_back(&b);
  }
  if (!f.empty()) {
    p.transfer_overlap = median(f);
    std::vector<double> pred, meas;
    for (const Busy* b : used) {
      const LinkParams& l = p.links.at(b->cls);
      const double t = l.alpha_s + b->bytes / l.beta_bytes_per_s;
      pred.push_back(b->compute + std::max(0.0, t - p.transfer_overlap * b->compute));
      meas.push_back(b->span);
    }
    p.fits["transfer_overlap"] = fit_quality(pred, meas);
  } else {
    note("no transfer overlapped a kernel on a calibrated link: transfer_overlap = 1");
  }
  return p;
}

}  // namespace rm
