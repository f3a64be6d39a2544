// Cost model: the Ring Attention paper's Table 2 thresholds, hand-computed ring steps,
// link sharing and ring orders on small fabrics built in code.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "planner/cost_model.h"
#include "planner/data_parallel.h"
#include "planner/link_sharing.h"
#include "planner/profile.h"
#include "planner/ring_order.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "tests/planner/round_specs.h"

using namespace rm;

namespace {

using test::round_cluster;
ModelSpec mha_model() { return test::round_model(8, 8); }

// One sequence of `gpus` x c tokens through one attention layer, forward only.
Job forward_attention_job(int gpus, int64_t c, bool causal) {
  Job job;
  job.gpus = gpus;
  job.seq_len = gpus * c;
  job.causal = causal;
  job.workload = Workload::kAttention;
  job.passes = Passes::kForward;
  return job;
}

// A flat ring over all of them, node-major.
PlanChoice ring_over(int gpus, LoadBalance lb) {
  PlanChoice ch;
  ch.cp = gpus;
  ch.dp = 1;
  ch.order = node_major_order(gpus);
  ch.load_balance = lb;
  return ch;
}

}  // namespace

TEST_CASE("Table 2 of the Ring Attention paper: c >= F/B for MHA") {
  // A100: 312 TFLOP/s bf16; NVLink 300 GB/s -> 1.0K tokens; 12.5 GB/s InfiniBand -> 24.5K.
  const double nvlink = overlap_threshold_tokens(312e12, 300e9, 2, 32, 32);
  const double ib = overlap_threshold_tokens(312e12, 12.5e9, 2, 32, 32);
  CHECK(std::abs(nvlink / 1000 - 1) < 0.05);
  CHECK(std::abs(ib / 24500 - 1) < 0.05);
  // GQA sends h/h_kv times fewer bytes: the threshold falls by that factor.
  CHECK(overlap_threshold_tokens(312e12, 300e9, 2, 32, 8) == doctest::Approx(nvlink / 4));
  // Per topology: the NVSwitch class of an A100 box at 300 GB/s.
  Topology t = round_cluster(8, 1);
  t.gpu.peak_flops = 312e12;
  t.intra.bytes_per_s = 300e9;
  const auto th = overlap_thresholds(t, CostParams::from_topology(t), mha_model());
  REQUIRE(th.size() == 1);
  CHECK(th[0].cls == LinkClass::kNvlink);
  CHECK(std::abs(th[0].tokens / 1000 - 1) < 0.05);
}

TEST_CASE("max-min sharing: flows on one link split it, a finished flow frees its share") {
  const Topology t = round_cluster(4, 1);
  const Fabric f(t, 4);
  CostParams cost = CostParams::from_topology(t);
  // 0->1 and 0->2 share 0's up port (100 GB/s): 50 GB/s each; 3->2 shares 2's down port
  // with 0->2. Progressive filling: 0's port and 2's port both give 50 each.
  const SharingResult r = share_links(f, cost, {{0, 1, 1e9}, {0, 2, 1e9}, {3, 2, 1e9}});
  CHECK(r.finish_s[0] == doctest::Approx(0.02));
  CHECK(r.finish_s[1] == doctest::Approx(0.02));
  CHECK(r.finish_s[2] == doctest::Approx(0.02));
  // Unequal sizes: the small flow leaves at 10 ms, then the big one gets the full port.
  const SharingResult u = share_links(f, cost, {{0, 1, 0.5e9}, {0, 2, 2e9}});
  CHECK(u.finish_s[0] == doctest::Approx(0.01));
  CHECK(u.finish_s[1] == doctest::Approx(0.01 + 1.5e9 / 100e9));
  CHECK(u.makespan_s == doctest::Approx(0.025));
  CHECK(u.slowest_flow == 1);
  CHECK(f.links()[u.bottleneck_link].cls == LinkClass::kNvlink);
}

