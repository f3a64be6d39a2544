// Replay (replay.h): a matching table pairs the two sides of every transfer, one SimGrid
// actor per GPU walks its op list, and the run happens in a forked child that sends the
// figures back through a pipe.
#include "simulator/replay.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <simgrid/s4u.hpp>

#include "planner/input_error.h"
#include "simulator/platform.h"

namespace sg4 = simgrid::s4u;

namespace rm::sim {

namespace {

// --- What both replays share ------------------------------------------------------------

// How many of the model's layers the ops of each emitted layer stand for (replay.h):
// with E >= kMinEmittedLayers the middle layer m = E/2 - 1, in steady state, also stands
// for the L - E layers not emitted; the others count once, keeping their boundary effects.
// With fewer, each emitted layer stands for L/E.
class LayerWeights {
 public:
  explicit LayerWeights(const OpSchedule& s) : w_(std::max(1, s.layers_emitted), 1.0) {
    const int E = s.layers_emitted, L = E * s.layer_multiplier;
    if (L == E) return;
    if (E >= kMinEmittedLayers) {
      w_[E / 2 - 1] += L - E;
    } else {
      for (double& w : w_) w = s.layer_multiplier;
    }
  }
  // Ops outside the layers (embedding, head, optimizer) count once.
  double operator()(const Op& op) const { return op.layer >= 0 ? w_[op.layer] : 1.0; }

 private:
  std::vector<double> w_;
};

// A sum over ops, each weighted by the layers it stands for.
struct Weighted {
  double sum = 0;
  void add(const LayerWeights& w, const Op& op, double v) { sum += w(op) * v; }
};

// One side of a transfer is identified by (src, dst, tag); collectives live in their own
// tag space (their tag is a sequence number on the group, not unique per pair).
struct Key {
  int64_t pair;
  int64_t tag;
  bool operator==(const Key& o) const { return pair == o.pair && tag == o.tag; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    return std::hash<int64_t>()(k.pair * 0x9E3779B97F4A7C15LL ^ k.tag);
  }
};
Key p2p_key(int gpus, int src, int dst, int tag) {
  return {int64_t{src} * gpus + dst, int64_t{tag} * 2};
}
Key collective_key(int gpus, int src, int dst, int tag) {
  return {int64_t{src} * gpus + dst, int64_t{tag} * 2 + 1};
}

// A collective as NCCL's ring over its group: the member sends (D-1) shards to its
// successor and receives as many from its predecessor (replay.h).
struct RingNeighbours {
  int succ = -1, pred = -1, size = 1;
};
std::vector<std::vector<RingNeighbours>> collective_rings(const OpSchedule& s, int gpus) {
  std::vector<std::vector<RingNeighbours>> out(s.groups.size(), std::vector<RingNeighbours>(gpus));
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const auto& members = s.groups[g];
    const int D = static_cast<int>(members.size());
    for (int j = 0; j < D; ++j) {
      out[g][members[j]] = {members[(j + 1) % D], members[(j + D - 1) % D], D};
    }
  }
  return out;
}

double compute_seconds(const Op& op, const CostParams& costs) {
  return op.flops > 0 ? op.flops / (op.efficiency * costs.peak_flops) : 0;
}

// Peak of the alloc/free ops in program order (timing does not change it).
double peak_memory(const RankSchedule& rank, const OpSchedule& s) {
  std::vector<double> live(s.buffers.size(), 0);
  double now = 0, peak = 0;
  for (const Op& op : rank.ops) {
    if (op.kind == OpKind::kAlloc) {
      now += op.bytes - live[op.buffer];
      live[op.buffer] = op.bytes;
      peak = std::max(peak, now);
    } else if (op.kind == OpKind::kFree) {
      now -= live[op.buffer];
      live[op.buffer] = 0;
    }
  }
  return peak;
}

// --- Free communication: a direct walk, no SimGrid ---------------------------------------
// Every transfer completes the moment both sides posted it, collectives when the member
// and both ring neighbours posted. Ranks run until they wait for something not yet
// posted; a worklist resumes them. Also the schedule's deadlock check.

struct FreeWalk {
  const OpSchedule& s;
  const CostParams& costs;
  int G;
  LayerWeights weights;
  std::vector<std::vector<RingNeighbours>> rings;
  std::unordered_map<Key, int, KeyHash> half_posted;  // key -> transfer id
  std::vector<double> post_s;                         // first side's post time, then done time
  std::vector<char> done;
  std::vector<std::vector<int>> waiting;              // ranks blocked on a transfer

