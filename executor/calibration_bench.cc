#include "executor/calibration_bench.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <Eigen/Core>

#include "planner/attention_work.h"
#include "planner/kernel_efficiency.h"
#include "planner/stats.h"

namespace rm::exec {
namespace {

constexpr uint64_t kSeed = 2024;
constexpr int kTagBase = 7100;  // clear of the ring loop's tags: calibration runs alone

struct Clock {
  double origin = MPI_Wtime();
  double since() const { return MPI_Wtime() - origin; }
};

std::vector<int64_t> iota_tokens(int64_t c) {
  std::vector<int64_t> t(static_cast<size_t>(c));
  std::iota(t.begin(), t.end(), 0);
  return t;
}

// Ranks 0 .. size-1: the calibration's one ring (Backend::connect's group).
std::vector<int> world_group(int size) {
  std::vector<int> g(static_cast<size_t>(size));
  std::iota(g.begin(), g.end(), 0);
  return g;
}

struct Context {
  Context(std::string b, const CalibrationGrid& g, const std::function<void(const std::string&)>& p)
      : backend(std::move(b)), grid(g), progress(p) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  std::string backend;
  const CalibrationGrid& grid;
  const std::function<void(const std::string&)>& progress;
  int rank = 0, size = 1;
  Clock clock;
  int point = 0;  // benchmark point: the records' `iteration`, so points never mix
  std::vector<Measurement> out;