TEST_CASE("flat ring attention time, by hand") {
  // 4 GPUs on one switch, non-causal, c = 4096 tokens per rank, 8 heads of 128.
  const Topology t = round_cluster(4, 1);
  const Fabric f(t, 4);
  CostParams cost = CostParams::from_topology(t);
  cost.step_sync_s = 0;
  const ModelSpec m = mha_model();
  CostModel cm(m, f, cost);
  Job job;
  job.gpus = 4;
  job.seq_len = 4 * 4096;
  job.causal = false;
  job.workload = Workload::kAttention;
  PlanChoice ch;
  ch.cp = 4;
  ch.dp = 1;
  ch.order = node_major_order(4);
  ch.load_balance = LoadBalance::kContiguous;
  const Prediction p = cm.predict(job, ch);
  const double c = 4096;
  const double step_flops = 4 * c * c * 128 * 8;  // 68.7 GFLOP
  const double F = 100e12 * 0.5;
  const double comp = step_flops / F;                  // 1.37 ms
  const double kv = 2 * c * 128 * 8 * 2;               // 16.8 MB
  const double x_kv = kv / 100e9;                      // 0.17 ms: hidden
  const double x_acc = 2 * c * 128 * 8 * 4 / 100e9;    // dK,dV fp32 home: exposed
  const double acc = 3 * (2 * c * 128 * 8 * 4) / 2e12; // accumulate
  CHECK(x_kv < comp);
  const double fwd = 4 * comp;
  const double bwd = 4 * 2.5 * comp + 3 * acc + x_acc;
  CHECK(p.step_time_s == doctest::Approx(fwd + bwd).epsilon(1e-9));
  CHECK(p.exposed_comm_s == doctest::Approx(x_acc).epsilon(1e-6).scale(0));
  CHECK(p.scaling_efficiency == doctest::Approx((fwd + bwd - x_acc) / (fwd + bwd)));
  CHECK(p.comm_overhead + p.scaling_efficiency == doctest::Approx(1));
  // Transfer-bound: a 1000x slower switch makes every step wait for the K,V block.
  Topology slow = t;
  slow.intra.bytes_per_s = 100e6;
  const Fabric fs(slow, 4);
  CostModel cs(m, fs, CostParams::from_topology(slow));
  CostParams cp0 = CostParams::from_topology(slow);
  cp0.step_sync_s = 0;
  CostModel cs0(m, fs, cp0);
  const Prediction q = cs0.predict(job, ch);
  const double xs_kv = kv / 100e6, xs_kd = (kv + 2 * kv) / 100e6, xs_d = 2 * kv / 100e6;
  // Backward: each later step adds its partial into the accumulator it received, so the
  // add follows the transfer (3 of them), and the accumulators go home.
  CHECK(q.step_time_s == doctest::Approx(3 * xs_kv + comp +  // forward: 3 transfers + last step
                                         xs_kv + 2 * xs_kd + xs_d + 3 * acc + xs_d)  // backward
                             .epsilon(1e-6).scale(0));
  // kv_subblocks posts each transfer as several messages at once: the same time.
  PlanChoice sub = ch;
  sub.kv_subblocks = 4;
  CHECK(cm.predict(job, sub).step_time_s == doctest::Approx(p.step_time_s).epsilon(1e-12));
  CHECK(cs0.predict(job, sub).step_time_s == doctest::Approx(q.step_time_s).epsilon(1e-12));
  // A lockstep jitter of 0.1 (straggler.h): the ring's kernels run at its slowest GPU's pace,
  // 1 + 0.1 x E[max of 4 normals]; not the kernels' own (mean) time, nor all_gather's one
  // kernel a layer.
  CostParams jittered = cost;
  jittered.lockstep_jitter = 0.1;
  CostModel cj(m, f, jittered);
  const double s = 1 + 0.1 * 1.0293754;
  const Prediction j = cj.predict(job, ch);
  CHECK(j.step_time_s == doctest::Approx(4 * comp * s + 4 * 2.5 * comp * s + 3 * acc + x_acc).epsilon(1e-6));
  CHECK(j.attention_compute_s == doctest::Approx(p.attention_compute_s));
  // Reported as waiting (exposed), not as compute or free-communication time.
  CHECK(j.lockstep_wait_s == doctest::Approx(j.step_time_s - p.step_time_s));
  CHECK(j.exposed_comm_s == doctest::Approx(p.exposed_comm_s + j.lockstep_wait_s));
  CHECK(p.lockstep_wait_s == 0);
  PlanChoice ag = ch;
  ag.strategy = Strategy::kAllGatherCp;
  REQUIRE(cm.why_invalid(job, ag) == "");
  CHECK(cj.predict(job, ag).step_time_s == doctest::Approx(cm.predict(job, ag).step_time_s));
}