  struct Rank {
    size_t pc = 0;
    double clock = 0;
    Weighted elapsed;
    std::vector<std::array<int, 2>> reqs;  // transfer ids per request (-1: none)
    int blocked_on = -1;
  };
  std::vector<Rank> ranks;

  FreeWalk(const OpSchedule& sched, const CostParams& c)
      : s(sched), costs(c), G(static_cast<int>(sched.ranks.size())), weights(sched),
        rings(collective_rings(sched, G)),
        ranks(G) {}

  int post(const Key& k, double t, std::deque<int>& runnable) {
    auto [it, added] = half_posted.try_emplace(k, static_cast<int>(post_s.size()));
    if (added) {
      post_s.push_back(t);
      done.push_back(0);
      waiting.emplace_back();
      return it->second;
    }
    const int id = it->second;
    half_posted.erase(it);
    post_s[id] = std::max(post_s[id], t);
    done[id] = 1;
    for (int r : waiting[id]) runnable.push_back(r);
    waiting[id].clear();
    return id;
  }

  // Runs rank g until it blocks or ends.
  void advance(int g, std::deque<int>& runnable) {
    Rank& r = ranks[g];
    const auto& ops = s.ranks[g].ops;
    r.blocked_on = -1;
    while (r.pc < ops.size()) {
      const Op& op = ops[r.pc];
      const double t0 = r.clock;
      auto request = [&](int req) -> std::array<int, 2>& {
        if (req >= static_cast<int>(r.reqs.size())) r.reqs.resize(req + 1, {-1, -1});
        return r.reqs[req];
      };
      switch (op.kind) {
        case OpKind::kCompute: r.clock += compute_seconds(op, costs); break;
        case OpKind::kSend: request(op.request) = {post(p2p_key(G, g, op.peer, op.tag), r.clock, runnable), -1}; break;
        case OpKind::kRecv: request(op.request) = {post(p2p_key(G, op.peer, g, op.tag), r.clock, runnable), -1}; break;
        case OpKind::kCollective: {
          const RingNeighbours& n = rings[op.group][g];
          request(op.request) = {post(collective_key(G, g, n.succ, op.tag), r.clock, runnable),
                                 post(collective_key(G, n.pred, g, op.tag), r.clock, runnable)};
          break;
        }
        case OpKind::kWait: {
          for (int id : request(op.request)) {
            if (id < 0) continue;
            if (!done[id]) {
              waiting[id].push_back(g);
              r.blocked_on = id;
              return;
            }
            r.clock = std::max(r.clock, post_s[id]);
          }
          break;
        }
        case OpKind::kAlloc:
        case OpKind::kFree: break;
      }
      r.elapsed.add(weights, op, r.clock - t0);
      ++r.pc;
    }
  }

  void run() {
    std::deque<int> runnable;
    for (int g = 0; g < G; ++g) runnable.push_back(g);
    while (!runnable.empty()) {
      const int g = runnable.front();
      runnable.pop_front();
      advance(g, runnable);
    }
    for (int g = 0; g < G; ++g) {
      if (ranks[g].pc < s.ranks[g].ops.size()) {
        const Op& op = s.ranks[g].ops[ranks[g].pc];
        throw std::runtime_error("the op lists cannot complete: GPU " + std::to_string(g) +
                                 " waits forever at op " + std::to_string(ranks[g].pc) +
                                 " (request " + std::to_string(op.request) + ", layer " +
                                 std::to_string(op.layer) + ", step " + std::to_string(op.step) +
                                 "): a transfer whose other side is never posted");
      }
    }
  }

