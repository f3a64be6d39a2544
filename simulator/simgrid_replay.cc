// The SimGrid replay (see simgrid_replay.h): one actor per GPU walks its op list.
#include "simulator/simgrid_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <simgrid/kernel/resource/Action.hpp>
#include <simgrid/s4u.hpp>

#include "simulator/collective_ring.h"
#include "simulator/layer_weights.h"
#include "simulator/message_matching.h"
#include "simulator/platform.h"
#include "simulator/replica_load.h"
#include "simulator/replay_trace.h"

namespace sg4 = simgrid::s4u;

namespace rm::sim {

namespace {

// Both sides of a transfer hold it. Each side posts its half (a put or a get) on the
// mailbox the first poster took from the pool; SimGrid starts the comm when the second
// half arrives, and each side waits for its own half. A mailbox holds one half-posted
// transfer at a time, so its first-come matching pairs exactly the two halves the table
// (message_matching.h) paired; the second poster returns it to the pool. (Host-to-host
// Comm::sendto_async would need no mailbox, but SimGrid 3.32 keeps all of those comms in
// one list and removes each from it by a linear scan: ~G² activities x O(G) at 1,024 GPUs.)
struct Transfer {
  int src = 0, dst = 0;
  double bytes = 0;
  double latency_s = 0;  // its route's (Platform: the links carry none), paid after its stream
  const Op* op = nullptr;  // the first poster's op (trace names)
  sg4::Mailbox* mailbox = nullptr;
  void* received = nullptr;  // the get's payload slot (SimGrid writes it on completion)
  bool traced = false;
  bool streamed = false;  // its network action has finished (SimGridReplay::follow_streams)
  FlowClass kind() const { return op->kind == OpKind::kCollective ? FlowClass::kCollective : FlowClass::kRing; }
};

struct Half {
  std::shared_ptr<Transfer> t;
  sg4::CommPtr comm;  // this side's put or get
};

// A collective run as rings on the links (collective_ring.h). NCCL runs one communicator's
// collectives one after another, whatever the streams they were issued on (NVIDIA/nccl#574:
// "always serialized; NCCL adds CUDA events to enforce that"), so a collective posted while
// the GPU's previous one on its group still runs is queued (CollectiveQueue).
struct RingCollective {
  std::vector<Half> flows;
  double extra_latency_s = 0;  // the ring steps' latencies after its flows
  double start_s = -1;         // when its flows were posted
  double end_s = -1;           // its flows' end plus extra_latency_s (at least lone_end_s), once known
  // A ring folding left alone (lone_collective): run by an actor of its own, which sets its
  // end and releases lone_done.
  std::optional<LoneCollective> lone;
  double lone_end_s = -1;
  sg4::SemaphorePtr lone_done;
  // Queued: what it runs after, its op, and a semaphore released once it has ended.
  std::shared_ptr<RingCollective> previous;
  const Op* op = nullptr;
  const CollectiveRole* role = nullptr;
  sg4::SemaphorePtr done;
};

// One GPU's queue of collectives on one group, and the actor on its host that runs them in
// order, created at the group's first queued collective (an actor per queued collective
// would grow with the step: a gather queued behind a reduce-scatter in every layer's
// backward of every micro-step).
struct CollectiveQueue {
  std::deque<std::shared_ptr<RingCollective>> pending;
  sg4::SemaphorePtr work;                // released once per pending one (null: no actor yet)
  std::shared_ptr<RingCollective> last;  // the group's last collective posted
};

struct Request {
  Half a;                          // a send's or receive's one end
  std::shared_ptr<RingCollective> ring;  // a collective's
  double latency_owed_s = 0;       // a transfer's route latency, once per ring step it stands
                                   // for (a folded macro step's: ring_pass.h), after its stream
  double busy_at_post_s = 0;       // the GPU's compute seconds when it posted this
  int post_group = 0;              // compute ops run before it was posted (see kWait)
  double fitted_end_s = -1;        // a calibrated collective's end (CostParams::collectives)
  double fitted_s = 0;             // and its own duration, queueing aside
};

struct GpuState {
  Weighted elapsed, busy, exposed;
  bool finished = false;
};

class SimGridReplay {
 public:
  SimGridReplay(const OpSchedule& s, const Fabric& f, const CostParams& c, const ReplayOptions& o)
      : s_(s), fabric_(f), costs_(c), opt_(o), G_(f.gpus()), weights_(s), roles_(s, f, GroupRoles::Members::kReplayed),
        full_roles_(s.emitted_gpus.empty() ? nullptr : std::make_unique<GroupRoles>(s, f, GroupRoles::Members::kFull)),
        gpus_(G_), trace_(o.trace_path, o.trace_title, o.trace_gpus), messages_(G_), queues_(G_) {
    // What a ring attention kernel of each GPU takes over its mean (ReplayOptions::gpu_spread).
    speeds_ = o.gpu_spread > 0 ? gpu_slowdowns(o.gpu_spread, o.spread_seed, G_)
                               : std::vector<double>(static_cast<size_t>(G_), s.lockstep_slowdown);
    const GroupRoles& full = full_roles_ ? *full_roles_ : roles_;
    for (size_t group = 0; group < s.groups.size(); ++group) {
      step_latency_.push_back(ring_step_latency(f, c, s.groups[group], full.of_group(static_cast<int>(group))));
    }
  }