TEST_CASE("a2a (Ulysses) attention time, by hand: the whole sequence on h / P heads, each all-to-all's copies") {
  // 4 GPUs on one switch, non-causal, c = 4096 tokens per rank, 8 heads of 128, forward.
  const Topology t = round_cluster(4, 1);
  const Fabric f(t, 4);
  CostParams cost = CostParams::from_topology(t);
  cost.step_sync_s = 0;
  CostModel cm(mha_model(), f, cost);
  const Job job = forward_attention_job(4, 4096, false);
  PlanChoice ch = ring_over(4, LoadBalance::kContiguous);
  ch.strategy = Strategy::kUlysses;
  REQUIRE(cm.why_invalid(job, ch) == "");
  const Prediction p = cm.predict(job, ch);
  const double c = 4096, n = 4 * c;
  const double comp = 4 * n * n * 128 * 8 / 4 / (100e12 * 0.5);  // 2 heads of the whole sequence
  // The Q,K,V all-to-all in, the output's back: each packed and unpacked at 2 TB/s, read and
  // written once. Neither copy is communication.
  const double qkv = c * (8 + 2 * 8) * 128 * 2, out = c * 8 * 128 * 2;
  const double copies = 2 * (2 * qkv / 2e12) + 2 * (2 * out / 2e12);
  CHECK(p.exposed_comm_s > 0);
  CHECK(p.step_time_s - p.exposed_comm_s == doctest::Approx(comp + copies).epsilon(1e-9));
}

TEST_CASE("causal: zigzag and striped balance the ring, contiguous waits for the busiest") {
  const Topology t = round_cluster(8, 1);
  const Fabric f(t, 8);
  CostModel cm(mha_model(), f, CostParams::from_topology(t));
  Job job;
  job.gpus = 8;
  job.seq_len = 8 * 8192;
  job.workload = Workload::kAttention;
  PlanChoice ch;
  ch.cp = 8;
  ch.dp = 1;
  ch.order = node_major_order(8);
  double time[3];
  for (LoadBalance lb : {LoadBalance::kContiguous, LoadBalance::kStriped, LoadBalance::kZigzag}) {
    ch.load_balance = lb;
    time[static_cast<int>(lb)] = cm.predict(job, ch).step_time_s;
  }
  CHECK(time[1] < 0.6 * time[0]);
  CHECK(time[2] < 0.6 * time[0]);
}

// One device per node on a torus of `dims`; links of `bytes_per_s` per direction.
Topology torus(std::array<int, 3> dims, double bytes_per_s) {
  Topology t = round_cluster(1, dims[0] * dims[1] * dims[2]);
  t.intra.kind = IntraKind::kNone;
  t.inter = InterNode{};
  t.inter.kind = InterKind::kTorus;
  t.inter.torus_dims = dims;
  t.inter.torus_link_bytes_per_s = bytes_per_s;
  t.inter.latency_s = 1e-6;
  return t;
}

int total_route_links(const Fabric& f, const std::vector<int>& order, int cp) {
  int n = 0;
  for (const Flow& fl : ring_step_flows(order, cp, false, 1)) n += f.route(fl.src, fl.dst).size();
  return n;
}