  double time_s() const {
    double t = 0;
    for (const Rank& r : ranks) t = std::max(t, r.elapsed.sum);
    return t;
  }
};

// --- The SimGrid replay -------------------------------------------------------------------

// Both sides of a transfer hold it. Each side posts its half (a put or a get) on the
// mailbox the first poster took from the pool; SimGrid starts the comm when the second
// half arrives, and each side waits for its own half. A mailbox holds one half-posted
// transfer at a time, so its first-come matching pairs exactly the two halves the table
// paired; the second poster returns it to the pool. (Host-to-host Comm::sendto_async
// would need no mailbox, but SimGrid 3.32 keeps all of those comms in one list and
// removes each from it by a linear scan: ~G² activities x O(G) at 1,024 GPUs.)
struct Transfer {
  int src = 0, dst = 0;
  double bytes = 0;
  const Op* op = nullptr;  // the first poster's op (trace names)
  sg4::Mailbox* mailbox = nullptr;
  void* received = nullptr;  // the get's payload slot (SimGrid writes it on completion)
  bool traced = false;
};

struct Half {
  std::shared_ptr<Transfer> t;
  sg4::CommPtr comm;  // this side's put or get
};

struct Request {
  Half a, b;                       // b: a collective's incoming flow
  double extra_latency_s = 0;      // a collective's further ring-step latencies
  double busy_at_post_s = 0;       // the GPU's compute seconds when it posted this
  int post_group = 0;              // compute ops run before it was posted (see kWait)
};

struct GpuState {
  Weighted elapsed, busy, exposed;
  bool finished = false;
};

// The child's figures that are not per GPU (a plain struct: it crosses the pipe as bytes).
struct Scalars {
  double time_s = 0, replayed_time_s = 0, wall_s = 0;
  int64_t activities = 0, ops = 0;
  int routes = 0;
};
struct ChildFigures {
  Scalars scalars;
  std::vector<GpuTimes> gpus;
};

class SimGridReplay {
 public:
  SimGridReplay(const OpSchedule& s, const Fabric& f, const CostParams& c, const ReplayOptions& o)
      : s_(s), fabric_(f), costs_(c), opt_(o), G_(f.gpus()), weights_(s), rings_(collective_rings(s, G_)),
        gpus_(G_), trace_(o.trace_title) {}

  ChildFigures run() {
    const auto wall0 = std::chrono::steady_clock::now();
    wall_last_ = wall0;
    int argc = 2;
    // SimGrid's informational lines (configuration changes) would clutter ringmaster's
    // output; its warnings and errors still show.
    char arg0[] = "ringmaster", arg1[] = "--log=root.thres:warning";
    char* argv[] = {arg0, arg1, nullptr};
    // Never destroyed: the child _exits after reporting, and tearing SimGrid down only
    // prints warnings about activities the actors left to the refcounts.
    auto* engine = new sg4::Engine(&argc, argv);
    configure_network_model();
    // Actors only walk op lists: small stacks keep 1,024 of them cheap.
    sg4::Engine::set_config("contexts/stack-size:256");
    Platform platform(fabric_, costs_);
    add_routes(platform);
    platform.seal();
    platform_ = &platform;
    for (int g = 0; g < G_; ++g) {
      sg4::Actor::create("gpu" + std::to_string(g), platform.host(g), [this, g] { gpu(g); });
    }
    engine->run();

    ChildFigures out;
    Scalars& sc = out.scalars;
    sc.replayed_time_s = sg4::Engine::get_clock();
    sc.routes = platform.routes();
    sc.activities = activities_;
    sc.ops = ops_;
    out.gpus.resize(G_);
    for (int g = 0; g < G_; ++g) {
      if (!gpus_[g].finished) {
        throw std::runtime_error("the simulation stopped with GPU " + std::to_string(g) +
                                 " still waiting: a transfer whose other side is never posted");
      }
      GpuTimes& t = out.gpus[g];
      t.end_s = gpus_[g].elapsed.sum;
      t.busy_s = gpus_[g].busy.sum;
      t.exposed_comm_s = gpus_[g].exposed.sum;
      sc.time_s = std::max(sc.time_s, t.end_s);
    }
    if (!opt_.trace_path.empty()) {
      trace_.set_metadata("layers", s_.note.empty() ? "all layers emitted" : s_.note);
      trace_.set_metadata("network_model", "CM02, latency and bandwidth factors 1, no cross traffic");
      trace_.write(opt_.trace_path);
    }
    sc.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return out;
  }

 private:
  const OpSchedule& s_;
  const Fabric& fabric_;
  const CostParams& costs_;
  const ReplayOptions& opt_;
  int G_;
  LayerWeights weights_;
  std::vector<std::vector<RingNeighbours>> rings_;
  std::vector<GpuState> gpus_;
  TraceWriter trace_;
  Platform* platform_ = nullptr;
  std::unordered_map<Key, std::shared_ptr<Transfer>, KeyHash> half_posted_;
  std::vector<sg4::Mailbox*> free_mailboxes_;
  int mailboxes_ = 0;
  int64_t activities_ = 0, ops_ = 0, ops_total_ = 0;
  std::chrono::steady_clock::time_point wall_last_;