  void say(const std::string& s) const {
    if (rank == 0 && progress) progress(s);
  }
  Measurement record(const std::string& kind) const {
    Measurement m;
    m.rank = rank;
    m.position = rank;
    m.iteration = point;
    m.op = static_cast<int>(out.size());
    m.kind = kind;
    return m;
  }
  // Median seconds of `repeats` calls of f (warmed up by the caller), every rank starting
  // together; `now` is the clock that sees f's work finished (a backend's, for kernels).
  double median_seconds(const std::function<void()>& f, const std::function<double()>& now = MPI_Wtime) const {
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> t;
    for (int r = 0; r < grid.repeats; ++r) {
      const double t0 = now();
      f();
      t.push_back(now() - t0);
    }
    return median(t);
  }
  // Appends a point's record of `seconds`, stamped now, and moves on to the next point.
  void add_point(Measurement rec, double seconds) {
    rec.start = clock.since();
    rec.seconds = seconds;
    out.push_back(rec);
    ++point;
  }
};

// One kernel point: median seconds of `repeats` calls after a warm-up.
struct KernelPoint {
  int64_t c;
  int bq, bkv, d;
  bool causal, backward;
};

// A backend set up for kernel point p: its own K,V in buffer 0, `arriving` more K,V
// buffers after it (blocks in flight), then the dK,dV buffer; the forward run once (the lse
// a backward needs, and a warm-up) and, for a backward point, switched to backward.
struct KernelBench {
  std::unique_ptr<Backend> be;
  std::vector<int64_t> tokens;
  bool backward = false;
  int dkv = 0;
  // One kernel call at the point, finished.
  void call() {
    if (backward)
      be->attention_backward(0, tokens, dkv);
    else
      be->attention_forward(0, tokens);
    be->synchronize();
  }
};

KernelBench kernel_bench(const Context& ctx, const KernelPoint& p, int arriving) {
  KernelBench k{make_backend(ctx.backend), iota_tokens(p.c), p.backward, 1 + arriving};
  k.be->setup({p.c, p.d, ctx.grid.heads, ctx.grid.kv_heads, p.bq, p.bkv, p.causal}, k.tokens, kSeed);
  k.be->alloc(0, BufferRole::kKv);
  k.be->load_own_kv(0);
  for (int b = 1; b <= arriving; ++b) k.be->alloc(b, BufferRole::kKv);
  k.be->alloc(k.dkv, BufferRole::kDkv);
  k.be->begin_forward();
  k.be->attention_forward(0, k.tokens);
  if (p.backward) k.be->begin_backward();
  return k;
}

// Median seconds of one kernel call at p; `ran` gets the tiles the backend really ran.
double time_kernel(Context& ctx, const KernelPoint& p, AttentionTiles* ran) {
  KernelBench k = kernel_bench(ctx, p, 0);
  *ran = k.be->tiles_run(p.backward);
  if (p.backward)
    k.call();  // warm-up (the forward's was kernel_bench's)
  else
    k.be->synchronize();
  return ctx.median_seconds([&] { k.call(); }, [&] { return k.be->now(); });
}

// The record of one kernel call at point p that ran tiles `ran` (the backend may round the
// requested ones; start and seconds left to the caller).
Measurement kernel_record(const Context& ctx, const KernelPoint& p, AttentionTiles ran) {
  Measurement m = ctx.record(p.backward ? "attention_backward" : "attention_forward");
  const TokenLayout own{LoadBalance::kContiguous, p.c, 1};
  const PairFlops f = attention_pair_flops(own, 0, 0, p.causal, ctx.grid.heads, p.d, ran);
  m.backward = p.backward;
  m.block_q = ran.block_q;
  m.block_kv = ran.block_kv;
  m.head_dim = p.d;
  // The backward record carries forward FLOPs x kBackwardFlopsFactor like the ring loop's
  // backward ops (attention_work.h); calibration divides by the same factor.
  m.flops = f.executed * (p.backward ? kBackwardFlopsFactor : 1.0);
  // Useful FLOPs count the backward as 2x the forward, as the schedule's ops and MFU do.
  m.useful_flops = f.useful * (p.backward ? kLinearBackwardFactor : 1.0);
  return m;
}

void kernel_grid(Context& ctx) {
  std::vector<KernelPoint> points;
  for (int64_t c : ctx.grid.tokens)
    for (int d : ctx.grid.head_dims)
      for (auto [bq, bkv] : ctx.grid.tiles)
        for (bool causal : {false, true})
          for (bool backward : {false, true}) points.push_back({c, bq, bkv, d, causal, backward});
  int n = 0;
  for (const KernelPoint& p : points) {
    AttentionTiles ran;
    const double s = time_kernel(ctx, p, &ran);
    const Measurement m = kernel_record(ctx, p, ran);
    ctx.add_point(m, s);
    char line[160];
    std::snprintf(line, sizeof line, "kernel %d/%zu: c=%lld %dx%d d=%d %s %s: %.3f ms, %.2f GFLOP/s",
                  ++n, points.size(), static_cast<long long>(p.c), p.bq, p.bkv, p.d,
                  p.causal ? "causal" : "full", p.backward ? "bwd" : "fwd", s * 1e3,
                  m.flops / s * 1e-9);
    ctx.say(line);
  }
}

void gemm_grid(Context& ctx) {
  if (ctx.backend != "cpu") {
    ctx.say("gemm: skipped (timed for the cpu backend only)");
    return;
  }
  Eigen::setNbThreads(1);
  int n = 0;
  for (const auto& [m, k, nn] : ctx.grid.gemms) {
    Eigen::MatrixXf a = Eigen::MatrixXf::Random(m, k), b = Eigen::MatrixXf::Random(k, nn), c(m, nn);
    auto once = [&] { c.noalias() = a * b; };
    once();  // warm-up
    const double s = ctx.median_seconds(once);
    Measurement rec = ctx.record("gemm");
    rec.flops = 2.0 * m * k * nn;
    rec.useful_flops = rec.flops;
    ctx.add_point(rec, s);
    char line[128];
    std::snprintf(line, sizeof line, "gemm %d/%zu: %lldx%lldx%lld: %.3f ms, %.2f GFLOP/s", ++n,
                  ctx.grid.gemms.size(), static_cast<long long>(m), static_cast<long long>(k),
                  static_cast<long long>(nn), s * 1e3, rec.flops / s * 1e-9);
    ctx.say(line);
  }
}

// Memory-bound work (cpu backend only, as the GEMMs): a copy (y = x: read once, written
// once, as an all-to-all's pack or unpack) and an accumulate (y += x: read both, write one,
// as a dK,dV add) of fp32 buffers larger than a CPU's caches (a GPU's elementwise work
// streams through HBM; runs move blocks of this size), every rank at once.
// "elementwise" records with the bytes each moves, which the fit turns into
// hbm_bytes_per_s as it does a run's elementwise and a2a_pack / a2a_unpack records.
void memory_grid(Context& ctx) {
  if (ctx.backend != "cpu") {
    ctx.say("memory: skipped (timed for the cpu backend only)");
    return;
  }
  int n = 0;
  for (double bytes : ctx.grid.copy_bytes) {
    const auto len = static_cast<Eigen::Index>(bytes / sizeof(float));
    Eigen::VectorXf x = Eigen::VectorXf::Random(len), y = Eigen::VectorXf::Zero(len);
    for (const bool add : {false, true}) {
      auto once = [&] {
        if (add) y += x;
        else y = x;
      };
      once();  // warm-up (and first touch)
      const double s = ctx.median_seconds(once);
      Measurement rec = ctx.record("elementwise");
      rec.bytes = (add ? 3.0 : 2.0) * static_cast<double>(len) * sizeof(float);
      ctx.add_point(rec, s);
      char line[128];
      std::snprintf(line, sizeof line, "memory %d/%zu: %s of %.1f MiB: %.3f ms, %.2f GB/s", ++n,
                    2 * ctx.grid.copy_bytes.size(), add ? "accumulate" : "copy", bytes / (1 << 20), s * 1e3,
                    rec.bytes / s * 1e-9);
      ctx.say(line);
    }
  }
}

// A backend whose K,V buffers hold `bytes`: messages are byte ranges of them.
std::unique_ptr<Backend> exchange_backend(const std::string& name, double bytes) {
  auto be = make_backend(name);
  const int d = 64;
  // K|V of one kv head: 2 * c * d elements of at least 2 bytes each.
  const int64_t c = std::max<int64_t>(1, static_cast<int64_t>(bytes / (2.0 * d * 2)) + 1);
  be->setup({c, d, 1, 1, 64, 64, false}, iota_tokens(c), kSeed);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  be->connect(world_group(size));  // one ring of every rank
  be->alloc(0, BufferRole::kKv);
  be->alloc(1, BufferRole::kKv);
  return be;
}

// One ring exchange of `bytes`: post receive from rank-1 and send to rank+1, wait both.
double exchange(Context& ctx, Backend& be, double bytes, int tag) {
  const int next = (ctx.rank + 1) % ctx.size, prev = (ctx.rank + ctx.size - 1) % ctx.size;
  const double t0 = be.now();
  const int r = be.irecv(1, 0, static_cast<size_t>(bytes), prev, tag);
  const int s = be.isend(0, 0, static_cast<size_t>(bytes), next, tag);
  be.wait(r);
  be.wait(s);
  return be.now() - t0;
}

void exchange_grid(Context& ctx) {
  if (ctx.size < 2) {
    ctx.say("ring exchange: skipped (one rank; run with --np 2 or more to calibrate links)");
    return;
  }
  const double max_bytes = *std::max_element(ctx.grid.message_bytes.begin(), ctx.grid.message_bytes.end());
  auto be = exchange_backend(ctx.backend, max_bytes);
  const int prev = (ctx.rank + ctx.size - 1) % ctx.size;
  int n = 0;
  for (double bytes : ctx.grid.message_bytes) {
    exchange(ctx, *be, bytes, kTagBase);  // warm-up
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<double> t;
    for (int r = 0; r < ctx.grid.repeats; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      t.push_back(exchange(ctx, *be, bytes, kTagBase + 1 + r));
    }
    Measurement m = ctx.record("recv");
    m.bytes = bytes;
    m.peer = prev;
    m.start = ctx.clock.since();
    m.seconds = median(t);
    ctx.out.push_back(m);
    ++ctx.point;
    char line[128];
    std::snprintf(line, sizeof line, "ring exchange %d/%zu: %.0f bytes: %.1f us, %.2f GB/s", ++n,
                  ctx.grid.message_bytes.size(), bytes, m.seconds * 1e6, bytes / m.seconds * 1e-9);
    ctx.say(line);
  }
}

// Ring steps as `run` makes them: ONE backend posts the exchange of its K,V block (send to
// rank+1, receive the next block from rank-1), runs the kernel on the block it holds, then
// waits. The cpu backend moves its own transfers between kernel tiles (MPI_Testsome), so the
// kernel's slowdown and what is left in the wait are the ones a run sees. One point per
// grid block size c (tiles 64x64, the grid's middle head dim), forward and backward.
void overlap_points(Context& ctx) {
  if (ctx.size < 2) return;
  const int next = (ctx.rank + 1) % ctx.size, prev = (ctx.rank + ctx.size - 1) % ctx.size;
  const int d = ctx.grid.head_dims[ctx.grid.head_dims.size() / 2];
  for (int64_t c : ctx.grid.tokens) {
    for (bool backward : {false, true}) {
      const KernelPoint p{c, 64, 64, d, false, backward};
      KernelBench k = kernel_bench(ctx, p, 1);  // buffer 1: the next block, arriving
      Backend* be = k.be.get();
      be->connect(world_group(ctx.size));
      const size_t bytes = be->bytes_of(0);  // the block held: computed on and sent

      struct Rep { double post, kernel, wait; };
      std::vector<Rep> reps;
      std::vector<double> alone;
      for (int r = 0; r < ctx.grid.repeats + 1; ++r) {  // the first of each is the warm-up
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = ctx.clock.since();
        k.call();
        if (r > 0) alone.push_back(ctx.clock.since() - t0);
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = ctx.clock.since();
        const int rq = be->irecv(1, 0, bytes, prev, kTagBase + 50);
        const int sq = be->isend(0, 0, bytes, next, kTagBase + 50);
        const double t1 = ctx.clock.since();
        k.call();
        const double t2 = ctx.clock.since();
        be->wait(rq);
        be->wait(sq);
        const double t3 = ctx.clock.since();
        if (r > 0) reps.push_back({t0, t2 - t1, t3 - t2});
      }
      std::sort(reps.begin(), reps.end(),
                [](const Rep& a, const Rep& b) { return a.kernel + a.wait < b.kernel + b.wait; });
      const Rep& m = reps[reps.size() / 2];
      Measurement recv = ctx.record("recv");
      recv.bytes = static_cast<double>(bytes);
      recv.peer = prev;
      recv.start = m.post;
      recv.seconds = m.kernel + m.wait;
      ctx.out.push_back(recv);
      Measurement kr = kernel_record(ctx, p, be->tiles_run(backward));
      kr.start = m.post;
      kr.seconds = m.kernel;
      ctx.out.push_back(kr);
      Measurement w = ctx.record("wait");
      w.start = m.post + m.kernel;
      w.seconds = m.wait;
      ctx.out.push_back(w);
      ++ctx.point;
      char line[200];
      std::snprintf(line, sizeof line,
                    "overlap: c=%lld %s: kernel alone %.3f ms, with its %zu-byte K,V exchange in "
                    "flight %.3f ms, then waited %.3f ms",
                    static_cast<long long>(c), backward ? "bwd" : "fwd", median(alone) * 1e3, bytes,
                    m.kernel * 1e3, m.wait * 1e3);
      ctx.say(line);
    }
  }
}

}  // namespace

CalibrationGrid CalibrationGrid::standard(bool small, int hidden, int ffn_hidden, bool gpu) {
  CalibrationGrid g;
  if (gpu) {
    // executor/cuda/attention_kernels.cuh: tiles of 64 or 128, head dims 32, 64, 128.
    g.tokens = small ? std::vector<int64_t>{2048, 4096} : std::vector<int64_t>{2048, 4096, 8192};
    g.tiles = {{64, 64}, {128, 128}, {64, 128}};
    if (!small) g.tiles.push_back({128, 64});
    g.head_dims = small ? std::vector<int>{128} : std::vector<int>{64, 128};
    for (double b = 256; b <= 64 << 20; b *= small ? 16 : 4) g.message_bytes.push_back(b);
    g.copy_bytes = {16 << 20, 64 << 20};
    g.repeats = small ? 3 : 5;
  } else if (small) {
    g.tokens = {256, 512};
    g.tiles = {{16, 16}, {32, 32}, {64, 64}, {128, 128}, {32, 128}};
    g.head_dims = {64};
    g.message_bytes = {256, 4096, 65536, 1 << 20, 4 << 20, 16 << 20};
    g.copy_bytes = {16 << 20, 64 << 20};
    g.repeats = 3;
  } else {
    g.tokens = {256, 512, 1024};
    g.tiles = {{16, 16}, {32, 32}, {64, 64}, {128, 128}, {256, 256},
               {32, 128}, {128, 32}, {64, 256}, {256, 64}};
    g.head_dims = {32, 64, 128};
    for (double b = 256; b <= 64 << 20; b *= 4) g.message_bytes.push_back(b);
    g.copy_bytes = {16 << 20, 32 << 20, 64 << 20, 128 << 20};
    g.repeats = 5;
  }
  for (int64_t t : g.tokens) {
    g.gemms.push_back({t, hidden, 3 * hidden});  // QKV projection (MHA shape)
    g.gemms.push_back({t, hidden, hidden});      // output projection
    g.gemms.push_back({t, hidden, ffn_hidden});  // FFN up / gate
    g.gemms.push_back({t, ffn_hidden, hidden});  // FFN down
  }
  return g;
}

std::vector<Measurement> run_calibration_benchmarks(
    const std::string& backend_name, const CalibrationGrid& grid,
    const std::function<void(const std::string&)>& progress) {
  Context ctx(backend_name, grid, progress);
  MPI_Barrier(MPI_COMM_WORLD);
  ctx.clock = Clock{};
  kernel_grid(ctx);
  gemm_grid(ctx);
  memory_grid(ctx);
  exchange_grid(ctx);
  overlap_points(ctx);
  MPI_Barrier(MPI_COMM_WORLD);
  return std::move(ctx.out);
}

}  // namespace rm::exec