TEST_CASE("GQA sends fewer bytes: bidirectional halves the steps on point-to-point links") {
  // A ring of 8 torus links, transfer bound so the schedule shows.
  const Topology t = torus({8, 1, 1}, 1e9);
  const Fabric f(t, 8);
  CostModel cm(mha_model(), f, CostParams::from_topology(t));
  const Job job = forward_attention_job(8, 4096, false);
  PlanChoice ch = ring_over(8, LoadBalance::kContiguous);
  const double flat = cm.predict(job, ch).step_time_s;
  ch.schedule = Schedule::kBidirectional;
  const double bidi = cm.predict(job, ch).step_time_s;
  // Flat: 7 transfers in a row; bidirectional: 4 steps, +x and -x links both busy.
  CHECK(bidi < 0.65 * flat);
  // On a switch both directions leave through the same port: no gain there.
  const Topology sw = round_cluster(8, 1);
  Topology slow = sw;
  slow.intra.bytes_per_s = 1e9;
  const Fabric fs(slow, 8);
  CostModel cs(mha_model(), fs, CostParams::from_topology(slow));
  const double sw_bidi = cs.predict(job, ch).step_time_s;
  ch.schedule = Schedule::kFlat;
  CHECK(sw_bidi >= 0.95 * cs.predict(job, ch).step_time_s);
  ModelSpec gqa = mha_model();
  gqa.kv_heads = 2;
  CostModel cg(gqa, f, CostParams::from_topology(t));
  CHECK(cg.predict(job, ch).step_time_s < 0.3 * flat);
}

TEST_CASE("the order search shortens rings on a torus") {
  // 4x4 torus, rings of 8: node-major wraps rows with two-hop routes.
  const Topology t = torus({4, 4, 1}, 50e9);
  const Fabric f(t, 16);
  const CostParams cost = CostParams::from_topology(t);
  const std::vector<int> nm = node_major_order(16);
  const std::vector<int> s = search_order(f, cost, 8, false, nm);
  CHECK_NOTHROW(check_order(s, 16, "x"));
  CHECK(max_link_load_s_per_byte(f, cost, s, 8, false) <= max_link_load_s_per_byte(f, cost, nm, 8, false));
  CHECK(total_route_links(f, s, 8) < total_route_links(f, nm, 8));
  CHECK(total_route_links(f, s, 8) == 16);  // every hop one link: Hamiltonian cycles
}

TEST_CASE("rings that share a NIC slow each other down") {
  // Not rail-optimised, 2:1 oversubscribed leaves: the search's link loads see it.
  const Topology t = round_cluster(4, 4, false, 2.0);
  const Fabric f(t, 16);
  const CostParams cost = CostParams::from_topology(t);
  // Rings of 4 across the 4 nodes (GPU l of every node): every NIC carries one flow out.
  std::vector<int> across;
  for (int l = 0; l < 4; ++l)
    for (int n = 0; n < 4; ++n) across.push_back(n * 4 + l);
  const double across_load = max_link_load_s_per_byte(f, cost, across, 4, false);
  const double inside_load = max_link_load_s_per_byte(f, cost, node_major_order(16), 4, false);
  CHECK(inside_load < across_load);
  // From the bad order the swaps move GPUs back towards their node's ring.
  const std::vector<int> searched = search_order(f, cost, 4, false, across);
  CHECK_NOTHROW(check_order(searched, 16, "x"));
  CHECK(max_link_load_s_per_byte(f, cost, searched, 4, false) <= across_load);
  auto crossings = [&](const std::vector<int>& o) {
    int n = 0;
    for (const Flow& fl : ring_step_flows(o, 4, false, 1)) n += f.node_of(fl.src) != f.node_of(fl.dst);
    return n;
  };
  CHECK(crossings(searched) < crossings(across));
  // From the better regular order (what the planner starts from) it keeps the optimum.
  const std::vector<int> kept = search_order(f, cost, 4, false, node_major_order(16));
  CHECK(max_link_load_s_per_byte(f, cost, kept, 4, false) == doctest::Approx(inside_load));
}

TEST_CASE("the order search on 2,048 GPUs: a bounded search, a valid order, never worse than its start") {
  // Past 1,448 GPUs each position tries only its next swap partners, and the search stops
  // after a budget of re-routed edges (search_order): every pair at 16,384 GPUs took over
  // ten minutes a pass. Without the bound this case tries 2.1 million pairs a pass.
  const Topology t = round_cluster(8, 256, false, 2.0);
  const Fabric f(t, 2048);
  const CostParams cost = CostParams::from_topology(t);
  std::vector<int> o = node_major_order(2048);
  std::mt19937 rng(5);
  std::shuffle(o.begin(), o.end(), rng);
  const double start = max_link_load_s_per_byte(f, cost, o, 16, false);
  const std::vector<int> searched = search_order(f, cost, 16, false, o);
  CHECK_NOTHROW(check_order(searched, 2048, "x"));
  CHECK(max_link_load_s_per_byte(f, cost, searched, 16, false) <= start);
  auto crossings = [&](const std::vector<int>& order) {  // ring hops between nodes
    int n = 0;
    for (const Flow& fl : ring_step_flows(order, 16, false, 1)) n += f.node_of(fl.src) != f.node_of(fl.dst);
    return n;
  };
  CHECK(crossings(searched) < crossings(o));
}