  // Only the pairs the op lists use get a route (platform.h).
  void add_routes(Platform& p) {
    for (const RankSchedule& r : s_.ranks) {
      ops_total_ += static_cast<int64_t>(r.ops.size());
      for (const Op& op : r.ops) {
        if (op.kind == OpKind::kSend) p.add_route(r.gpu, op.peer);
        if (op.kind == OpKind::kCollective) p.add_route(r.gpu, rings_[op.group][r.gpu].succ);
      }
    }
  }

  // Posts GPU `self`'s half of the transfer src -> dst.
  Half post(const Key& k, int self, int src, int dst, double bytes, const Op& op) {
    // Creating a mailbox is a simcall, during which other actors run and may post the
    // other half: so first, before the table is read.
    if (free_mailboxes_.empty()) {
      free_mailboxes_.push_back(sg4::Mailbox::by_name(std::to_string(mailboxes_++)));
    }
    auto [it, added] = half_posted_.try_emplace(k);
    std::shared_ptr<Transfer> t;
    if (added) {
      it->second = std::make_shared<Transfer>();
      t = it->second;
      t->src = src;
      t->dst = dst;
      t->bytes = bytes;
      t->op = &op;
      t->mailbox = free_mailboxes_.back();
      free_mailboxes_.pop_back();
    } else {
      t = std::move(it->second);
      half_posted_.erase(it);
      if (std::abs(t->bytes - bytes) > 1e-6 * std::max(1.0, bytes)) {
        throw std::runtime_error("GPU " + std::to_string(src) + " -> " + std::to_string(dst) +
                                 ": the two sides of a transfer disagree on its size (" +
                                 std::to_string(t->bytes) + " and " + std::to_string(bytes) + " bytes)");
      }
      free_mailboxes_.push_back(t->mailbox);  // empty again once this half matches
      ++activities_;
    }
    Half h{t, nullptr};
    // A GPU's transfer to itself (a one-member collective) posts the put, then the get.
    if (src != dst ? self == src : added) {
      h.comm = t->mailbox->put_async(t.get(), static_cast<uint64_t>(std::llround(bytes)));
    } else {
      h.comm = t->mailbox->get_async<void>(&t->received);
    }
    return h;
  }

  void wait(const Half& h) {
    h.comm->wait();
    Transfer& t = *h.t;
    if (!opt_.trace_path.empty() && !t.traced) {
      t.traced = true;
      const double start = h.comm->get_start_time(), dur = h.comm->get_finish_time() - start;
      const bool coll = t.op->kind == OpKind::kCollective;
      const char* name = !coll ? "transfer"
                         : t.op->collective == CollectiveKind::kAllGather ? "all-gather"
                                                                          : "reduce-scatter";
      TraceEvent e;
      e.name = name;
      e.start_s = start;
      e.duration_s = dur;
      e.layer = t.op->layer;
      e.step = coll ? -1 : t.op->step;
      e.bytes = t.bytes;
      e.gpu = t.src;
      e.track = TraceTrack::kSend;
      e.peer = t.dst;
      trace_.add(e);
      e.gpu = t.dst;
      e.track = TraceTrack::kRecv;
      e.peer = t.src;
      trace_.add(e);
    }
  }

  void progress() {
    if ((++ops_ & 0xFFF) != 0 || !opt_.progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - wall_last_ < std::chrono::seconds(1)) return;
    wall_last_ = now;
    std::fprintf(stderr, "simulate: %3.0f%% of %lld ops, simulated clock %.3f s\n",
                 100.0 * ops_ / ops_total_, static_cast<long long>(ops_total_), sg4::Engine::get_clock());
  }

  static const char* compute_name(ComputeKind k) {
    switch (k) {
      case ComputeKind::kAttentionForward: return "attention_forward";
      case ComputeKind::kAttentionBackward: return "attention_backward";
      case ComputeKind::kAccumulate: return "accumulate";
      case ComputeKind::kGemm: return "gemm";
      case ComputeKind::kOptimizer: return "optimizer";
    }
    return "compute";
  }