  SimGridFigures run() {
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
    Platform platform(fabric_, costs_, s_.emitted_gpus);
    add_routes(platform);
    platform.seal();
    follow_replica_load(platform);
    follow_streams();
    for (int g = 0; g < G_; ++g) {
      // Ranks not emitted (replica folding) have no ops, no host and no actor.
      if (s_.ranks[g].ops.empty()) {
        gpus_[g].finished = true;
        continue;
      }
      sg4::Actor::create("gpu" + std::to_string(g), platform.host(g), [this, g] { gpu(g); });
    }
    engine->run();

    SimGridFigures out;
    SimGridScalars& sc = out.scalars;
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
    trace_.write(s_);
    sc.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return out;
  }

 private:
  // What it replays, on what, at what rates, with what output.
  const OpSchedule& s_;
  const Fabric& fabric_;
  const CostParams& costs_;
  const ReplayOptions& opt_;
  std::vector<double> speeds_;  // by GPU: a ring attention kernel's time over its mean
  int G_;
  LayerWeights weights_;
  GroupRoles roles_;
  std::unique_ptr<GroupRoles> full_roles_;  // folded replicas: every member's, for lone members
  std::vector<GpuState> gpus_;
  ReplayTrace trace_;
  MessageTable<std::shared_ptr<Transfer>> messages_;  // half-posted transfers
  std::vector<sg4::Mailbox*> free_mailboxes_;
  std::unique_ptr<ReplicaLinks> replica_links_;  // a folded replay's link shares (else null)
  // Transfers whose streams run, by SimGrid activity (follow_streams).
  std::unordered_map<const void*, std::shared_ptr<Transfer>> streaming_;
  std::vector<RingStepLatency> step_latency_;     // per group, over its full rings
  // Each GPU's collective queues by group, outliving the actors (their runners are daemons).
  std::vector<std::unordered_map<int, CollectiveQueue>> queues_;
  int mailboxes_ = 0;
  int64_t activities_ = 0, ops_ = 0, ops_total_ = 0;
  std::chrono::steady_clock::time_point wall_last_;

  // Only the pairs the op lists use get a route (platform.h).
  void add_routes(Platform& p) {
    for (const RankSchedule& r : s_.ranks) {
      ops_total_ += static_cast<int64_t>(r.ops.size());
      for (const Op& op : r.ops) {
        if (op.kind == OpKind::kSend) p.add_route(r.gpu, op.peer);
        if (op.kind == OpKind::kCollective) {
          const CollectiveRole& c = roles_.at(op.group, r.gpu);
          if (c.rail_succ >= 0) p.add_route(r.gpu, c.rail_succ);
          if (c.node_succ >= 0) p.add_route(r.gpu, c.node_succ);
        }
      }
    }
  }