// The search scores a move from per-class load histograms, updated edge by edge: its
// scores must be the direct ones (each link's flows over its bandwidth: the largest, then
// the sum), or it keeps swaps that make the order worse and misses ones that improve it.
TEST_CASE("the order search's link loads are the direct count: it ends where no swap improves") {
  auto direct = [](const Fabric& f, const CostParams& cost, const std::vector<int>& o, int cp, bool both) {
    std::vector<double> flows(f.links().size(), 0);
    for (const Flow& fl : ring_step_flows(o, cp, both, 1))
      for (int l : f.route(fl.src, fl.dst)) flows[static_cast<size_t>(l)] += 1;
    std::pair<double, double> score{0, 0};
    for (size_t l = 0; l < flows.size(); ++l) {
      const double s = flows[l] / cost.link_bytes_per_s(f.links()[l]);
      score.first = std::max(score.first, s);
      score.second += s;
    }
    return score;
  };
  const Topology clusters[] = {round_cluster(4, 8, false, 2.0), round_cluster(8, 4, false, 4.0), torus({4, 4, 2}, 50e9)};
  std::mt19937 rng(11);
  for (const Topology& t : clusters) {
    const Fabric f(t, 32);
    const CostParams cost = CostParams::from_topology(t);
    for (int cp : {4, 8, 16}) {
      for (bool both : {false, true}) {
        CAPTURE(t.name);
        CAPTURE(cp);
        CAPTURE(both);
        std::vector<int> o = node_major_order(32);
        std::shuffle(o.begin(), o.end(), rng);
        const auto start = direct(f, cost, o, cp, both);
        CHECK(max_link_load_s_per_byte(f, cost, o, cp, both) == doctest::Approx(start.first).epsilon(1e-12));
        o = search_order(f, cost, cp, both, o);
        CHECK_NOTHROW(check_order(o, 32, "x"));
        const auto end = direct(f, cost, o, cp, both);
        CHECK(max_link_load_s_per_byte(f, cost, o, cp, both) == doctest::Approx(end.first).epsilon(1e-12));
        CHECK(end.first <= start.first * (1 + 1e-12));
        int improving = 0;  // swaps that would lower (max, sum): none where the search ended
        for (int a = 0; a < 32; ++a) {
          for (int b = a + 1; b < 32; ++b) {
            std::swap(o[a], o[b]);
            const auto s = direct(f, cost, o, cp, both);
            std::swap(o[a], o[b]);
            improving += s.first < end.first * (1 - 1e-9) ||
                         (s.first <= end.first * (1 + 1e-9) && s.second < end.second * (1 - 1e-9));
          }
        }
        CHECK(improving == 0);
      }
    }
  }
}

TEST_CASE("snake order keeps node-crossing hops on one rail") {
  const Topology t = round_cluster(8, 4);
  const Fabric f(t, 32);
  const std::vector<int> s = snake_order(f);
  CHECK(s[7] == 7);
  CHECK(s[8] == 15);
  CHECK(s[15] == 8);
  CHECK(s[16] == 16);
  // Every node-crossing hop of the 32-ring (incl. the wrap) joins GPUs of one local index.
  for (int i = 0; i < 32; ++i) {
    const int a = s[i], b = s[(i + 1) % 32];
    if (f.node_of(a) != f.node_of(b)) CHECK(f.local_of(a) == f.local_of(b));
  }
}