  // One GPU's actor: its op list in order.
  void gpu(int g) {
    GpuState& st = gpus_[g];
    const auto& ops = s_.ranks[g].ops;
    std::vector<Request> reqs;
    int in_flight = 0;  // transfers posted and not yet waited for (interference)
    double busy_s = 0;  // compute seconds so far (unweighted)
    int computes = 0;   // compute ops run so far
    // Partial overlap (CostParams::transfer_overlap o < 1): the planner charges a ring step
    // c + x - o·min(c, x), i.e. max(c, x) + (1 - o)·min(c, x), where x is the step's
    // transfer and c the compute it overlaps. The replay already gives max(c, x), so each
    // wait adds (1 - o)·min(c, x) for its transfer, c being the compute run between its
    // post and the wait. Transfers posted together (no compute between: one step's sends
    // and receives) pay once, the largest of theirs: paid_by_group tracks what was paid.
    std::unordered_map<int, double> paid_by_group;
    auto request = [&](int id) -> Request& {
      if (id >= static_cast<int>(reqs.size())) reqs.resize(id + 1);
      return reqs[id];
    };
    for (const Op& op : ops) {
      const double t0 = sg4::Engine::get_clock();
      if (op.overhead_s > 0) {
        sg4::this_actor::sleep_for(op.overhead_s);
        ++activities_;
        st.exposed.add(weights_, op, op.overhead_s);
      }
      switch (op.kind) {
        case OpKind::kCompute: {
          if (op.flops <= 0) break;
          double flops = op.flops / op.efficiency;
          // The cost model slows ring-step compute beside a transfer (cost_params.h).
          const bool attention = op.compute == ComputeKind::kAttentionForward ||
                                 op.compute == ComputeKind::kAttentionBackward;
          if (attention && op.step > 0 && in_flight > 0) flops *= costs_.overlap_interference;
          const double start = sg4::Engine::get_clock();
          // Each host runs one actor and its ops in sequence, so a compute op never shares
          // the CPU: a sleep of flops / peak takes exactly as long as the exec would, at a
          // third of the cost in SimGrid 3.32 (an exec's activity bookkeeping and CPU
          // model update; the 512-GPU replay took half the time).
          sg4::this_actor::sleep_for(flops / costs_.peak_flops);
          ++activities_;
          const double dur = sg4::Engine::get_clock() - start;
          st.busy.add(weights_, op, dur);
          busy_s += dur;
          ++computes;
          if (!opt_.trace_path.empty()) {
            TraceEvent e;
            e.gpu = g;
            e.name = compute_name(op.compute);
            e.start_s = start;
            e.duration_s = dur;
            e.layer = op.layer;
            e.step = op.layer >= 0 && op.compute != ComputeKind::kGemm ? op.step : -1;
            e.flops = op.flops;
            trace_.add(e);
          }
          break;
        }
        case OpKind::kSend:
        case OpKind::kRecv: {
          const bool send = op.kind == OpKind::kSend;
          const int src = send ? g : op.peer, dst = send ? op.peer : g;
          Request& r = request(op.request);
          r.a = post(p2p_key(G_, src, dst, op.tag), g, src, dst, op.bytes, op);
          r.busy_at_post_s = busy_s;
          r.post_group = computes;
          ++in_flight;
          break;
        }
        case OpKind::kCollective: {
          const RingNeighbours& n = rings_[op.group][g];
          const double flow = (n.size - 1) * op.bytes;
          Request& r = request(op.request);
          r.a = post(collective_key(G_, g, n.succ, op.tag), g, g, n.succ, flow, op);
          r.b = post(collective_key(G_, n.pred, g, op.tag), g, n.pred, g, flow, op);
          r.extra_latency_s = (n.size - 2) * costs_.route_latency_s(fabric_, g, n.succ);
          break;
        }
        case OpKind::kWait: {
          Request& r = request(op.request);
          const double start = sg4::Engine::get_clock();
          if (r.a.t) wait(r.a);
          if (r.b.t) wait(r.b);
          double extra_s = r.extra_latency_s;
          if (!r.b.t && r.a.t && costs_.transfer_overlap < 1) {
            const double x = r.a.comm->get_finish_time() - r.a.comm->get_start_time();
            const double due = (1 - costs_.transfer_overlap) * std::min(busy_s - r.busy_at_post_s, x);
            double& paid = paid_by_group[r.post_group];
            if (due > paid) {
              extra_s += due - paid;
              paid = due;
            }
          }
          if (extra_s > 0) {
            sg4::this_actor::sleep_for(extra_s);
            ++activities_;
          }
          if (!r.b.t) --in_flight;
          st.exposed.add(weights_, op, sg4::Engine::get_clock() - start);
          r = Request{};
          break;
        }
        case OpKind::kAlloc:
        case OpKind::kFree: break;
      }
      st.elapsed.add(weights_, op, sg4::Engine::get_clock() - t0);
      progress();
    }
    st.finished = true;
  }
};

// --- Running it in a child process ---------------------------------------------------------

// The child's answer: a status, the scalar figures, the per-GPU ones, an error message.
struct WireHeader {
  int status = 0;  // 0 ok, 1 runtime error, 2 input error
  Scalars scalars;
  int gpus = 0;
  size_t message_bytes = 0;
};

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string read_all(int fd) {
  std::string out;
  char buf[1 << 16];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(k));
  return out;
}