  // Folded replicas: the links follow the classes of flows running on them (replica_load.h).
  // A comm's flow starts when its second half is posted (post) and ends when SimGrid's
  // network model finishes it, which the actors only see at their waits.
  void follow_replica_load(const Platform& p) {
    ReplicaLoad load = full_roles_ ? replica_load(s_, fabric_, roles_, *full_roles_) : ReplicaLoad{};
    if (!load.followed()) return;
    std::vector<double> capacity;
    for (const Link& l : fabric_.links()) capacity.push_back(costs_.link_bytes_per_s(l));
    replica_links_ = std::make_unique<ReplicaLinks>(std::move(load), fabric_, p.links(), std::move(capacity));
  }

  // Marks each transfer streamed when SimGrid's network model finishes it, so that
  // ended() can ask without Comm::test(): SimGrid 3.32 lists every posted comm on its
  // actor until a wait answers it, and a comm that test() found done is never waited in the
  // kernel again (s4u's wait returns at once), so it stayed listed and every later comm's
  // end scanned the list: a step's replay grew with the square of its micro-steps (16
  // micro-steps of Llama 2 13B on 16 TPU chips: 4.3x the time of 8).
  void follow_streams() {
    using simgrid::kernel::resource::Action;
    sg4::Link::on_communication_state_change_cb([this](simgrid::kernel::resource::NetworkAction& n, Action::State) {
      // NetworkAction (not in SimGrid's installed headers) derives from Action alone.
      const auto& a = reinterpret_cast<const Action&>(n);
      if (a.get_state() != Action::State::FINISHED && a.get_state() != Action::State::FAILED) return;
      const auto it = streaming_.find(a.get_activity());
      if (it == streaming_.end()) return;
      Transfer& t = *it->second;
      t.streamed = true;
      if (replica_links_) replica_links_->finished(t.src, t.dst, t.kind());
      streaming_.erase(it);
    });
  }

  // Posts end `e` of a transfer: a put from its source, a get at its destination.
  Half post(const MessageEnd& e, const Op& op) {
    // Creating a mailbox is a simcall, during which other actors run and may post the
    // other half: so first, before the table is read.
    if (free_mailboxes_.empty()) {
      free_mailboxes_.push_back(sg4::Mailbox::by_name(std::to_string(mailboxes_++)));
    }
    auto [t, first] = messages_.post(e, [&] {
      auto made = std::make_shared<Transfer>();
      made->src = e.src;
      made->dst = e.dst;
      made->bytes = e.bytes;
      made->latency_s = costs_.route_latency_s(fabric_, e.src, e.dst);
      made->op = &op;
      made->mailbox = free_mailboxes_.back();
      free_mailboxes_.pop_back();
      return made;
    });
    Half h{t, nullptr};
    // The source's end is the put, the destination's the get (a GPU's transfer to itself,
    // a one-member collective, posts the put, then the get).
    // (clang < 16 cannot capture the structured binding t.)
    const auto start = [&h, &e, transfer = t.get()] {
      if (e.sender) {
        h.comm = transfer->mailbox->put_async(transfer, static_cast<uint64_t>(std::llround(e.bytes)));
      } else {
        h.comm = transfer->mailbox->get_async<void>(&transfer->received);
      }
    };
    if (!first && replica_links_) {
      replica_links_->at_capacity(t->src, t->dst, start);  // the second half creates the flow
    } else {
      start();
    }
    if (!first) {
      // Empty again now that this half matched; not before, as at_capacity's simcalls let
      // other actors run, which would post their first halves on it.
      free_mailboxes_.push_back(t->mailbox);
      ++activities_;
      streaming_.emplace(h.comm->get_impl(), t);  // both halves' comms are this activity
      if (replica_links_) replica_links_->started(t->src, t->dst, t->kind());
    }
    return h;
  }

  // Waits for `h`'s stream; the transfer arrives its route's latency later (arrival()).
  void wait(const Half& h) {
    h.comm->wait();
    Transfer& t = *h.t;
    if (trace_.on() && !t.traced) {
      t.traced = true;
      const double start = h.comm->get_start_time();
      trace_.transfer(*t.op, t.src, t.dst, t.bytes, start, arrival(h) - start);
    }
  }
  static double arrival(const Half& h) { return h.comm->get_finish_time() + h.t->latency_s; }