TEST_CASE("striped and zigzag causal: a later position's block merges into a slice, copied back") {
  // ring-flash-attention's forward: at every later step position 0 holds a later position's
  // block and merges into a slice it writes back: striped runs q[1:] against k[:-1] (the
  // whole output, less a row), zigzag its second half of the queries (half the output). The
  // lockstep step waits for the slowest merge. Contiguous merges whole blocks.
  const TokenLayout striped{LoadBalance::kStriped, 64, 4}, zigzag{LoadBalance::kZigzag, 64, 4};
  auto is = [](ForwardMerge m, double share, bool sliced) { return m.share == share && m.sliced == sliced; };
  CHECK(is(forward_merge(striped, true, 0, 1), 1, true));
  CHECK(is(forward_merge(striped, true, 2, 3), 1, true));
  CHECK(is(forward_merge(striped, true, 1, 0), 1, false));
  CHECK(is(forward_merge(striped, true, 2, 2), 1, false));
  CHECK(is(forward_merge(striped, false, 0, 1), 1, false));
  CHECK(is(forward_merge(zigzag, true, 0, 1), 0.5, true));
  CHECK(is(forward_merge(zigzag, true, 1, 0), 1, false));
  CHECK(is(forward_merge(TokenLayout{LoadBalance::kContiguous, 64, 4}, true, 0, 1), 1, false));

  Topology t = round_cluster(4, 1);
  t.gpu.attention.merge_bytes = 34;
  Topology sliced = t;
  sliced.gpu.attention.slice_merge_bytes = 8;
  const Fabric f(t, 4);
  const ModelSpec m = mha_model();
  const Job job = forward_attention_job(4, 4096, true);
  PlanChoice ch = ring_over(4, LoadBalance::kStriped);
  CostModel plain(m, f, CostParams::from_topology(t));
  CostModel with_slice(m, f, CostParams::from_topology(sliced));
  const double elements = 4096.0 * 8 * 128;  // c·h·d
  // Three later steps, each 8 more bytes per element over HBM (transfers hide: 1.7 ms
  // steps against 0.17 ms K,V blocks).
  CHECK(with_slice.predict(job, ch).step_time_s - plain.predict(job, ch).step_time_s ==
        doctest::Approx(3 * elements * 8 / 2e12).epsilon(1e-6).scale(0));
  // Zigzag: half the output sliced, 0.5 x (34 + 8) bytes, is less than a whole merge in
  // place; at 40 bytes for the slice, 0.5 x 74 = 37 is 3 more than 34, at each later step.
  ch.load_balance = LoadBalance::kZigzag;
  CHECK(with_slice.predict(job, ch).step_time_s == doctest::Approx(plain.predict(job, ch).step_time_s));
  Topology costly = t;
  costly.gpu.attention.slice_merge_bytes = 40;
  CostModel with_costly_slice(m, f, CostParams::from_topology(costly));
  CHECK(with_costly_slice.predict(job, ch).step_time_s - plain.predict(job, ch).step_time_s ==
        doctest::Approx(3 * elements * 3 / 2e12).epsilon(1e-6).scale(0));
}

TEST_CASE("a sliding window: a ring step with no block in the window merges nothing") {
  // Zigzag under a window: at most later steps no position holds a block any of its queries
  // sees; the replay skips those blocks and their merges (ring_pass.cc attend), and the
  // planner charges a merge only at the steps that compute.
  Topology t = round_cluster(8, 1);
  t.gpu.attention.merge_bytes = 34;
  t.gpu.attention.slice_merge_bytes = 34;  // half the output into a slice costs a whole merge
  Topology no_merge = t;
  no_merge.gpu.attention.merge_bytes = 0;
  const Fabric f(t, 8);
  ModelSpec m = mha_model();
  m.sliding_window = 1024;
  const Job job = forward_attention_job(8, 4096, true);
  const PlanChoice ch = ring_over(8, LoadBalance::kZigzag);
  const RingAttentionWork w = ring_attention_work(TokenLayout{LoadBalance::kZigzag, job.seq_len, 8}, true, m.heads,
                                                  m.head_dim, AttentionTiles{ch.block_q, ch.block_kv}, m.sliding_window);
  const int computing = static_cast<int>(std::count_if(w.step_executed.begin(), w.step_executed.end(),
                                                       [](double x) { return x > 0; }));
  REQUIRE(computing > 0);
  REQUIRE(computing < w.steps - 1);  // some steps only pass K,V on
  // The attention's compute (the step's time hides a merge behind a transfer where it can).
  const double merged = CostModel(m, f, CostParams::from_topology(t)).predict(job, ch).attention_compute_s -
                        CostModel(m, f, CostParams::from_topology(no_merge)).predict(job, ch).attention_compute_s;
  const double elements = 4096.0 * m.heads * m.head_dim;
  CHECK(merged == doctest::Approx(computing * elements * 34 / 2e12).epsilon(1e-6).scale(0));
}