[[noreturn]] void child(int fd, const OpSchedule& s, const Fabric& f, const CostParams& c,
                        const ReplayOptions& o) {
  WireHeader h{};
  std::string message;
  std::vector<GpuTimes> gpus;
  try {
    ChildFigures r = SimGridReplay(s, f, c, o).run();
    h.scalars = r.scalars;
    gpus = std::move(r.gpus);
  } catch (const InputError& e) {
    h.status = 2;
    message = e.what();
  } catch (const std::exception& e) {
    h.status = 1;
    message = e.what();
  }
  h.gpus = static_cast<int>(gpus.size());
  h.message_bytes = message.size();
  const bool ok = write_all(fd, &h, sizeof h) &&
                  write_all(fd, gpus.data(), gpus.size() * sizeof(GpuTimes)) &&
                  write_all(fd, message.data(), message.size());
  std::fflush(stderr);
  // _exit: the parent's atexit handlers and SimGrid's teardown are not the child's to run.
  ::_exit(ok ? 0 : 1);
}

}  // namespace

double free_comm_time(const OpSchedule& schedule, const CostParams& costs) {
  FreeWalk walk(schedule, costs);
  walk.run();
  return walk.time_s();
}

ReplayResult replay(const OpSchedule& schedule, const Fabric& fabric, const CostParams& costs,
                    const ReplayOptions& options) {
  if (static_cast<int>(schedule.ranks.size()) != fabric.gpus()) {
    throw std::runtime_error("replay: the schedule has " + std::to_string(schedule.ranks.size()) +
                             " op lists for " + std::to_string(fabric.gpus()) + " GPUs");
  }
  // The direct walk first: cheap, and it names the op where a broken schedule would hang.
  FreeWalk walk(schedule, costs);
  walk.run();

  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("replay: pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("replay: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], schedule, fabric, costs, options);
  }
  ::close(fds[1]);
  const std::string answer = read_all(fds[0]);
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  WireHeader h{};
  if (answer.size() < sizeof h) {
    throw std::runtime_error(
        "the simulation process died (" +
        (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus))
                              : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
        ") before reporting");
  }
  std::memcpy(&h, answer.data(), sizeof h);
  const size_t gpu_bytes = static_cast<size_t>(h.gpus) * sizeof(GpuTimes);
  if (answer.size() != sizeof h + gpu_bytes + h.message_bytes) {
    throw std::runtime_error("the simulation process sent a truncated answer");
  }
  const std::string message = answer.substr(sizeof h + gpu_bytes);
  if (h.status == 2) throw InputError(message);
  if (h.status != 0) throw std::runtime_error(message);

  ReplayResult r;
  r.time_s = h.scalars.time_s;
  r.replayed_time_s = h.scalars.replayed_time_s;
  r.wall_s = h.scalars.wall_s;
  r.activities = h.scalars.activities;
  r.ops = h.scalars.ops;
  r.routes = h.scalars.routes;
  r.layer_multiplier = schedule.layer_multiplier;
  r.gpus.resize(h.gpus);
  std::memcpy(r.gpus.data(), answer.data() + sizeof h, gpu_bytes);
  r.time_free_comm_s = walk.time_s();

  // Memory and useful FLOPs follow from the op lists alone.
  const LayerWeights weights(schedule);
  for (size_t g = 0; g < r.gpus.size(); ++g) {
    GpuTimes& t = r.gpus[g];
    const RankSchedule& rank = schedule.ranks[g];
    t.peak_memory_bytes = peak_memory(rank, schedule);
    Weighted useful;
    for (const Op& op : rank.ops) {
      if (op.kind == OpKind::kCompute) useful.add(weights, op, op.useful_flops);
    }
    t.useful_flops = useful.sum;
    t.idle_s = std::max(0.0, r.time_s - t.busy_s - t.exposed_comm_s);
    r.peak_memory_bytes = std::max(r.peak_memory_bytes, t.peak_memory_bytes);
    r.useful_flops += t.useful_flops;
  }
  return r;
}

}  // namespace rm::sim
