#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "planner/collective_pattern.h"
#include "planner/data_parallel.h"
#include "planner/linear_precision.h"
#include "planner/pipeline_parallel.h"
#include "planner/schedule.h"
#include "planner/tensor_parallel.h"
#include "planner/usp_plan.h"

namespace rm {

namespace {

// A flow of a pattern: GPUs and bytes per unit; `group` says which PatternCost it feeds.
struct UnitFlow {
  int src, dst;
  double bytes_per_unit;
  int group;
};

// Solve the flows together (they share links) and summarise each group's slowest flow
// as latency + units x seconds-per-unit.
// `link_flows`: where given, each group's flows per link crossed, by link.
std::vector<PatternCost> solve(const Fabric& fabric, const CostParams& cost, const std::vector<UnitFlow>& uf,
                               int groups, std::vector<LinkFlows>* link_flows = nullptr) {
  std::vector<Flow> flows;
  flows.reserve(uf.size());
  for (const UnitFlow& f : uf) flows.push_back({f.src, f.dst, f.bytes_per_unit});
  const SharingResult r = share_links(fabric, cost, flows);
  std::vector<PatternCost> out(groups);
  // Each group's flows per link, and per GPU's first link, in scratch arrays reset where
  // touched (a solve over thousands of GPUs has a million flows).
  static thread_local std::vector<int> on_link, leaving;
  const size_t L = fabric.links().size(), cells = L * static_cast<size_t>(groups);
  if (on_link.size() < cells) {
    on_link.resize(cells);
    leaving.resize(cells);
  }
  std::vector<size_t> touched;
  for (size_t i = 0; i < uf.size(); ++i) {
    if (uf[i].src == uf[i].dst) continue;
    PatternCost& p = out[uf[i].group];
    const size_t base = L * uf[i].group;
    const Route route = fabric.route(uf[i].src, uf[i].dst);
    for (int l : route) {
      p.link_classes |= 1u << static_cast<int>(fabric.links()[l].cls);
      if (on_link[base + l]++ == 0) touched.push_back(base + l);
    }
    if (!route.empty()) p.egress_flows = std::max(p.egress_flows, ++leaving[base + route.front()]);
    const double lat = cost.route_latency_s(fabric, uf[i].src, uf[i].dst);
    const double stream = r.finish_s[i] - lat;
    p.latency_s = std::max(p.latency_s, lat);
    if (stream >= p.s_per_unit) {
      p.s_per_unit = stream;
      p.bottleneck_link = r.flow_bottleneck[i];
    }
  }
  for (int g = 0; g < groups; ++g) {
    if (out[g].bottleneck_link >= 0) out[g].bottleneck_flows = on_link[L * g + out[g].bottleneck_link];
  }
  if (link_flows) {
    link_flows->assign(groups, {});
    for (size_t k : touched) (*link_flows)[k / L].push_back({static_cast<int>(k % L), on_link[k]});
    for (LinkFlows& f : *link_flows) std::sort(f.begin(), f.end());
  }
  for (size_t k : touched) {
    on_link[k] = 0;
    leaving[k] = 0;  // a first link is on its route: touched
  }
  return out;
}

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// The times of `n` sequences through a layer, one after another.
LayerTimes scaled(LayerTimes t, int n) {
  for (double* x : {&t.attention_fwd, &t.attention_bwd, &t.attention_compute_fwd, &t.attention_compute,
                    &t.linear_fwd, &t.linear_bwd, &t.tp_fwd, &t.tp_bwd}) {
    *x *= n;
  }
  return t;
}

// A plan's data-parallel collectives (seconds) and the compute windows that hide them.
struct DpExposed {
  double per_layer = 0, ends = 0;
};

// A pass of one micro-step as a collective posted at its start sees it, per sequence of the
// micro-step: compute before attention, attention's phases (AttentionPhases), compute after.
// A phase whose transfers cross the collective's bottleneck class shares links with it
// max-min fair by flows: where the collective's bottleneck ring crosses the transfers'
// bottleneck link, the transfers' k flows on it against the ring's k_c there; else where
// they meet, at a GPU's port (the most flows leaving one GPU of each). The transfers get
// f = k / (k + k_c) of that link, or more where the collective, held to its own bottleneck
// link's share, takes less than the rest: alone its flows take u of the link (1 on its
// bottleneck link), so the transfers get f = max(k / (k + k_c), 1 - u), and the collective
// runs at min(1, (1 - f) / u) of its rate alone beside them (a TP chunk on a GPU's PCIe link
// beside an FSDP flow that the switch's uplink holds to half of it: f = 1/2 and the
// collective at full rate; priced at half, it lasted into sequences the replay runs
// unshared, 3.2-4.3 % slow). A phase lasting s alone, its transfers keeping the link busy x,
// lasts max(s, x / f) while the collective runs (its steps' compute, latencies and syncs,
// the s - x beside the transfers alone, overlap the stretched transfers: pricing them after,
// s + x / f - x, put a bidirectional ring of 16 TPU chips beside FSDP 7 % over its replay),
// and the collective advances at that rate for the x / f the transfers run, then at full
// rate for the max(s, x / f) - x / f they leave the link to it (a p2p ring's step on the
// collective's bottleneck link, f = 1/2: x + max(0, s - 2x)).
// Where the bottleneck ring misses that link and the collective's other ring crosses it
// (GroupCollective::slack, the one with time to spare: an FSDP all-gather's rail flows, 1
// shard each, beside a context ring's step across nodes, while its NVLink flows carry 14),
// whatever classes the transfers cross, that ring shares it the same way instead, and the
// bottleneck ring advances the whole phase: the transfers wait only while the slack ring
// runs, and the collective ends when both rings have. `with(x)` walks the phases while a
// collective of x has work left on the ring that shares each: `slowed`, what the sharing
// adds to the pass, and `gained`, what the collective advances beyond the link time a
// window (DpCosts) counts idle (seconds - x in a phase crossing the bottleneck class, else
// seconds). A phase's gain counts only while its sharing ring runs, as its delay does: a
// slack ring on NVLink that ends early delays the TP collectives after it no more, and
// the bottleneck ring gains nothing from delays that did not happen (counting them put a
// zero1 layer beside a ring across RoCE nodes 0.07 ms faster than replayed).
struct PassShare {
  struct Phase {
    double delay = 0, advance = 0;  // while the sharing ring runs: the pass's delay, that ring's advance
    double seconds = 0;             // the phase beside the collective: the other ring's advance
    bool slack = false;             // the slack ring shares it (else the bottleneck ring, or none)
    double gain = 0;                // while the sharing ring runs: the collective's advance beyond idle
  };
  struct Sharing {
    double slowed = 0, gained = 0;  // all sequences'
  };
  std::vector<Phase> phases;  // one sequence's
  int sequences = 1;
  const Fabric* fabric = nullptr;  // the links' bandwidths, as `cost` prices them
  const CostParams* cost = nullptr;
  double slack_ratio = 0;  // the slack ring's bandwidth term over the bottleneck ring's; 0: no slack phase
  double idle = 0;         // one sequence's time the collective's links are not busy with the pass's transfers
  double alone = 0;        // one sequence's time, unshared
  void compute(double s) {
    if (s <= 0) return;
    phases.push_back({0, s, s, false, 0});
    idle += s;
    alone += s;
  }
  void attention(const AttentionPhases& a, unsigned collective_class, const GroupCollective& collective) {
    for (int i = 0; i < a.n; ++i) add(a.at[i], collective_class, collective);
  }
  // A TP all-gather or reduce-scatter waited for at once (no TP comm overlap): a transfer
  // with nothing computing beside it.
  void tp(double x, const GroupCollective& tp_group, unsigned collective_class, const GroupCollective& collective) {
    add({x, 0, x, tp_group.bottleneck()}, collective_class, collective);
  }
  void add(const AttentionPhase& p, unsigned collective_class, const GroupCollective& collective) {
    const int link = p.transfer.bottleneck_link;
    const bool crosses = (p.transfer.link_classes & collective_class) != 0;
    const int on = crosses ? collective.flows_on(link) : 0;
    const int on_slack = on > 0 || p.busy <= 0 ? 0 : collective.flows_on(collective.slack(), link);
    if (p.busy <= 0 || (!crosses && on_slack == 0)) {
      compute(p.seconds);
      return;
    }
    const bool slack = on_slack > 0;
    const double k = std::max(1, on > 0 || slack ? p.transfer.bottleneck_flows : p.transfer.egress_flows);
    double f = k / (k + (on > 0 ? on : slack ? on_slack : std::max(1, collective.bottleneck().egress_flows)));
    double progress = 1 - f;  // the collective's rate beside the transfers over its rate alone
    if (on > 0) {
      // u: what of the link the collective's flows take alone, at its bottleneck link's
      // share; the transfers get what it leaves if that is more than their fair share.
      const PatternCost& b = collective.bottleneck();
      const double u = std::min(1.0, on * link_bytes_per_s(b.bottleneck_link) / std::max(1, b.bottleneck_flows) /
                                         link_bytes_per_s(link));
      f = std::max(f, 1 - u);
      progress = std::min(1.0, (1 - f) / u);
    }
    alone += p.seconds;
    const double x = p.busy, shared = x / f, lasts = std::max(p.seconds, shared);
    const double advance = progress * shared + (lasts - shared);
    const double left_idle = p.seconds - (crosses ? x : 0);  // of the phase alone, to the collective
    phases.push_back({lasts - p.seconds, advance, lasts, slack, std::max(0.0, (slack ? lasts : advance) - left_idle)});
    idle += left_idle;
    if (slack) slack_ratio = collective.slack().s_per_unit / collective.bottleneck().s_per_unit;
  }
  double link_bytes_per_s(int link) const { return cost->link_bytes_per_s(fabric->links()[static_cast<size_t>(link)]); }
  Sharing with(double x) const {
    double left = x, left_slack = slack_ratio * x;  // each ring's work left
    Sharing out;
    for (int i = 0; i < sequences; ++i)
      for (const Phase& p : phases) {
        if (left <= 0 && left_slack <= 0) return out;
        double& sharing = p.slack ? left_slack : left;
        if (sharing > 0) {
          const double part = std::min(1.0, sharing / p.advance);
          out.slowed += p.delay * part;
          out.gained += p.gain * part;
        }
        sharing -= p.advance;
        (p.slack ? left : left_slack) -= p.seconds;
      }
    return out;
  }
};

struct DpCosts {
  double ag = 0, ag_vocab = 0, rs = 0, rs_vocab = 0, ar = 0, ar_vocab = 0;
  double window_f = 0, window_b = 0, window_ar = 0;
  PassShare share_f, share_b;  // each pass as the shard group's collectives share its links
  bool ar_apart = false;  // hsdp: the all-reduce and the shard group bottleneck on links of different classes
  bool backward = false, ends = false;
  const CostParams* cost = nullptr;  // collective_exposed_s: how much of a window hides them
  // What of `x` a pass's `window`, and what sharing the pass's links gains it, leave
  // exposed, plus what that sharing adds to the pass (PassShare).
  // No less than what of `x` outlasts the pass: a layer's collective runs from the pass's
  // start (its prefetch, or the previous layer's in flight) on one communicator, and the
  // windows and the sharing's gain can count more than the pass lasts (a zero1 gather
  // beside a comm-bound ring across RoCE nodes: a layer's forward priced 0.85 ms, its
  // gather alone 0.88, replayed 0.91).
  double beside(double x, double window, const PassShare& share) const {
    const PassShare::Sharing s = share.with(x);
    return std::max(cost->collective_exposed_s(x, window + s.gained) + cost->collective_overlap * s.slowed,
                    cost->collective_exposed_s(x, share.sequences * share.alone));
  }
  DpExposed exposed(const MicroStepCollectives& c) const {
    return {slot(c, false), stage_ends(c, true, true)};
  }
  // One layer's share of the per-layer charge: its forward gather behind the forward of
  // the layer before, and the backward window's prefetch of the layer below with the
  // gradients' collectives of the layer above. The head takes a layer's slot (the last
  // layer's forward prefetches its weights, its gradients go out in that layer's backward,
  // schedule.cc step_workload) but moves the vocabulary's bytes: `head` prices it so.
  double slot(const MicroStepCollectives& c, bool head) const {
    return forward_gather(c, head ? ag_vocab : ag) + backward_slot(c, head);
  }
  // A backward's collectives: on the shard group's links (the gather prefetched, the
  // gradients' reduce-scatter) and on the replicas' (their all-reduce).
  struct BackwardLoad {
    double shard = 0, repl = 0;
  };
  BackwardLoad backward_load(const MicroStepCollectives& c, bool head) const {
    return {(c.backward_gather ? ag : 0) + (c.reduce_scatter ? (head ? rs_vocab : rs) : 0),
            c.all_reduce ? (head ? ar_vocab : ar) : 0};
  }
  // The slot's backward part (a pipeline's last micro-step differs from the others in it).
  double backward_slot(const MicroStepCollectives& c, bool head) const {
    if (!backward) return 0;
    const BackwardLoad b = backward_load(c, head);
    return ar_apart ? std::max(beside(b.shard, window_b, share_b), cost->collective_exposed_s(b.repl, window_ar))
                    : beside(b.shard + b.repl, window_b, share_b);
  }
  // What of a layer's backward slot (`slot`, backward_slot's) its collectives' sharing of
  // the pass's links adds to the passes they run beside (PassShare::Sharing::slowed), where
  // the slot does not count them waited for.
  double backward_slowed(const MicroStepCollectives& c, double slot) const {
    if (!backward) return 0;
    const BackwardLoad b = backward_load(c, false);
    return std::min(slot, cost->collective_overlap * share_b.with(b.shard + (ar_apart ? 0 : b.repl)).slowed);
  }
  // What a layer's backward slot (`slot`) counts for prefetching the next layer's gather,
  // which a pipeline chunk's lowest layer has none to do (schedule.cc pipeline_workload).
  double unprefetched(const MicroStepCollectives& c, double slot) const {
    if (!c.backward_gather) return 0;
    MicroStepCollectives none = c;
    none.backward_gather = false;
    return slot - backward_slot(none, false);
  }
  // What the head's slot adds over a layer's at the step's end (a 128K vocabulary's
  // all-gather outlasting the last layer's forward: +18.8 ms of a Llama 3 8B zero2 step on
  // the PCIe box, +43 ms where its ring of 4 leaves the collectives exposed); a pipeline's
  // last stage pays it too (chunk_ends), its backward part in the micro-batches whose
  // gradients go out then (LastBackward::head).
  double head_slot(const MicroStepCollectives& c) const { return slot(c, true) - slot(c, false); }
  double forward_gather(const MicroStepCollectives& c, double x) const {
    return c.forward_gather ? beside(x, window_f, share_f) : 0;
  }
  // One layer alone (Workload::kLayer; schedule.cc layer_workload): its forward waits for
  // its own all-gather, with no layer before it to hide behind; the backward's re-gather
  // hides behind the forward; the gradients' reduce-scatter, then their all-reduce, are
  // waited for at the end.
  double alone(const MicroStepCollectives& c) const {
    double e = c.forward_gather ? ag : 0;
    if (backward) {
      if (c.backward_gather) e += beside(ag, window_f, share_f);
      e += (c.reduce_scatter ? rs : 0) + (c.all_reduce ? ar : 0);
    }
    return e;
  }
  // The ends (schedule.cc step_workload): a micro-step starts on the embedding's and
  // layer 0's all-gathers, one after the other (NCCL runs a communicator's collectives in
  // order; layer 1's prefetch waits behind them), and ends on layer 0's and the
  // embedding's reduce-scatters (their sum), then their all-reduces.
  // 3-3.5 % of an 8K fsdp step with pure data parallelism on dgx-a100-ib (short layers,
  // many micro-steps). A pipeline stage (schedule.cc pipeline_workload) has the embedding's
  // only when it is the first, and each chunk backward of a stage but the last starts on
  // its last layer's all-gather, which no head hides (the last stage's head does).
  double stage_ends(const MicroStepCollectives& c, bool first, bool last) const {
    double e = 0;
    if (!ends) return e;
    e += forward_gathers(c).end(first);
    if (backward && c.backward_gather && !last) e += ag;
    if (backward && c.reduce_scatter) e += first ? rs + rs_vocab : rs;
    if (backward && c.all_reduce) e += first ? ar + ar_vocab : ar;
    if (last) e += head_slot(c);
    return e;
  }
  // A pipeline chunk's (schedule.cc pipeline_workload): the gathers as above, but its last
  // reduce-scatter (and all-reduce) stays in flight behind the stage's next actions, hidden
  // as a layer's (per_layer charges it) with the next forward (a layer's at least, in the
  // steady state) widening that window; except on the model's first chunk, where posting
  // the embedding's waits for layer 0's, and where every action starts on a gather (fsdp,
  // hsdp), which queues behind it on the communicator: exposed beyond a layer's slot in the
  // share `handoff` of a stage's backwards that another action follows (a Llama 3 8B fsdp
  // step of pp 4 x 2 chunks on the TPU torus replayed 5.4 % slower than priced with the
  // forward's window credited). The stage's last one is waited for once per step
  // (pipeline_tail). `gathered_ahead`: the chunk's first gather was dispatched before it
  // was needed (pp_gathers_chunks_ahead), so only the model's first chunk waits for its own.
  double chunk_ends(const MicroStepCollectives& c, bool first, bool last, bool gathered_ahead, double handoff,
                    bool head_alone) const {
    double e = 0;
    if (!ends) return e;
    if (first || !gathered_ahead) e += forward_gathers(c).end(first);
    if (backward && c.backward_gather && !last) e += ag;
    if (backward && c.reduce_scatter && first) e += rs;
    if (backward && c.all_reduce && first) e += ar;
    if (backward && !first && (c.reduce_scatter || c.all_reduce)) {
      const double out = (c.reduce_scatter ? rs : 0) + (c.all_reduce ? ar : 0);
      if (c.backward_gather)
        e += handoff * std::max(0.0, out - backward_slot(c, false));
      else
        e -= cost->collective_exposed_s(out, window_b) - cost->collective_exposed_s(out, window_b + window_f);
    }
    // The last stage's head: its slot as in a step's (head_slot): the layer below's
    // gradients wait to be posted behind the head's. A chunk of the head alone (a split
    // that counts the loss as a layer) leaves them in flight, as a chunk's last layer does.
    if (last) e += head_alone ? forward_gather(c, ag_vocab) - forward_gather(c, ag) : head_slot(c);
    return e;
  }
  // The forward's all-gathers (cost_model.h); at the model's start the embedding's, then
  // layer 0's (see stage_ends).
  ForwardGathers forward_gathers(const MicroStepCollectives& c) const {
    if (!c.forward_gather) return {};
    return {forward_gather(c, ag), ends ? ag + ag_vocab : 0, ends ? ag : 0};
  }
  // The first stage ends the step (1F1B) on the embedding's gradients, `c` the last micro-step's.
  double pipeline_tail(const MicroStepCollectives& c) const {
    if (!ends || !backward) return 0;
    return (c.reduce_scatter ? rs_vocab : 0) + (c.all_reduce ? ar_vocab : 0);
  }
};

}  // namespace

std::string micro_batch_why_invalid(const Job& job, int micro_batch, int dp) {
  if (micro_batch <= 1 || dp < 1) return "";
  if (job.workload != Workload::kStep)
    return "micro_batch > 1 applies to step workloads (sequences per micro-step; got " + std::to_string(micro_batch) +
           ")";
  // A replica's share rounds up: its last micro-step may be short.
  const int64_t seqs = sequences_per_step(job), per_replica = (seqs + dp - 1) / dp;
  if (micro_batch <= per_replica) return "";
  const std::string head = "micro_batch " + std::to_string(micro_batch) + " is more than the ";
  if (micro_batch > seqs) return head + std::to_string(seqs) + " sequences of a step's batch";
  return head + std::to_string(per_replica) + " sequences a data-parallel replica has in a step (" +
         std::to_string(seqs) + " over dp " + std::to_string(dp) + ")";
}

int64_t sequences_per_step(const Job& job) {
  if (job.batch_sequences > 0) return job.batch_sequences;
  const int64_t batch = job.batch_tokens > 0 ? job.batch_tokens : kDefaultBatchTokens;
  return std::max<int64_t>(1, batch / std::max<int64_t>(1, job.seq_len));
}

int64_t busy_replicas(const Job& job, int dp) { return std::min<int64_t>(sequences_per_step(job), dp); }

double model_flops_per_step(const ModelSpec& m, const Job& job) {
  const double n = static_cast<double>(job.seq_len);
  const double matmul = 6.0 * (m.layers * m.layer_params() + static_cast<double>(m.vocab) * m.hidden) * n;
  const double attention = 3.0 * m.layers * 4.0 * m.head_dim * m.heads *
                           attention_pairs(job.seq_len, job.causal, effective_window(m, job));
  return static_cast<double>(sequences_per_step(job)) * (matmul + attention);
}

double overlap_threshold_tokens(double flops_per_s, double bytes_per_s, int element_bytes,
                                int heads, int kv_heads) {
  return flops_per_s * element_bytes * kv_heads / (2.0 * heads * bytes_per_s);
}

std::vector<LinkThreshold> overlap_thresholds(const Topology& topo, const CostParams& cost,
                                              const ModelSpec& model) {
  // Two nodes hold one link of every class but the spine (left out below), whatever the
  // topology's size: a fabric of all its GPUs could be millions of links.
  const Fabric fabric(topo, std::min(topo.max_gpus(), 2 * topo.gpus_per_node));
  std::vector<LinkThreshold> out;
  for (const Link& l : fabric.links()) {
    if (l.cls == LinkClass::kSpine) continue;
    const double bw = cost.link_bytes_per_s(l);
    auto it = std::find_if(out.begin(), out.end(), [&](const LinkThreshold& t) { return t.cls == l.cls; });
    if (it == out.end()) out.push_back({l.cls, bw, 0});
    else it->bytes_per_s = std::min(it->bytes_per_s, bw);
  }
  for (LinkThreshold& t : out) {
    t.tokens = overlap_threshold_tokens(cost.peak_flops, t.bytes_per_s, topo.gpu.element_bytes,
                                        model.heads, model.kv_heads);
  }
  return out;
}

CostModel::CostModel(const ModelSpec& model, const Fabric& fabric, const CostParams& cost)
    : model_(model), fabric_(fabric), cost_(cost) {}

const RingPatterns& CostModel::ring_patterns(int cp, int dp, Schedule schedule,
                                             const std::vector<int>& order) {
  auto key = std::make_tuple(cp, dp, static_cast<int>(schedule), order);
  auto it = patterns_.find(key);
  if (it != patterns_.end()) return *it->second;
  auto pat = std::make_unique<RingPatterns>();
  const double e = fabric_.topology().gpu.element_bytes;
  const double acc = 4;  // fp32 accumulator bytes per element
  const int rings = cp > 0 ? static_cast<int>(order.size()) / cp : 0;
  auto gpu = [&](int ring, int pos) { return order[ring * cp + ((pos % cp) + cp) % cp]; };
  if (cp >= 2) {
    if (schedule == Schedule::kTwoLevel) {
      const int g = fabric_.topology().gpus_per_node;
      const int n = cp / g;
      auto inner = [&](int r, int k, int l, int dl) { return gpu(r, k * g + ((l + dl) % g + g) % g); };
      auto flows = [&](double in_bytes, double in_acc, double out_bytes, double out_acc) {
        std::vector<UnitFlow> f;
        for (int r = 0; r < rings; ++r) {
          for (int k = 0; k < n; ++k) {
            for (int l = 0; l < g; ++l) {
              const int me = inner(r, k, l, 0), next = inner(r, k, l, 1);
              const int outer = gpu(r, ((k + 1) % n) * g + l);
              if (in_bytes > 0) f.push_back({me, next, in_bytes, 0});
              if (in_acc > 0) f.push_back({me, next, in_acc, 0});
              if (out_bytes > 0) f.push_back({me, outer, out_bytes, 1});
              if (out_acc > 0) f.push_back({me, outer, out_acc, 1});
            }
          }
        }
        return solve(fabric_, cost_, f, 2);
      };
      auto fwd = flows(e, 0, e, 0);
      pat->kv = fwd[0];
      pat->outer_kv = fwd[1];
      auto bwd = flows(e, acc, e, acc);
      pat->kv_dkv = bwd[0];
      pat->outer_kv_dkv = bwd[1];
      pat->dkv = flows(0, acc, 0, 0)[0];
      pat->outer_dkv = flows(0, 0, 0, acc)[1];
      pat->home = pat->outer_dkv;
      pat->kv_single = pat->kv;
    } else {
      const bool both = schedule == Schedule::kBidirectional;
      // K,V and accumulators in 0, 1 (clockwise) or 2 directions.
      auto ways = [&](int kv_ways, int acc_ways) {
        std::vector<UnitFlow> f;
        for (int r = 0; r < rings; ++r) {
          for (int i = 0; i < cp; ++i) {
            for (int dir : {1, -1}) {
              const int n = dir > 0 ? 1 : 2;  // directions needed for this one
              const int to = gpu(r, i + dir);
              if (kv_ways >= n) f.push_back({gpu(r, i), to, e, 0});
              if (acc_ways >= n) f.push_back({gpu(r, i), to, acc, 0});
            }
          }
        }
        return solve(fabric_, cost_, f, 1)[0];
      };
      auto flows = [&](double kv_bytes, double acc_bytes, bool two_ways) {
        return ways(kv_bytes > 0 ? 1 + two_ways : 0, acc_bytes > 0 ? 1 + two_ways : 0);
      };
      pat->kv = flows(e, 0, both);
      pat->kv_single = both ? flows(e, 0, false) : pat->kv;
      pat->kv_dkv = flows(e, acc, both);
      pat->dkv = flows(0, acc, both);
      if (both) {
        for (int k = 0; k < 3; ++k)
          for (int a = 0; a < 3; ++a) pat->bidi[k][a] = k + a > 0 ? ways(k, a) : PatternCost{};
        // Accumulators go straight home: the clockwise stream's last block is S steps
        // back, the counter-clockwise one S' steps ahead (S' = S - 1 when P is even).
        const int S = cp / 2, S2 = (cp - 1) - S;
        std::vector<UnitFlow> f;
        for (int r = 0; r < rings; ++r) {
          for (int i = 0; i < cp; ++i) {
            f.push_back({gpu(r, i), gpu(r, i - S), acc, 0});
            if (S2 > 0) f.push_back({gpu(r, i), gpu(r, i + S2), acc, 0});
          }
        }
        pat->home = solve(fabric_, cost_, f, 1)[0];
      } else {
        pat->home = pat->dkv;
      }
    }
    pat->two_level = schedule == Schedule::kTwoLevel;
  }
  return *patterns_.emplace(key, std::move(pat)).first->second;
}

const PatternCost& CostModel::ring_home_pattern(int cp, int dp, const std::vector<int>& order, int hops) {
  auto key = std::make_tuple(cp, dp, hops, order);
  auto it = ring_home_.find(key);
  if (it != ring_home_.end()) return it->second;
  std::vector<UnitFlow> f;
  const int rings = static_cast<int>(order.size()) / cp;  // dp, or tp·dp with tensor parallelism
  for (int r = 0; r < rings; ++r)
    for (int i = 0; i < cp; ++i)
      f.push_back({order[r * cp + i], order[r * cp + ((i - hops) % cp + cp) % cp], 4.0, 0});
  return ring_home_.emplace(key, solve(fabric_, cost_, f, 1)[0]).first->second;
}

const PatternCost& CostModel::all_to_all_pattern(int cp, int dp, const std::vector<int>& order) {
  auto key = std::make_tuple(cp, dp, order);
  auto it = all_to_all_.find(key);
  if (it != all_to_all_.end()) return it->second;
  std::vector<UnitFlow> f;
  const int rings = static_cast<int>(order.size()) / cp;  // dp, or tp·dp with tensor parallelism
  for (int r = 0; r < rings; ++r)
    for (int i = 0; i < cp; ++i)
      for (int j = 0; j < cp; ++j)
        if (i != j) f.push_back({order[r * cp + i], order[r * cp + j], 1.0, 0});
  PatternCost p = cp > 1 ? solve(fabric_, cost_, f, 1)[0] : PatternCost{};
  return all_to_all_.emplace(key, p).first->second;
}

const GroupCollective& CostModel::group_collective(const std::vector<std::vector<int>>& groups) {
  auto it = collectives_.find(groups);
  if (it != collectives_.end()) return it->second;
  // The two concurrent rings of collective_pattern.h over each group's GPUs: one per rail
  // across nodes, one inside each node; each member's flow carries all its ring's shards.
  // The groups run at once (sharing links).
  std::vector<UnitFlow> f;
  GroupCollective gc;
  for (const std::vector<int>& members : groups) {
    const std::vector<CollectiveRole> roles = collective_roles(fabric_, members);
    for (size_t k = 0; k < members.size(); ++k) {
      const CollectiveRole& r = roles[k];
      if (r.rail_succ >= 0) f.push_back({members[k], r.rail_succ, r.rail_shards, 0});
      if (r.node_succ >= 0) f.push_back({members[k], r.node_succ, r.node_shards, 1});
    }
    const CollectiveRole& first = roles.front();
    const RingStepLatency lat = ring_step_latency(fabric_, cost_, members, roles);
    gc.step_latency.rail_s = std::max(gc.step_latency.rail_s, lat.rail_s);
    gc.step_latency.node_s = std::max(gc.step_latency.node_s, lat.node_s);
    gc.rail_steps = std::max(gc.rail_steps, first.rail_steps);
    gc.node_steps = std::max(gc.node_steps, first.node_steps);
    gc.peers = std::max(gc.peers, static_cast<double>(members.size()) - 1);
  }
  gc.fitted = cost_.collectives;
  std::vector<LinkFlows> link_flows;
  const std::vector<PatternCost> p = solve(fabric_, cost_, f, 2, &link_flows);
  gc.rail = p[0];
  gc.node = p[1];
  gc.link_flows = {std::move(link_flows[0]), std::move(link_flows[1])};
  return collectives_.emplace(groups, gc).first->second;
}

double GroupCollective::time(double bytes_per_gpu, int passes) const {
  if (fitted.beta_bytes_per_s > 0) return fitted_collective_s(fitted, peers, bytes_per_gpu, passes);
  // Both rings at once; each flow pays one latency, the wait the slower ring's further
  // step latencies (the simulator's collective_ring.h charges the same).
  auto steps = [&](const PatternCost& p, int n, double step_s) {
    return p.bottleneck_link < 0 ? 0.0 : (passes * n - 1) * step_s;
  };
  return std::max(rail.time(passes * bytes_per_gpu), node.time(passes * bytes_per_gpu)) +
         std::max(steps(rail, rail_steps, step_latency.rail_s), steps(node, node_steps, step_latency.node_s));
}

int GroupCollective::bottleneck_link() const { return bottleneck().bottleneck_link; }

int GroupCollective::flows_on(const PatternCost& ring, int link) const {
  const LinkFlows& lf = link_flows[&ring == &rail ? 0 : 1];
  const auto it = std::lower_bound(lf.begin(), lf.end(), std::pair{link, 0});
  return it != lf.end() && it->first == link ? it->second : 0;
}

bool GroupCollective::shares_links(const GroupCollective& other) const {
  for (const LinkFlows& mine : link_flows)
    for (const LinkFlows& theirs : other.link_flows)
      for (auto a = mine.begin(), b = theirs.begin(); a != mine.end() && b != theirs.end();) {
        if (a->first == b->first) return true;
        a->first < b->first ? ++a : ++b;
      }
  return false;
}

const PatternCost& GroupCollective::bottleneck() const {
  // The ring whose bandwidth term is the larger.
  return rail.s_per_unit >= node.s_per_unit ? rail : node;
}

const PatternCost& GroupCollective::slack() const { return &bottleneck() == &rail ? node : rail; }

const GroupCollective& CostModel::fsdp_collective(int tp, int pp) {
  const int G = fabric_.gpus();
  auto it = fsdp_.find({tp, pp});
  if (it != fsdp_.end()) return *it->second;
  // FSDP shards each TP rank's weights over its cp·dp GPUs (all GPUs when tp = 1), those
  // of its pipeline stage (pipeline_parallel.h); the groups do not depend on how those
  // split into cp and dp.
  const auto groups = pp > 1 ? pp_fsdp_groups(G, tp, pp) : fsdp_groups(tp_order(tp, 1, G / tp), tp, 1);
  return *(fsdp_[{tp, pp}] = &group_collective(groups));
}

const PatternCost& CostModel::pp_p2p_pattern(int pp, bool both_ways) {
  const auto key = std::make_pair(pp, both_ways);
  auto it = pp_p2p_.find(key);
  if (it != pp_p2p_.end()) return it->second;
  // Every boundary at once: GPU g of a stage and g + G/pp of the next (pipeline_parallel.h).
  // Units: bytes.
  const int G = fabric_.gpus(), step = G / pp;
  std::vector<UnitFlow> f;
  for (int g = 0; g + step < G; ++g) {
    f.push_back({g, g + step, 1.0, 0});
    if (both_ways) f.push_back({g + step, g, 1.0, 0});
  }
  return pp_p2p_.emplace(key, pp > 1 ? solve(fabric_, cost_, f, 1)[0] : PatternCost{}).first->second;
}

const GroupCollective& CostModel::tp_collective(int tp) {
  const int G = fabric_.gpus();
  auto it = tp_.find(tp);
  if (it != tp_.end()) return *it->second;
  return *(tp_[tp] = &group_collective(tp_groups(tp_order(tp, 1, G / tp), tp, 1)));
}

const GroupCollective& CostModel::hsdp_collective(const PlanChoice& ch, bool replicate) {
  auto key = std::make_tuple(ch.tp, ch.cp, ch.dp_shard, replicate, ch.order);
  auto it = hsdp_.find(key);
  if (it != hsdp_.end()) return *it->second;
  const auto groups = replicate ? hsdp_replicate_groups(ch.order, ch.tp, ch.cp, ch.dp_shard)
                                : hsdp_shard_groups(ch.order, ch.tp, ch.cp, ch.dp_shard);
  return *(hsdp_[key] = &group_collective(groups));
}

double CostModel::fsdp_collective_s(double bytes_per_gpu) {
  return fabric_.gpus() < 2 ? 0 : fsdp_collective(1).time(bytes_per_gpu);
}

const ModelSpec& CostModel::shard(int tp) {
  auto it = shards_.find(tp);
  if (it != shards_.end()) return it->second;
  return shards_.emplace(tp, tp_shard(model_, tp)).first->second;
}

std::string CostModel::why_invalid(const Job& job, const PlanChoice& ch) const {
  const int G = fabric_.gpus();
  const ModelSpec& m = model_;
  auto str = [](auto v) { return std::to_string(v); };
  if (const std::string why = micro_batch_why_invalid(job, ch.micro_batch, ch.dp); !why.empty()) return why;
  if (ch.pp != 1 || ch.virtual_stages != 1 || ch.account_for_embedding_in_pipeline_split ||
      ch.account_for_loss_in_pipeline_split) {
    // The pipeline's own rules, then every stage's block as one plan (pp_flattened).
    if (ch.pp < 1 || ch.tp < 1 || ch.cp < 1 || ch.dp < 1 || int64_t{ch.tp} * ch.cp * ch.dp * ch.pp != G)
      return "tp x cp x dp x pp must equal the " + str(G) + " GPUs (tp " + str(ch.tp) + ", cp " + str(ch.cp) +
             ", dp " + str(ch.dp) + ", pp " + str(ch.pp) + ")";
    if (job.workload != Workload::kStep) return "pipeline parallelism applies to step workloads (pp " + str(ch.pp) + ")";
    const std::string why = pp_why_invalid(pp_layout(m.layers, ch), ch.grad_accum);
    if (!why.empty()) return why;
    if (static_cast<int>(ch.order.size()) != G) return "the order must list all " + str(G) + " GPUs";
    if (const std::string bad_order = pp_order_why_invalid(ch); !bad_order.empty()) return bad_order;
    return why_invalid(job, pp_flattened(ch));
  }
  if (ch.tp < 1 || ch.cp < 1 || ch.dp < 1 || int64_t{ch.tp} * ch.cp * ch.dp != G)
    return "tp x cp x dp must equal the " + str(G) + " GPUs (tp " + str(ch.tp) + ", cp " + str(ch.cp) +
           ", dp " + str(ch.dp) + ")";
  if (static_cast<int>(ch.order.size()) != G) return "the order must list all " + str(G) + " GPUs";
  if (ch.sharding == Sharding::kNone) return "a plan's sharding is ddp, zero1, zero2, fsdp or hsdp";
  if (ch.sharding == Sharding::kHsdp && (ch.dp_shard < 1 || ch.dp % ch.dp_shard != 0 || ch.dp / ch.dp_shard < 2))
    return "hsdp shards over dp_shard replicas and replicates across at least 2: dp " + str(ch.dp) +
           " cannot split that way (dp_shard " + str(ch.dp_shard) + ")";
  if (ch.sharding == Sharding::kHsdp) {
    const std::string why = hsdp_why_not(ch);
    if (!why.empty()) return why;
  }
  if (ch.tp > 1) {
    const std::string why = tp_why_invalid(m, ch.tp, fabric_.topology().gpus_per_node);
    if (!why.empty()) return why;
    if (ch.order != tp_order(ch.tp, ch.cp, ch.dp))
      return "with tp > 1 the order must be the tp-cp-dp rank order (TP innermost on NVLink)";
    if (ch.strategy == Strategy::kRing && ch.schedule == Schedule::kTwoLevel)
      return "a two-level ring runs with tp = 1 (its inner ring is the node's GPUs)";
  }
  const int64_t need = ch.load_balance == LoadBalance::kZigzag ? 2 * int64_t{ch.cp} : ch.cp;
  if (job.seq_len % need != 0)
    return "sequence length " + str(job.seq_len) + " is not a multiple of " + str(need) + " (" +
           to_string(ch.load_balance) + " over a ring of " + str(ch.cp) + ")";
  const int64_t c = job.seq_len / ch.cp;
  if (ch.block_q < 1 || ch.block_kv < 1) return "tile sizes must be >= 1";
  if (!cost_.attention.fits(ch.block_q, ch.block_kv, m.head_dim))
    return "tile " + str(ch.block_q) + "x" + str(ch.block_kv) + " (head dim " + str(m.head_dim) +
           ") needs " + str(static_cast<int64_t>(KernelCurve::tile_bytes(ch.block_q, ch.block_kv, m.head_dim))) +
           " bytes of on-chip memory, more than the " +
           str(static_cast<int64_t>(cost_.attention.tile_bytes_limit)) + " available";
  if (ch.kv_subblocks < 1 || ch.kv_subblocks > c)
    return "kv_subblocks must be in [1, " + str(c) + "] (got " + str(ch.kv_subblocks) + ")";
  if (ch.strategy == Strategy::kRing) {
    if (ch.schedule != Schedule::kFlat && ch.cp > 1 && effective_window(m, job) > 0)
      return std::string("a sliding window (") + str(m.sliding_window) + " tokens) runs on the flat ring, which " +
             "stops at the last block in the window (a " + to_string(ch.schedule) + " ring carries every block)";
    if (ch.schedule == Schedule::kBidirectional && ch.cp < 3)
      return "a bidirectional ring needs cp >= 3 (a ring of " + str(ch.cp) + " has one neighbour)";
    if (ch.schedule == Schedule::kTwoLevel) {
      const int g = fabric_.topology().gpus_per_node;
      if (g < 2 || ch.cp % g != 0 || ch.cp / g < 2)
        return "a two-level ring needs cp a multiple of the " + str(g) +
               " GPUs per node spanning at least two nodes (cp " + str(ch.cp) + ")";
      for (int r = 0; r < ch.dp; ++r) {
        for (int k = 0; k < ch.cp / g; ++k) {
          const int node = fabric_.node_of(ch.order[r * ch.cp + k * g]);
          for (int l = 1; l < g; ++l)
            if (fabric_.node_of(ch.order[r * ch.cp + k * g + l]) != node)
              return "a two-level ring's order must keep each node's " + str(g) +
                     " GPUs together (ring " + str(r) + ", node group " + str(k) + ")";
        }
      }
    }
  }
  if (ch.strategy == Strategy::kFlashFsdp && ch.cp != 1) return "flash-fsdp has cp = 1";
  if (ch.strategy == Strategy::kUsp) {
    const std::string why = usp_why_invalid(job, ch);
    if (!why.empty()) return why;
  }
  if (ch.micro_batch < 1) return "micro_batch must be >= 1 (got " + str(ch.micro_batch) + ")";
  if (ch.strategy == Strategy::kUlysses) {
    // A TP member splits its own h/tp and h_kv/tp heads over the cp GPUs. Both counts must
    // divide: TransformerEngine's a2a (Megatron's --cp-comm-type a2a) asserts "The number
    // of attention heads needs to be divisible by CP size!" for Q and for K,V alike.
    const int h = m.heads / ch.tp, hkv = m.kv_heads / ch.tp;
    const std::string per = ch.tp > 1 ? " (per TP rank)" : "";
    if (h % ch.cp != 0)
      return "Ulysses needs cp to divide the " + str(h) + " query heads" + per + " (cp " + str(ch.cp) + ")";
    if (hkv % ch.cp != 0)
      return "Ulysses needs cp to divide the " + str(hkv) + " kv heads" + per + " (cp " + str(ch.cp) + ")";
  }
  return "";
}

bool CostModel::LayerKey::operator==(const LayerKey& o) const {
  return pat == o.pat && a2a == o.a2a && seq_len == o.seq_len && std::equal(std::begin(fields), std::end(fields), o.fields);
}

size_t CostModel::LayerKeyHash::operator()(const LayerKey& k) const {
  size_t h = std::hash<const void*>()(k.pat) ^ (std::hash<const void*>()(k.a2a) << 1) ^
             std::hash<int64_t>()(k.seq_len) * 31;
  for (int f : k.fields) h = h * 1000003u ^ static_cast<size_t>(f);
  return h;
}

const LayerTimes& CostModel::layer_times_cached(const Job& job, const PlanChoice& ch, const RingPatterns& pat,
                                               const PatternCost* a2a, bool free_comm) {
  const LayerKey key{&pat,
                     a2a,
                     job.seq_len,
                     {static_cast<int>(ch.strategy), ch.tp, ch.cp, ch.cp_a2a, static_cast<int>(ch.load_balance),
                      ch.block_q, ch.block_kv, ch.kv_subblocks, static_cast<int>(ch.checkpointing),
                      ch.tp_comm_overlap * 4 + free_comm * 2 + job.causal,
                      static_cast<int>(job.passes) * 8 + static_cast<int>(job.workload),
                      ch.micro_batch,
                      static_cast<int>(job.fp8_recipe) * 4 + job.eager_elementwise * 2 +
                          pays_gemm_size_curve(job, ch)}};
  auto it = layer_memo_.find(key);
  if (it != layer_memo_.end()) return it->second;
  // Bounded over long searches: an entry holds its passes' phases, about 1 KB (at 65,536
  // entries the study's sweep peaked at 165 MB, at 1,024 at 46 MB, as fast).
  auto remember = [&](const LayerTimes& t) -> const LayerTimes& {
    if (layer_memo_.size() >= 1024) layer_memo_.clear();
    return layer_memo_.emplace(key, t).first->second;
  };
  if (ch.tp > 1 && ch.tp_comm_overlap) {
    // The same layer as without overlap but for its TP terms: the search prices both, and
    // the ring attention is the expensive part.
    PlanChoice waited = ch;
    waited.tp_comm_overlap = false;
    LayerTimes t = layer_times_cached(job, waited, pat, a2a, free_comm);
    if (!free_comm) add_tp_overlap(job, ch, t);
    return remember(t);
  }
  return remember(layer_times(job, ch, pat, a2a, free_comm));
}

void AttentionPhases::add(const AttentionPhase& p) {
  if (p.seconds <= 0 && p.busy <= 0) return;
  if (p.busy <= 0 && n > 0 && at[n - 1].busy <= 0) {
    at[n - 1].seconds += p.seconds;
    at[n - 1].compute += p.compute;
    return;
  }
  at.at(n++) = p;
}

double AttentionPhases::seconds() const {
  double s = 0;
  for (int i = 0; i < n; ++i) s += at[i].seconds;
  return s;
}

double AttentionPhases::busy_on(unsigned link_class_bits) const {
  double b = 0;
  for (int i = 0; i < n; ++i) b += (at[i].transfer.link_classes & link_class_bits) != 0 ? at[i].busy : 0;
  return b;
}

AttentionPhases CostModel::a2a_phases(const Job& job, const PlanChoice& ch, const PatternCost& a2a, bool free_comm,
                                      bool backward, const AttentionPhases& middle) const {
  const A2aBytes b = a2a_bytes(model_, ch, job.seq_len, fabric_.topology().gpu.element_bytes);
  AttentionPhases p;
  auto exchange = [&](double bytes) {  // to each peer; the copies move the rank's whole payload
    const double x = free_comm ? 0.0 : a2a.time(bytes), copy = cost_.a2a_copy_s(b.members * bytes);
    p.compute(copy);
    p.add({x, 0, x, a2a});
    p.compute(copy);
  };
  exchange(backward ? b.out : b.qkv);
  for (int i = 0; i < middle.n; ++i) p.add(middle.at[i]);
  exchange(backward ? b.qkv : b.out);
  return p;
}

LayerTimes CostModel::layer_times(const Job& job, const PlanChoice& ch, const RingPatterns& pat,
                                  const PatternCost* a2a, bool free_comm) {
  const ModelSpec& m = shard(ch.tp);  // one TP member's heads and weights
  const int P = std::max(1, ch.cp);
  const int64_t c = job.seq_len / P;
  const double units = 2.0 * static_cast<double>(c) * m.head_dim * m.attention_kv_heads();  // K,V elements
  const double F = cost_.attention_flops_per_s(ch.block_q, ch.block_kv, m.head_dim);
  const double bf = cost_.attention.backward_factor;
  // A p2p ring's kernels run at its slowest GPU's pace (straggler.h; all_gather's and a2a's
  // one kernel a layer do not use it), a later step's slowed beside its transfers too.
  const double slowest = free_comm ? 1.0 : cost_.lockstep_slowdown(P);
  const double I = free_comm ? 1.0 : cost_.overlap_interference * slowest;
  const double sync = free_comm ? 0.0 : cost_.step_sync_s;
  auto X = [&](const PatternCost& p, double u) { return free_comm ? 0.0 : p.time(u); };
  const double acc = cost_.accumulate_s(units * 4);
  const AttentionTiles tiles{ch.block_q, ch.block_kv};
  // A ring step with compute c and transfer x: max(c, x) when the transfer proceeds during
  // compute (DMA engines), c + x when it only moves inside the wait; calibrated between.
  auto ov = [&](double c, double x) {
    return c + x - cost_.transfer_overlap * std::min(c, x);
  };
  const bool fwd_only = job.passes == Passes::kForward;
  const int64_t window = effective_window(m, job);

  LayerTimes t;
  if (ch.strategy == Strategy::kUsp) {
    t = usp_attention_times(job, ch, pat, *a2a, free_comm);
  } else if (ch.strategy == Strategy::kUlysses || ch.strategy == Strategy::kAllGatherCp) {
    // Every GPU computes 1/P of the whole sequence's attention, balanced.
    const TokenLayout whole{LoadBalance::kContiguous, job.seq_len, 1};
    const RingAttentionWork w = ring_attention_work(whole, job.causal, m.heads, m.head_dim, tiles, window);
    const double cf = w.executed_total / P / F, cb = bf * cf;
    if (ch.strategy == Strategy::kAllGatherCp) {
      // All-gather K,V (B-1 ring steps of one block, B = P or a window's blocks) before the
      // forward and again before the backward; reduce-scatter of the fp32 dK,dV after it.
      // Not overlapped. The share of the attention is the average (a window leaves the
      // first positions less to do).
      const int steps = all_gather_blocks(ch, c, window) - 1;
      const double kv = steps * X(pat.kv, units), dkv = steps * X(pat.dkv, units);
      t.phases_fwd.add({kv, 0, kv, pat.kv});
      t.phases_fwd.compute(cf);
      t.phases_bwd.add({kv, 0, kv, pat.kv});
      t.phases_bwd.compute(cb);
      t.phases_bwd.add({dkv, 0, dkv, pat.dkv});
    } else if (P > 1) {
      // All-to-all of Q,K,V in and of the output back (backward: dout in, dQ,dK,dV out),
      // each packed and unpacked on the compute stream.
      AttentionPhases kernel_f, kernel_b;
      kernel_f.compute(cf);
      kernel_b.compute(cb);
      t.phases_fwd = a2a_phases(job, ch, *a2a, free_comm, false, kernel_f);
      t.phases_bwd = a2a_phases(job, ch, *a2a, free_comm, true, kernel_b);
    } else {
      t.phases_fwd.compute(cf);
      t.phases_bwd.compute(cb);
    }
    if (fwd_only) t.phases_bwd = {};
    t.attention_fwd = t.phases_fwd.seconds();
    t.attention_bwd = t.phases_bwd.seconds();
    t.attention_compute_fwd = cf;
    t.attention_compute = cf + (fwd_only ? 0 : cb);
  } else {
    const TokenLayout layout{ch.load_balance, job.seq_len, P};
    const RingAttentionWork w = ring_attention_work(layout, job.causal, m.heads, m.head_dim, tiles, window);
    // A later step's block also merges its partial result (KernelCurve::merge_bytes): the
    // lockstep step waits for the slowest position's, the whole output in place or position
    // 0's slice (forward_merge: striped and zigzag causal, at every later step).
    const double elements = static_cast<double>(c) * m.heads * m.head_dim;
    const ForwardMerge later_merge = forward_merge(layout, job.causal, 0, 1);
    const double mf =
        std::max(cost_.merge_s(elements, false), cost_.merge_s(elements * later_merge.share, false, later_merge.sliced));
    const double mb = cost_.merge_s(elements, true);
    const double f0 = w.own_executed_max / F * slowest, f1 = w.step_executed_max / F * I + mf;
    const double b0 = bf * w.own_executed_max / F * slowest, b1 = bf * w.step_executed_max / F * I + mb + acc;
    double tf = 0, tb = 0, busy_f = 0, busy_b = 0;
    // What follows the transfers each pass hides: the forward's last step computes with no
    // transfer beside it, the backward ends on the accumulators' way home with no compute
    // (a collective sharing the links meets neither: PassShare).
    double tail_f = 0, home_b = 0;
    PatternCost home_pat;
    if (P == 1) {
      tf = f0;
      tb = b0;
    } else if (ch.schedule == Schedule::kFlat) {
      // S = P steps, or fewer under a sliding window (the ring stops at the last block with
      // a pair in the window; the accumulators then go straight home, S - 1 positions back).
      const int S = w.steps;
      // A later backward step adds its partial into the accumulator received in that step,
      // so the add follows the accumulator's arrival: ov(kernel, transfer) + acc.
      auto bwd_step = [&](double x) { return ov(b1 - acc, x) + acc; };
      const double xkv = X(pat.kv, units), xkd = X(pat.kv_dkv, units), xd = X(pat.dkv, units);
      const PatternCost& home = S == P ? pat.home : ring_home_pattern(ch.cp, ch.dp, ch.order, S - 1);
      const double xh = X(home, units);
      // Under a window a position's step s works on w.position_step_executed; one whose
      // blocks are all outside the window computes nothing, so merges and adds nothing
      // either: its K,V (and accumulator) only pass on.
      auto work = [&](int i, int s) { return w.position_step_executed[static_cast<size_t>(i) * S + s]; };
      auto fwd_step = [&](int i, int s) {
        if (s == 0) return work(i, 0) / F * slowest;  // zigzag's last position: its two chunks touch
        if (work(i, s) <= 0) return 0.0;
        const ForwardMerge m = forward_merge(layout, job.causal, i, (i - s + P) % P);
        return work(i, s) / F * I + cost_.merge_s(elements * m.share, false, m.sliced);
      };
      if (S == 1) {
        tf = f0;
        tb = b0;
      } else if (w.step_executed.empty()) {
        tf = ov(f0, xkv) + (P - 2) * ov(f1, xkv) + f1 + P * sync;
        tb = ov(b0, xkv) + (P - 2) * bwd_step(xkd) + bwd_step(xd) + xh + P * sync;
      } else {
        // The positions' work differs from step to step, and the ring runs in lockstep:
        // position i's step ends when its compute does (backward: then its add into the
        // accumulator, once that has arrived) and when its transfers to and from both
        // neighbours do, each starting once both ends have posted it (the replay's
        // rendezvous). Position by position, so a busy step of one position delays its
        // neighbours' next step; the busiest position alone misses that.
        struct Step {
          double x, compute, add;
          bool sends = true;  // the forward's last step sends nothing
        };
        auto lockstep = [&](auto&& step, std::vector<double>& at) {  // step(i, s) -> Step
          std::vector<double> next(P);
          for (int s = 0; s < S; ++s) {
            for (int i = 0; i < P; ++i) {
              const Step st = step(i, s);
              const double in = st.sends ? std::max(at[i], at[(i + P - 1) % P]) + st.x : at[i];
              const double out = st.sends ? std::max(at[i], at[(i + 1) % P]) + st.x : at[i];
              next[i] = std::max(std::max(at[i] + ov(st.compute, st.x), in) + st.add, out) + sync;
            }
            at.swap(next);
          }
        };
        // Each position's backward starts where its forward ended (the replay runs a layer's
        // passes back to back, or its other work alike on every position between them).
        std::vector<double> at(P, 0.0);
        lockstep([&](int i, int s) { return Step{s < S - 1 ? xkv : 0.0, fwd_step(i, s), 0.0, s < S - 1}; }, at);
        tf = *std::max_element(at.begin(), at.end());
        lockstep(
            [&](int i, int s) {
              const double x = s == 0 ? xkv : s < S - 1 ? xkd : xd;
              if (s == 0) return Step{x, bf * work(i, 0) / F * slowest, 0.0};
              if (work(i, s) <= 0) return Step{x, 0.0, 0.0};
              return Step{x, bf * work(i, s) / F * I + mb, acc};
            },
            at);
        tb = *std::max_element(at.begin(), at.end()) + xh - tf;
      }
      if (S > 1) {
        busy_f = (S - 1) * xkv;
        busy_b = xkv + (S - 2) * xkd + xd + xh;
        tail_f = f1;
        if (!w.step_executed.empty()) {  // the busiest position's last step
          tail_f = w.step_executed.back() > 0 ? w.step_executed.back() / F * I + mf : 0.0;
        }
        home_b = xh;
        home_pat = home;
      }
    } else if (ch.schedule == Schedule::kBidirectional) {
      const int S = P / 2;                 // steps after step 0 = ceil((P-1)/2)
      const int last_blocks = P % 2 == 1 ? 2 : 1;
      const double x2 = X(pat.kv, units), x1 = X(pat.kv_single, units);
      const double xlast = last_blocks == 2 ? x2 : x1;
      const double xkd = X(pat.kv_dkv, units), xd = X(pat.dkv, units), xh = X(pat.home, units);
      // Backward step s = 1..S (schedule.h): K,V travel clockwise while s < S and
      // counter-clockwise while s < last_ccw; the clockwise accumulator arrives every step,
      // the counter-clockwise one from step 2 to last_ccw. A step with two blocks computes
      // the clockwise partial, waits for its accumulator and adds it before the
      // counter-clockwise block (one partial buffer), so only the first partial hides the
      // transfers: ov(bp, x) + acc + bp, plus the second add unless that accumulator
      // starts here (s = 1).
      const int last_ccw = (P - 1) / 2;
      const double bp = b1 - acc;
      tb = ov(b0, x2);
      for (int s = 1; s <= S; ++s) {
        const int kv_ways = (s < S) + (s < last_ccw);
        const int acc_ways = 1 + (s >= 2 && s <= last_ccw);
        const double x = X(pat.bidi[kv_ways][acc_ways], units);
        tb += ov(bp, x) + acc;
        if (s <= last_ccw) tb += bp + (s == 1 ? 0 : acc);
      }
      if (S == 1) {
        tf = ov(f0, xlast) + last_blocks * f1;
      } else {
        tf = ov(f0, x2) + (S - 2) * ov(2 * f1, x2) + ov(2 * f1, xlast) +
             last_blocks * f1;
      }
      tf += (S + 1) * sync;
      // The home transfers, then the two streams' own dK,dV added together.
      tb += xh + acc + (S + 1) * sync;
      busy_f = (S - 1) * x2 + xlast;
      busy_b = x2 + (S - 1) * xkd + xd + xh;
      tail_f = last_blocks * f1;
      home_b = xh;
      home_pat = pat.home;
    } else {  // two-level
      const int g = fabric_.topology().gpus_per_node;
      const int n = P / g;
      const double xin = X(pat.kv, units), xout = X(pat.outer_kv, units);
      const double xin_b = X(pat.kv_dkv, units), xin_d = X(pat.dkv, units);
      const double xout_b = X(pat.outer_kv_dkv, units), xout_d = X(pat.outer_dkv, units);
      // Inner cycles: the first one holds the own block at its step 0.
      const double in_f0 = ov(f0, xin) + (g - 2) * ov(f1, xin) + f1 + g * sync;
      const double in_f1 = (g - 1) * ov(f1, xin) + f1 + g * sync;
      // Backward: an inner cycle's step 0 starts a fresh accumulator (K,V move, no
      // accumulator); each later step adds into the accumulator it received, after it
      // arrives (as the flat ring's); the inner accumulators then come back to the GPU that
      // passes the block on (one more inner transfer, exposed). From the second outer step
      // on, that GPU adds the outer accumulator sent at the end of the previous one, so the
      // add follows both the inner cycle and the outer transfers: ov(inner, x_outer) + acc.
      // The first outer step sends K,V alone; the last receives the accumulator alone, and
      // the sum then goes to the block's owner.
      const double bp = b1 - acc;
      const double later_inner = (g - 2) * (ov(bp, xin_b) + acc) + ov(bp, xin_d) + acc + xin_d + g * sync;
      const double in_b0 = ov(b0, xin) + later_inner;
      const double in_b1 = ov(bp, xin) + later_inner;
      tf = ov(in_f0, xout) + (n - 2) * ov(in_f1, xout) + in_f1;
      tb = ov(in_b0, xout) + (n - 2) * (ov(in_b1, xout_b) + acc) + ov(in_b1, xout_d) + acc + xout_d;
      busy_f = (n - 1) * xout;
      busy_b = (n - 1) * xout_b + xout_d;
      tail_f = in_f1;
      home_b = xout_d;
      home_pat = pat.outer_dkv;
    }
    t.attention_fwd = tf;
    t.attention_bwd = fwd_only ? 0 : tb;
    double steps_executed = (P - 1) * w.step_executed_max;
    int later = w.steps - 1;  // steps after the own block's that compute (and merge)
    if (!w.step_executed.empty()) {
      steps_executed = 0;
      later = 0;
      for (double x : w.step_executed) {
        steps_executed += x;
        later += x > 0;
      }
    }
    t.attention_compute_fwd = (w.own_executed_max + steps_executed) / F + later * mf;
    t.attention_compute = t.attention_compute_fwd +
                          (fwd_only ? 0 : bf * (w.own_executed_max + steps_executed) / F + later * (acc + mb));
    t.phases_fwd.add({tf - tail_f, std::max(0.0, t.attention_compute_fwd - tail_f), busy_f, pat.forward()});
    t.phases_fwd.compute(tail_f);
    if (!fwd_only) {
      t.phases_bwd.add({tb - home_b, t.attention_compute - t.attention_compute_fwd, busy_b - home_b, pat.forward()});
      t.phases_bwd.add({home_b, 0, home_b, home_pat});
    }
  }

  const LinearFlops lf = linear_flops_per_token(m);
  const double Fg = layer_gemm_flops_per_s(job, ch, c, lf);
  // Norms, rotary, activation and residual adds ride with the linear layers (HBM bound).
  // Tensor + sequence parallelism splits all of it tp ways (norms and adds by tokens,
  // rotary and the activation by heads and FFN columns).
  const double ew = static_cast<double>(c) *
                    elementwise_bytes_per_token(model_, fabric_.topology().gpu.element_bytes, job.eager_elementwise,
                                                job.fp8_recipe)
                        .layer_fwd /
                    cost_.hbm_bytes_per_s / ch.tp;
  const double gemm_fwd = static_cast<double>(c) * lf.layer() / Fg;
  t.linear_fwd = gemm_fwd + ew;
  if (!fwd_only) {
    t.linear_bwd = kLinearBackwardFactor * gemm_fwd + kElementwiseBackwardFactor * ew +
                   (ch.checkpointing == Checkpointing::kFull ? ew : 0) +
                   static_cast<double>(c) * linear_recompute_flops_per_token(m, ch.checkpointing) / Fg;
    if (ch.checkpointing == Checkpointing::kFull) {
      // The backward reruns the layer's forward: ring attention with its transfers too.
      t.attention_bwd += t.attention_fwd;
      t.attention_compute += t.attention_compute_fwd;
    }
  }
  if (ch.tp > 1 && !free_comm && !ch.tp_comm_overlap) {
    // The TP group's all-gathers and reduce-scatters (tensor_parallel.h), unhidden: half of
    // each pass's are all-gathers; selective recomputation reruns one, the FFN's all-gather.
    const auto [ag, rs] = tp_collective_times(job, c, ch.tp, 1);
    t.tp_fwd = kTpCollectivesForward / 2 * (ag + rs);
    if (!fwd_only) {
      const double redo = ch.checkpointing == Checkpointing::kFull ? kTpCollectivesRecomputeFull / 2 * (ag + rs)
                          : ch.checkpointing == Checkpointing::kSelective ? kTpCollectivesRecomputeSelective * ag
                                                                          : 0;
      t.tp_bwd = kTpCollectivesBackward / 2 * (ag + rs) + redo;
    }
  } else if (ch.tp > 1 && !free_comm) {
    add_tp_overlap(job, ch, t);
  }
  return t;
}

double CostModel::regather_bound_s(const Job& job, const PlanChoice& ch, const Prediction& p) {
  if (!pays_gemm_size_curve(job, ch) || cost_.gemm_half_flops <= 0) return 0;
  const LinearFlops lf = linear_flops_per_token(shard(ch.tp));
  const double tokens = micro_step_sequences(job, ch) * static_cast<double>(job.seq_len / std::max(1, ch.cp));
  const double w = tokens * std::min(lf.layer(), lf.logits);
  return p.linear_compute_s * cost_.gemm_half_flops / (w + cost_.gemm_half_flops);
}

double CostModel::layer_gemm_flops_per_s(const Job& job, const PlanChoice& ch, int64_t c,
                                         const LinearFlops& lf) const {
  // The GEMMs run on the micro-step's stacked sequences at once (their size sets the rate).
  return cost_.gemm_flops_per_s(micro_step_sequences(job, ch) * static_cast<double>(c) * lf.layer(),
                                pays_gemm_size_curve(job, ch));
}

std::pair<double, double> CostModel::tp_collective_times(const Job& job, int64_t c, int tp, int chunks) {
  const int e = fabric_.topology().gpu.element_bytes;
  const GroupCollective& g = tp_collective(tp);
  return {g.time(tp_collective_bytes(model_, c, tp_gather_element_bytes(job.fp8_recipe, e), tp) / chunks),
          g.time(tp_collective_bytes(model_, c, e, tp) / chunks)};
}

void CostModel::add_tp_overlap(const Job& job, const PlanChoice& ch, LayerTimes& t) {
  // Each collective pipelined with the GEMM it feeds or drains, in tp chunks
  // (tensor_parallel.h): what that adds to the GEMM's own time (linear_fwd, _bwd), at the
  // GEMM rate layer_times prices them at.
  const ModelSpec& m = shard(ch.tp);
  const int64_t c = job.seq_len / std::max(1, ch.cp);
  const LinearFlops lf = linear_flops_per_token(m);
  const double Fg = layer_gemm_flops_per_s(job, ch, c, lf);
  const auto [ag, rs] = tp_collective_times(job, c, ch.tp, ch.tp);  // one chunk's
  auto extra = [&](double flops_per_token, double factor, double x) {
    const double g = factor * static_cast<double>(c) * flops_per_token / Fg;
    return tp_overlapped_s(g, x, ch.tp, cost_) - g;
  };
  const double up = lf.ffn_recompute_selective, down = lf.ffn - up;  // FFN up/gate, down
  const double B = kLinearBackwardFactor;
  // Forward: QKV and up/gate take an all-gather, the output and down projections end in a
  // reduce-scatter; backward the other way round (schedule.cc tp_attention, tp_ffn).
  t.tp_fwd = extra(lf.qkv, 1, ag) + extra(lf.out_proj, 1, rs) + extra(up, 1, ag) + extra(down, 1, rs);
  t.tp_bwd = 0;
  if (job.passes != Passes::kForward) {
    t.tp_bwd = extra(down, B, ag) + extra(up, B, rs) + extra(lf.out_proj, B, ag) + extra(lf.qkv, B, rs) +
               (ch.checkpointing == Checkpointing::kFull        ? t.tp_fwd
                : ch.checkpointing == Checkpointing::kSelective ? extra(up, 1, ag)
                                                                : 0);
  }
}

const RingPatterns& CostModel::ring_patterns_of(const PlanChoice& ch) {
  if (ch.pp > 1) return ring_patterns_of(pp_flattened(ch));  // every stage's rings at once
  if (ch.strategy == Strategy::kUsp) {  // the patterns of its ring (usp_plan.h)
    const PlanChoice rc = usp_ring_choice(ch);
    return ring_patterns(rc.cp, rc.dp, rc.schedule, rc.order);
  }
  return ring_patterns(ch.cp, ch.dp, ch.schedule, ch.order);
}

Prediction CostModel::predict(const Job& job, const PlanChoice& ch) {
  return predict(job, ch, ring_patterns_of(ch));
}

Prediction CostModel::predict(const Job& job, const PlanChoice& choice, const RingPatterns& pat) {
  Prediction p = price(job, choice, pat);
  explain(job, choice, pat, p);
  return p;
}

Prediction CostModel::price(const Job& job, const PlanChoice& asked, const RingPatterns& pat) {
  // The level the framework runs (a PyTorch pipeline's fsdp is zero1): its collectives and memory.
  const PlanChoice choice = as_run(job, asked);
  // With pipeline stages every stage runs its rings, TP groups and FSDP groups at once:
  // the per-layer times are those of all stages' blocks as one (pipeline_parallel.h).
  const struct {
    int pp, dp;  // the pipeline's, and the replicas of a stage
  } pipe{std::max(1, choice.pp), choice.dp};
  const PlanChoice flat = choice.pp > 1 ? pp_flattened(choice) : PlanChoice{};
  const PlanChoice& ch = choice.pp > 1 ? flat : choice;
  const ModelSpec& m = model_;
  const ModelSpec& ms = shard(ch.tp);  // one TP member's
  const GpuSpec& gpu = fabric_.topology().gpu;
  const int G = fabric_.gpus();
  const int P = std::max(1, ch.cp);
  const int64_t c = job.seq_len / P;
  const PatternCost* a2a =
      ch.strategy == Strategy::kUlysses ? &all_to_all_pattern(ch.cp, ch.dp, ch.order)
      : ch.strategy == Strategy::kUsp   ? &all_to_all_pattern(ch.cp_a2a, G / ch.cp_a2a, ch.order)
                                        : nullptr;
  // A micro-step runs micro_batch sequences through each layer, one after another.
  const int mb = micro_step_sequences(job, ch);
  const LayerTimes real = scaled(layer_times_cached(job, ch, pat, a2a, false), mb);
  const LayerTimes free = scaled(layer_times_cached(job, ch, pat, a2a, true), mb);
  const bool fwd_only = job.passes == Passes::kForward;

  // Data-parallel collectives per layer, overlapped with the layer's compute, and at each
  // micro-step's ends (step workload), where nothing computes to hide them; which ones a
  // micro-step runs depends on the sharding level and the micro-step (data_parallel.h).
  DpCosts dp;
  dp.cost = &cost_;
  const int data_gpus = G / ch.tp / pipe.pp;  // a stage's TP rank's
  if (data_gpus > 1) {
    const bool hsdp = ch.sharding == Sharding::kHsdp;
    // Each TP rank's data-parallel group holds 1/tp of the layer over its stage's G/(tp·pp) GPUs.
    const GroupCollective& data = fsdp_collective(ch.tp, pipe.pp);
    const GroupCollective& shard = hsdp ? hsdp_collective(ch, false) : data;
    const GroupCollective& repl = hsdp ? hsdp_collective(ch, true) : data;
    // Each member's shard: of one TP member's unit over the shard group (all G / tp GPUs but
    // for hsdp); the all-reduce's over the replicas of that shard (data_parallel.h): unit / G.
    const double group = static_cast<double>(ch.tp) * shard_group_gpus(choice);  // a stage's
    const double layer_bytes = m.layer_params() * gpu.element_bytes;
    const double vocab_bytes = static_cast<double>(m.vocab) * m.hidden * gpu.element_bytes;
    dp.ag = shard.time(layer_bytes / group);
    dp.ag_vocab = shard.time(vocab_bytes / group);
    // The gradients travel in their reduce dtype (Job::grad_reduce_in_fp32).
    const double grads = static_cast<double>(grad_reduce_element_bytes(job, gpu.element_bytes)) / gpu.element_bytes;
    dp.rs = shard.time(grads * layer_bytes / group);
    dp.rs_vocab = shard.time(grads * vocab_bytes / group);
    dp.ar = repl.all_reduce_time(grads * layer_bytes * pipe.pp / G);
    dp.ar_vocab = repl.all_reduce_time(grads * vocab_bytes * pipe.pp / G);
    const GroupCollective* tpc = ch.tp > 1 ? &tp_collective(ch.tp) : nullptr;
    // The class of links `gc` bottlenecks on, as a LinkClass bit (0: it moves nothing).
    auto class_bit = [&](const GroupCollective& gc) {
      const int fl = gc.bottleneck_link();
      return fl < 0 ? 0u : 1u << static_cast<int>(fabric_.links()[fl].cls);
    };
    const bool full = ch.checkpointing == Checkpointing::kFull;  // the backward reruns the forward's attention
    // hsdp's all-reduce across replicas hides behind the layer's time, less what the
    // attention's transfers and the TP collectives keep its class of links busy (the shard
    // group's collectives: PassShare::idle, below).
    auto backward_window = [&](const GroupCollective& gc) {
      const unsigned bit = class_bit(gc);
      const bool tp_same = tpc && (bit & (tpc->rail.link_classes | tpc->node.link_classes)) != 0;
      const double busy = mb * (real.phases_bwd.busy_on(bit) + (full ? real.phases_fwd.busy_on(bit) : 0));
      return std::max(0.0, real.linear_bwd + real.attention_bwd + (tp_same ? 0 : real.tp_bwd) - busy);
    };
    // The shard group's collectives as each pass shares their links, in the order the
    // schedule runs a layer (schedule.cc tp_attention, tp_ffn): the forward's start before
    // its QKV GEMM, the backward's before the FFN's backward (full checkpointing: before
    // the recomputed QKV GEMM; the backward proper after the recomputed forward, linear_fwd
    // of linear_bwd). TP collectives waited for at once split their pass's TP time: an
    // all-gather before the QKV GEMM and the FFN, a reduce-scatter after the output
    // projection and the FFN; the backward's the other way round, after selective
    // recomputation's all-gather and up/gate GEMMs.
    // TP comm overlap: each GEMM in tp chunks (schedule.cc tp_gather_gemm, tp_gemm_scatter),
    // the first chunk's all-gather alone before it or the last chunk's reduce-scatter after
    // it, the other tp - 1 chunks' transfers beside a GEMM chunk (tp_overlapped_s).
    const LinearFlops lf = linear_flops_per_token(ms);
    const double qkv = lf.qkv / lf.layer(), op = lf.out_proj / lf.layer();
    const double up = lf.ffn_recompute_selective / lf.layer(), down = lf.ffn / lf.layer() - up;
    const double lin_f = real.linear_fwd / mb, lin_b = real.linear_bwd / mb;
    const unsigned bit = class_bit(shard);
    const bool overlap = tpc && ch.tp_comm_overlap && real.tp_fwd > 0;
    double tp_ag = 0, tp_rs = 0;  // one sequence's TP all-gather and reduce-scatter (overlapped: a chunk's)
    if (tpc && real.tp_fwd > 0) std::tie(tp_ag, tp_rs) = tp_collective_times(job, c, ch.tp, overlap ? ch.tp : 1);
    auto tp = [&](PassShare& s, double x) {
      if (x > 0) s.tp(x, *tpc, bit, shard);  // x > 0: a TP group (tpc) waited for at once
    };
    // A GEMM of `gemm` seconds and its TP collective (chunks of `x` seconds), the all-gather
    // before it (`gather`) or the reduce-scatter after it.
    auto tp_gemm = [&](PassShare& s, double gemm, double x, bool gather) {
      if (!overlap) {
        if (gather) tp(s, x);
        s.compute(gemm);
        if (!gather) tp(s, x);
        return;
      }
      const double g = gemm / ch.tp;
      if (gather) tp(s, x); else s.compute(g);
      for (int k = 1; k < ch.tp; ++k)
        s.add({g + cost_.collective_exposed_s(x, g), g, x, tpc->bottleneck()}, bit, shard);
      if (gather) s.compute(g); else tp(s, x);
    };
    // The FFN between its all-gather and its reduce-scatter: overlapped, its first GEMM
    // (forward: up/gate; backward: down) takes the all-gather, the second the reduce-scatter.
    auto ffn = [&](PassShare& s, double first, double second) {
      if (overlap) {
        tp_gemm(s, first, tp_ag, true);
        tp_gemm(s, second, tp_rs, false);
        return;
      }
      tp(s, tp_ag);
      s.compute(first + second);
      tp(s, tp_rs);
    };
    auto forward_pass = [&](PassShare& s) {
      tp_gemm(s, qkv * lin_f, tp_ag, true);
      s.attention(real.phases_fwd, bit, shard);
      tp_gemm(s, op * lin_f, tp_rs, false);
      ffn(s, up * lin_f, down * lin_f);
    };
    dp.share_f.sequences = dp.share_b.sequences = mb;
    dp.share_f.fabric = dp.share_b.fabric = &fabric_;
    dp.share_f.cost = dp.share_b.cost = &cost_;
    forward_pass(dp.share_f);
    if (full) forward_pass(dp.share_b);
    // Selective recomputation reruns the FFN's up/gate GEMMs, its all-gather first.
    const bool selective = ch.checkpointing == Checkpointing::kSelective;
    const double own_b = full ? lin_b - lin_f : selective ? lin_b - up * lin_f : lin_b;
    PassShare& b = dp.share_b;
    if (selective) tp_gemm(b, up * lin_f, tp_ag, true);
    ffn(b, down * own_b, up * own_b);
    tp_gemm(b, op * own_b, tp_ag, true);
    b.attention(real.phases_bwd, bit, shard);
    tp_gemm(b, qkv * own_b, tp_rs, false);
    // The windows: what of each pass leaves the shard group's links idle, as its phases
    // share them (overlapped TP chunks keep them busy inside a GEMM's time: counted idle, a
    // ddp step of tp 4 x cp 2 on the PCIe box hid 2.1 ms of each layer's all-reduce too
    // many, 7.5 % under its replay); hsdp's all-reduce's from its own links' class.
    dp.window_f = mb * dp.share_f.idle;
    dp.window_b = mb * dp.share_b.idle;
    dp.window_ar = hsdp ? backward_window(repl) : dp.window_b;
    // hsdp's all-reduce runs on the replicas' links beside the shard group's reduce-scatter
    // (the next layer's) where their bottlenecks are links of different classes, or where no
    // link carries flows of both. Otherwise they queue, even where neither crosses the other's
    // bottleneck link: a torus can route both over links the other's flows also use (a ring
    // of 8 chips over two rows), or keep them on different dimensions (a ring of 4 along
    // one, the replicas along the others: queued, a step of Llama 2 7B on 32 chips was priced
    // 15 % slower than replayed).
    const int sl = shard.bottleneck_link(), rl = repl.bottleneck_link();
    dp.ar_apart = hsdp && sl >= 0 && rl >= 0 &&
                  (fabric_.links()[sl].cls != fabric_.links()[rl].cls || !shard.shares_links(repl));
    dp.backward = !fwd_only;
    dp.ends = job.workload == Workload::kStep;
  }

  // The head and the loss are vocabulary-parallel over the TP group (Megatron's
  // vocab-parallel cross entropy).
  const LinearFlops lf = linear_flops_per_token(ms);
  const ElementwiseBytes ewb = elementwise_bytes_per_token(ms, gpu.element_bytes);
  const double logits =
      mb * static_cast<double>(c) *
      (lf.logits * (fwd_only ? 1 : 3) /
           cost_.gemm_flops_per_s(mb * static_cast<double>(c) * lf.logits,
                                  pays_gemm_size_curve(job, ch)) +
       (ewb.loss_fwd + (fwd_only ? 0 : ewb.loss_bwd)) / cost_.hbm_bytes_per_s);
  const int64_t seqs = sequences_per_step(job);
  const int accum = ceil_div(seqs, int64_t{pipe.dp} * mb);  // micro-batches per pipeline
  const int64_t active = busy_replicas(job, pipe.dp);
  const double L = m.layers;

  double time = 0, free_time = 0, tokens = 0, flops = 0, att_compute = 0, lin_compute = 0,
         fsdp_total = 0, tp_total = 0, p_bubble = 0, p_p2p = 0;
  const double att_useful_fwd =
      4.0 * m.head_dim * m.heads *
      attention_pairs(job.seq_len, job.causal, effective_window(m, job));  // one layer, one sequence
  const double pass_factor = fwd_only ? 1 : 3;
  switch (job.workload) {
    case Workload::kAttention:
      time = real.attention_fwd + real.attention_bwd;
      free_time = free.attention_fwd + free.attention_bwd;
      tokens = static_cast<double>(active * job.seq_len);
      flops = active * pass_factor * att_useful_fwd;
      att_compute = free_time;
      break;
    case Workload::kLayer: {
      const double fsdp_exposed = dp.alone(micro_step_collectives(ch.sharding, 0, 1, data_gpus));
      time = real.total() + fsdp_exposed;
      free_time = free.total();
      tokens = static_cast<double>(active * job.seq_len);
      flops = active * pass_factor * (2.0 * m.layer_params() * job.seq_len + att_useful_fwd);
      att_compute = free.attention_compute;
      lin_compute = free.linear_fwd + free.linear_bwd;
      fsdp_total = fsdp_exposed;
      tp_total = real.tp_fwd + real.tp_bwd;
      break;
    }
    case Workload::kStep: {
      // The micro-steps by what they run: the first, those between, the last.
      double dp_layer = 0, dp_ends = 0;  // summed over the micro-steps
      PipelineEnds stage_ends;           // pp > 1: the same, by stage
      ForwardGathers first_gathers;      // pp > 1: micro-step 0's forward gathers over their mean
      LastBackward last_backward;        // pp > 1: the last micro-step's backward collectives over their mean
      // Micro-batch 0's chunk gathers (pp_gathers_chunks_ahead): gathered ahead, only the
      // model's first chunk waits for its own; else each chunk's first waits in the
      // pipeline fill for its activation to arrive, then for the gather.
      const bool ahead = pp_gathers_chunks_ahead(job.framework, choice);
      // Of a stage's accum·v backwards, all but its last hand off to another action.
      const double handoff = 1 - 1.0 / (static_cast<double>(accum) * choice.virtual_stages);
      const bool head_alone =
          pipe.pp > 1 && pp_chunk_layer_count(pp_layout(m.layers, choice), pipe.pp * choice.virtual_stages - 1) == 0;
      auto add = [&](int k, int times) {
        const MicroStepCollectives c = micro_step_collectives(ch.sharding, k, accum, data_gpus);
        const DpExposed d = dp.exposed(c);
        dp_layer += times * d.per_layer;
        dp_ends += times * d.ends;
        if (pipe.pp > 1) {
          stage_ends.first += times * dp.chunk_ends(c, true, false, ahead && k == 0, handoff, false) / accum;
          stage_ends.middle += times * dp.chunk_ends(c, false, false, ahead && k == 0, handoff, false) / accum;
          stage_ends.last += times * dp.chunk_ends(c, false, true, ahead && k == 0, handoff, head_alone) / accum;
          if (k == accum - 1) stage_ends.tail = dp.pipeline_tail(c);
          const ForwardGathers fg = dp.forward_gathers(c);
          const ForwardGathers g = ahead ? ForwardGathers{} : fg;
          const double w = (k == 0 ? 1.0 : 0.0) - static_cast<double>(times) / accum;
          first_gathers.per_layer += w * g.per_layer;
          // (Gathered ahead, micro-batch 0's are all in flight at once.)
          if (!(ahead && k == 0)) first_gathers.mean_per_layer += static_cast<double>(times) / accum * fg.per_layer;
          first_gathers.first_end += w * g.first_end;
          first_gathers.other_end += w * g.other_end;
          const double w_last = (k == accum - 1 ? 1.0 : 0.0) - static_cast<double>(times) / accum;
          const double layer_b = dp.backward_slot(c, false);
          stage_ends.unprefetched += times * dp.unprefetched(c, layer_b) / accum;
          last_backward.per_layer += w_last * layer_b;
          if (!head_alone) last_backward.head += w_last * (dp.backward_slot(c, true) - layer_b);
          if (k == accum - 1) {
            // Beyond the micro-step before (with one, beyond nothing).
            const MicroStepCollectives before = micro_step_collectives(ch.sharding, k - 1, accum, data_gpus);
            const double other = accum > 1 ? dp.backward_slot(before, false) : 0;
            const double other_slowed = accum > 1 ? dp.backward_slowed(before, other) : 0;
            last_backward.handed_off = layer_b - other;
            last_backward.in_flight = last_backward.handed_off - (dp.backward_slowed(c, layer_b) - other_slowed);
          }
        }
      };
      add(0, 1);
      if (accum > 2) add(1, accum - 2);
      if (accum > 1) add(accum - 1, 1);
      if (pipe.pp > 1) {
        // pipeline_step prices every micro-batch alike, each its mean share of the
        // collectives, but for the first's forward gathers (first_gathers) and the last's
        // backward collectives (last_backward).
        const PipelineStep ps =
            pipeline_step(job, choice, real, free, dp_layer / accum, stage_ends, first_gathers, last_backward, logits,
                          accum);
        time = ps.time;
        free_time = ps.free_time;
        p_bubble = ps.bubble;
        p_p2p = ps.p2p;
        tokens = static_cast<double>(seqs * job.seq_len);
        flops = model_flops_per_step(m, job);
        const double n = ps.layers;  // the slowest stage's
        att_compute = accum * n * free.attention_compute;
        lin_compute = accum * n * (free.linear_fwd + free.linear_bwd) + ps.head_and_optimizer;
        fsdp_total = n * dp_layer + accum * ps.fsdp_ends + stage_ends.tail;
        tp_total = accum * n * (real.tp_fwd + real.tp_bwd);
        break;
      }
      const double dp_total = L * dp_layer + dp_ends;
      // Adam on the GPU's optimizer shard (memory_model.h's state_shards).
      const double opt = fwd_only ? 0 : cost_.optimizer_s(m.params() / (ch.tp * state_shards(ch).optimizer), optimizer_state_bytes(job.optimizer));
      time = accum * (L * real.total() + logits) + dp_total + opt;
      free_time = accum * (L * free.total() + logits) + opt;
      tokens = static_cast<double>(seqs * job.seq_len);
      flops = model_flops_per_step(m, job) * (fwd_only ? 1.0 / 3.0 : 1.0);
      att_compute = accum * L * free.attention_compute;
      lin_compute = accum * (L * (free.linear_fwd + free.linear_bwd) + logits) + opt;
      fsdp_total = dp_total;
      tp_total = accum * L * (real.tp_fwd + real.tp_bwd);
      break;
    }
  }

  Prediction p;
  p.step_time_s = time;
  p.tokens_per_s = time > 0 ? tokens / time : 0;
  p.mfu = time > 0 ? flops / (time * G * cost_.peak_flops) : 0;
  p.exposed_comm_s = std::max(0.0, time - free_time);
  p.comm_overhead = time > 0 ? p.exposed_comm_s / time : 0;
  p.scaling_efficiency = time > 0 ? free_time / time : 0;
  p.attention_compute_s = att_compute;
  p.linear_compute_s = lin_compute;
  p.fsdp_exposed_s = fsdp_total;
  p.tp_comm_s = tp_total;
  p.pp_bubble_s = p_bubble;
  p.pp_p2p_s = p_p2p;
  p.memory = plan_memory(m, job, choice, gpu);
  p.memory_bytes_per_gpu = p.memory.total();
  p.fits = p.memory_bytes_per_gpu <= gpu.memory_bytes;
  return p;
}

void CostModel::explain(const Job& job, const PlanChoice& choice, const RingPatterns& pat, Prediction& p) {
  const PlanChoice ch = choice.pp > 1 ? pp_flattened(choice) : choice;  // price()'s rings
  const ModelSpec& m = model_;
  const ModelSpec& ms = shard(ch.tp);
  const GpuSpec& gpu = fabric_.topology().gpu;
  const int P = std::max(1, ch.cp);
  // Tokens per GPU at which one step's compute would just cover its transfer, on this
  // plan's bottleneck with sharing (two-level: the outer transfer over g inner steps).
  // a2a+p2p: its ring's, in tokens of the ring's block (N / ring size, h / cp_a2a heads).
  const bool usp = ch.strategy == Strategy::kUsp;
  if ((ch.strategy == Strategy::kRing || usp) && P > 1 && pat.forward().bottleneck_link >= 0) {
    const int a2a = usp ? ch.cp_a2a : 1;  // heads divided as usp_ring_model does
    const int Pr = P / a2a;
    const int64_t cr = job.seq_len / Pr;
    const double units = 2.0 * static_cast<double>(cr) * ms.head_dim * (ms.attention_kv_heads() / a2a);
    const TokenLayout layout{ch.load_balance, job.seq_len, Pr};
    const RingAttentionWork w = ring_attention_work(layout, job.causal, ms.heads / a2a, ms.head_dim,
                                                    {ch.block_q, ch.block_kv}, effective_window(m, job));
    const double F = cost_.attention_flops_per_s(ch.block_q, ch.block_kv, m.head_dim);
    const double steps = ch.schedule == Schedule::kTwoLevel ? fabric_.topology().gpus_per_node : 1;
    const double compute = steps * w.step_executed_max / F;
    if (compute > 0) p.overlap_threshold_tokens = static_cast<double>(cr) * units * pat.forward().s_per_unit / compute;
  }
  if (cost_.lockstep_jitter > 0 && (ch.strategy == Strategy::kRing || usp) && P > 1) {
    // The step's wait for the rings' slowest positions: the step priced without it, subtracted.
    CostParams still = cost_;
    still.lockstep_jitter = 0;
    p.lockstep_wait_s = std::max(0.0, p.step_time_s - CostModel(model_, fabric_, still).price(job, choice, pat).step_time_s);
  }
  if (!p.fits) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "needs %.1f GiB per GPU, more than the %.1f GiB available",
                  p.memory_bytes_per_gpu / (1 << 30), gpu.memory_bytes / (1 << 30));
    p.why_not = buf;
    PlanChoice fsdp = choice;
    fsdp.sharding = Sharding::kFsdp;
    // (Not where the framework runs fsdp as another level: a PyTorch pipeline's is zero1.)
    if (choice.sharding != Sharding::kFsdp && shard_group_gpus(choice) > 1 &&
        sharding_as_run(job, fsdp) == Sharding::kFsdp) {
      // What the level's unsharded states cost against fsdp's (memory_model.h).
      const MemoryBreakdown f = plan_memory(m, job, fsdp, gpu);
      std::snprintf(buf, sizeof buf, " (%.1f GiB over; %s's model states and layer buffers take %.1f GiB, fsdp's %.1f)",
                    (p.memory_bytes_per_gpu - gpu.memory_bytes) / (1 << 30), to_string(choice.sharding),
                    (p.memory.model_states + p.memory.layer_buffers) / (1 << 30),
                    (f.model_states + f.layer_buffers) / (1 << 30));
      p.why_not += buf;
    }
  }
}

}  // namespace rm