  void start_flows(RingCollective& c, const CollectiveRole& role, int g, const Op& op) {
    c.start_s = sg4::Engine::get_clock();
    for (const MessageEnd& e : collective_flows(role, g, op)) c.flows.push_back(post(e, op));
    if (c.lone) start_lone(c, op.group);
  }
  // A lost ring's collective: its copies' flows load the links while it runs at the rate
  // the replayed flows beside it leave (replica_load.h).
  void start_lone(RingCollective& c, int group) {
    c.lone_done = sg4::Semaphore::create(0);
    sg4::Actor::create("lone", sg4::this_actor::get_host(), [this, &c, group] {
      replica_links_->run_lone(group, c.lone->transfer_s);
      c.lone_end_s = sg4::Engine::get_clock() + c.lone->latency_s;
      c.lone_done->release();
    })->daemonize();
  }
  // Waits for `c`'s flows and sets its end.
  void wait_flows(RingCollective& c) {
    double flows_end = c.start_s;  // a group of one has no flows
    for (const Half& h : c.flows) {
      wait(h);
      flows_end = std::max(flows_end, arrival(h));
    }
    if (c.lone) {
      c.lone_done->acquire();
      c.lone_done->release();  // for whoever else waits for it
    }
    c.end_s = std::max(flows_end + c.extra_latency_s, c.lone_end_s);
  }
  // Waits for `c` to end (a queued one: for its queue's actor to say so), and returns its end.
  double finish(RingCollective& c) {
    if (c.end_s < 0) {
      if (c.done) {
        c.done->acquire();
        c.done->release();  // for whoever else waits for it
      } else {
        wait_flows(c);
      }
    }
    return c.end_s;
  }
  // Whether `c` has ended by now, without waiting.
  bool ended(RingCollective& c) {
    if (c.end_s < 0) {
      if (c.done) return false;
      for (const Half& h : c.flows) {
        if (!h.t->streamed) return false;
      }
      if (c.lone && c.lone_end_s < 0) return false;
      finish(c);  // its flows are done: this only reads their ends
    }
    return c.end_s <= sg4::Engine::get_clock();
  }
  // Posts collective `op` of GPU `g` now, or queues it behind the group's last.
  std::shared_ptr<RingCollective> post_collective(CollectiveQueue& q, const CollectiveRole& role, int g,
                                                  const Op& op) {
    auto c = std::make_shared<RingCollective>();
    const RingStepLatency& step = step_latency_[static_cast<size_t>(op.group)];
    c->extra_latency_s = collective_extra_latency_s(role, op, step);
    if (full_roles_) {
      const CollectiveRole& full = full_roles_->at(op.group, g);
      if (lost_ring(role, full)) {
        // (A lost ring loads links, so the replay follows them: replica_links_ is set.)
        c->lone = lone_collective(full, g, op, fabric_, costs_, step, replica_links_->lone_flows());
      }
    }
    // Once the group has a runner, every collective goes through it: an actor waiting for
    // comms another actor posted leaves them listed on the poster in SimGrid 3.32 (see
    // follow_streams), so the runner should wait for its own only.
    if (!q.work && (!q.last || ended(*q.last))) {
      start_flows(*c, role, g, op);
      return c;
    }
    c->previous = q.last;
    c->op = &op;
    c->role = &role;
    c->done = sg4::Semaphore::create(0);
    if (!q.work) start_runner(q, g);
    q.pending.push_back(c);
    q.work->release();
    return c;
  }
  // The queue's actor: each pending collective once the one before it has ended. A daemon,
  // so it ends with the last GPU's actor.
  void start_runner(CollectiveQueue& q, int g) {
    q.work = sg4::Semaphore::create(0);
    const std::string name = "gpu" + std::to_string(g) + "-collectives";
    sg4::ActorPtr runner = sg4::Actor::create(name, sg4::this_actor::get_host(), [this, &q, g] {
      while (true) {
        q.work->acquire();
        const std::shared_ptr<RingCollective> c = std::move(q.pending.front());
        q.pending.pop_front();
        const double after = finish(*c->previous);
        c->previous.reset();
        const double now = sg4::Engine::get_clock();
        if (after > now) sg4::this_actor::sleep_for(after - now);
        start_flows(*c, *c->role, g, *c->op);
        wait_flows(*c);
        c->done->release();
      }
    });
    runner->daemonize();
  }