TEST_CASE("GEMM size curve: W / (W + half) of the large-GEMM efficiency where weights are regathered, flat elsewhere") {
  CostParams p;
  p.peak_flops = 1e15;
  p.gemm_efficiency = 0.6;
  p.gemm_half_flops = 1e12;
  CHECK(p.gemm_flops_per_s(1e12, true) == doctest::Approx(0.3e15));  // half the limit at W = half
  CHECK(p.gemm_flops_per_s(3e12, true) == doctest::Approx(0.45e15));  // 0.6 x 3/4
  CHECK(p.gemm_flops_per_s(1e12, false) == doctest::Approx(0.6e15));  // whole weights: the limit
  // FSDP and HSDP regather every micro-step; ZeRO-1/2 and DDP keep whole weights; one GPU
  // gathers nothing.
  CHECK(regathers_weights(Sharding::kFsdp, 8));
  CHECK(regathers_weights(Sharding::kHsdp, 16));
  CHECK_FALSE(regathers_weights(Sharding::kFsdp, 1));
  for (Sharding s : {Sharding::kZero2, Sharding::kZero1, Sharding::kDdp}) CHECK_FALSE(regathers_weights(s, 8));
  // A measured profile replaces the curve by its flat rate (the executor's own GEMMs).
  Profile measured;
  measured.peak_flops = 1e15;
  measured.gemm_efficiency = 0.5;
  apply_profile(measured, p);
  CHECK(p.gemm_half_flops == 0);
  CHECK(p.gemm_flops_per_s(1, true) == doctest::Approx(0.5e15));

  // The whole step: two stacked sequences per micro-step run bigger GEMMs, so their linear
  // compute per token is less than one sequence's (the shipped A100 has the curve).
  const Topology topo = load_topology("dgx-a100-ib");
  REQUIRE(topo.gpu.gemm_half_flops > 0);
  const ModelSpec m = load_model("llama2-7b");
  const Fabric fabric(topo, 8);
  Planner planner(m, fabric, CostParams::from_topology(topo));
  Job job;
  job.model = m.name;
  job.topology = topo.name;
  job.gpus = 8;
  job.seq_len = 4096;
  SearchPins pins;
  pins.tp = 1;
  pins.cp = 1;
  pins.pp = 1;
  pins.sharding = Sharding::kFsdp;
  pins.checkpointing = Checkpointing::kFull;
  pins.micro_batch = 1;
  const Plan one = planner.best_plan(job, pins);
  pins.micro_batch = 2;
  const Plan two = planner.best_plan(job, pins);
  // The same batch per step either way: linear time per step compares per token.
  const double per_token_1 = one.predicted.linear_compute_s;
  const double per_token_2 = two.predicted.linear_compute_s;
  const double W1 = 4096.0 * linear_flops_per_token(m).layer();  // one sequence's layer GEMMs
  // The curve's ratio between W1 and 2 W1, up to the head and the elementwise work, which
  // do not change per token.
  const double expected = (2 * W1 / (2 * W1 + 1e12)) / (W1 / (W1 + 1e12));
  CHECK(per_token_1 / per_token_2 > 1.0);
  CHECK(per_token_1 / per_token_2 < expected * 1.01);
  // ZeRO-1 keeps whole weights: its GEMMs run at the limit whatever the micro-step, and
  // faster per token than FSDP's one-sequence micro-steps.
  pins.sharding = Sharding::kZero1;
  pins.micro_batch = 1;
  const Plan zero1_one = planner.best_plan(job, pins);
  pins.micro_batch = 2;
  const Plan zero1_two = planner.best_plan(job, pins);
  CHECK(zero1_one.predicted.linear_compute_s == doctest::Approx(zero1_two.predicted.linear_compute_s).epsilon(1e-3).scale(0));
  CHECK(zero1_one.predicted.linear_compute_s < per_token_1);
}