  void progress() {
    if ((++ops_ & 0xFFF) != 0 || !opt_.progress) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - wall_last_ < std::chrono::seconds(1)) return;
    wall_last_ = now;
    std::fprintf(stderr, "simulate: %3.0f%% of %lld ops, simulated clock %.3f s\n",
                 100.0 * ops_ / ops_total_, static_cast<long long>(ops_total_), sg4::Engine::get_clock());
  }

  // One GPU's actor: its op list in order.
  void gpu(int g) {
    GpuState& st = gpus_[g];
    const auto& ops = s_.ranks[g].ops;
    const double speed = speeds_[static_cast<size_t>(g)];
    // Requests posted and not yet waited for, by id: ids are unique within the rank, so a
    // table of every id would grow with the op list (a long pipeline's 10^4 per GPU).
    std::unordered_map<int, Request> reqs;
    int in_flight = 0;  // transfers posted and not yet waited for (interference)
    double busy_s = 0;  // compute seconds so far (unweighted)
    int computes = 0;   // compute ops run so far
    // Partial overlap (CostParams::transfer_overlap o < 1): the planner charges a ring step
    // c + x - o·min(c, x), i.e. max(c, x) + (1 - o)·min(c, x), where x is the step's
    // transfer and c the compute it overlaps. The replay already gives max(c, x), so each
    // wait adds (1 - o)·min(c, x) for its transfer, c being the compute run between its
    // post and the wait. Transfers posted together (no compute between: one step's sends
    // and receives) pay once, the largest of theirs: paid_by_group tracks what was paid.
    // A group no transfer in flight belongs to is paid for good (later posts start later
    // groups), so each wait that leaves none in flight drops the older groups.
    std::unordered_map<int, double> paid_by_group;
    double collectives_free_at = 0;  // calibrated collectives: when the last one ends
    std::unordered_map<int, CollectiveQueue>& queues = queues_[static_cast<size_t>(g)];
    // The GPU's own seconds (compute, step syncs, latencies added at waits) are owed and
    // slept in one sleep when it next meets the others, at a post or a wait: nothing it does
    // before that is seen by another actor, so every time is the same, at one activity
    // instead of one per op (an attention step's compute and merge, a wait's latency and
    // the next step's sync: 5.42 M activities were 4.25 M at 16,384 GPUs, BENCHMARKS.md).
    double owed_s = 0;
    const auto now = [&] { return sg4::Engine::get_clock() + owed_s; };
    const auto settle = [&] {
      if (owed_s <= 0) return;
      sg4::this_actor::sleep_for(owed_s);
      ++activities_;
      owed_s = 0;
    };
    for (const Op& op : ops) {
      const double t0 = now();
      if (op.overhead_s > 0) {
        owed_s += op.overhead_s;
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
          // A ring's kernels run at its slowest GPU's pace (straggler.h): the expected
          // pace, or this GPU's drawn speed, whose waits the replay plays out.
          if (attention && op.kv_owner >= 0) flops *= speed;
          const double start = now();
          // Each host runs one actor and its ops in sequence, so a compute op never shares
          // the CPU: sleeping flops / peak takes exactly as long as the exec would, at a
          // third of the cost in SimGrid 3.32 (an exec's activity bookkeeping and CPU
          // model update; the 512-GPU replay took half the time).
          const double dur = flops / costs_.peak_flops;
          owed_s += dur;
          st.busy.add(weights_, op, dur);
          busy_s += dur;
          ++computes;
          trace_.compute(g, op, start, dur);
          break;
        }
        case OpKind::kSend:
        case OpKind::kRecv: {
          settle();
          Request& r = reqs[op.request];
          const MessageEnd end = transfer_end(g, op);
          r.a = post(end, op);
          // Its route's latency, once for each ring step it stands for (a folded macro
          // step's: ring_pass.h).
          r.latency_owed_s = (s_.step_weights.empty() ? 1 : s_.step_weights[op.step]) * r.a.t->latency_s;
          r.busy_at_post_s = busy_s;
          r.post_group = computes;
          ++in_flight;
          break;
        }
        case OpKind::kCollective: {
          settle();
          const CollectiveRole& role = roles_.at(op.group, g);
          Request& r = reqs[op.request];
          r.busy_at_post_s = busy_s;
          if (costs_.collectives.beta_bytes_per_s > 0) {
            // Calibrated: the library's own algorithm as timed on the machine, not rings
            // on the links (the cost model's GroupCollective::time charges the same).
            // They run one after another, as on one communicator (NCCL's stream, MPI's
            // progress), without sharing the links with the ring.
            const int passes = op.collective == CollectiveKind::kAllReduce ? 2 : 1;
            r.fitted_s = fitted_collective_s(costs_.collectives, role.rail_shards + role.node_shards, op.bytes, passes);
            r.fitted_end_s = std::max(sg4::Engine::get_clock(), collectives_free_at) + r.fitted_s;
            collectives_free_at = r.fitted_end_s;
            break;
          }
          CollectiveQueue& q = queues[op.group];
          r.ring = post_collective(q, role, g, op);
          q.last = r.ring;
          break;
        }
        case OpKind::kWait: {
          settle();
          Request& r = reqs[op.request];
          const double start = sg4::Engine::get_clock();
          if (r.a.t) wait(r.a);
          // A collective's further step latencies run from its flows' end, while the GPU
          // computes as much as while it waits (the cost model hides them behind the
          // layer too): only what is left of them is added here.
          double extra_s = 0;
          const double collective_end = r.ring ? finish(*r.ring) : r.fitted_end_s;
          if (collective_end >= 0) {
            extra_s = std::max(0.0, collective_end - sg4::Engine::get_clock());
            // Partial overlap (CostParams::collective_overlap o < 1): only o of the compute
            // between post and wait hides a collective of x seconds, so the wait lasts at
            // least x - o·min(c, x), as the cost model charges (collective_exposed_s).
            if (costs_.collective_overlap < 1) {
              const double x = r.ring ? collective_end - r.ring->start_s : r.fitted_s;
              extra_s = std::max(extra_s, costs_.collective_exposed_s(x, busy_s - r.busy_at_post_s));
            }
          }
          if (r.latency_owed_s > 0) {
            extra_s += std::max(0.0, r.a.comm->get_finish_time() + r.latency_owed_s - sg4::Engine::get_clock());
          }
          if (r.a.t && costs_.transfer_overlap < 1) {
            const double x = arrival(r.a) - r.a.comm->get_start_time();
            const double due = (1 - costs_.transfer_overlap) * std::min(busy_s - r.busy_at_post_s, x);
            double& paid = paid_by_group[r.post_group];
            if (due > paid) {
              extra_s += due - paid;
              paid = due;
            }
          }
          owed_s += extra_s;
          if (r.a.t && --in_flight == 0) {
            std::erase_if(paid_by_group, [&](const auto& kv) { return kv.first < computes; });
          }
          st.exposed.add(weights_, op, now() - start);
          reqs.erase(op.request);
          break;
        }
        case OpKind::kAlloc:
        case OpKind::kFree:
        case OpKind::kBeginPass:  // no time, no memory
        case OpKind::kOwnGrad: break;
      }
      st.elapsed.add(weights_, op, now() - t0);
      progress();
    }
    settle();  // the step ends when the last GPU's last op does
    st.finished = true;
  }
};

}  // namespace

SimGridFigures replay_on_simgrid(const OpSchedule& schedule, const Fabric& fabric,
                                 const CostParams& costs, const ReplayOptions& options) {
  return SimGridReplay(schedule, fabric, costs, options).run();
}

}  // namespace rm::sim
