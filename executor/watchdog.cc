// Watchdog and fault injection (see watchdog.h).
#include "executor/watchdog.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <unistd.h>

#include "planner/input_error.h"

namespace rm::exec {

namespace {

double monotonic_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// What this rank is doing, for the SIGTERM handler: arm() writes the spare buffer and then
// publishes it, so the handler always reads a whole, NUL-terminated message.
char g_where[2][512];
std::atomic<const char*> g_current{nullptr};
int g_spare = 0;

// mpirun terminates the other ranks (SIGTERM, then SIGKILL) when one fails: each says where
// it was, so every rank's exit names its rank and step. Only async-signal-safe calls.
extern "C" void on_sigterm(int) {
  const char* msg = g_current.load();
  if (msg != nullptr) {
    ssize_t unused = write(STDERR_FILENO, msg, std::strlen(msg));
    (void)unused;
  }
  _exit(1);
}

// An injected stall: the rank sleeps until it is killed, and its watchdog (when given)
// blames the rank itself.
[[noreturn]] void stall_forever(Watchdog* watchdog) {
  if (watchdog != nullptr) watchdog->blame_self();
  for (;;) pause();
}

void publish_where(int rank, const std::string& what) {
  char* buf = g_where[g_spare];
  std::snprintf(buf, sizeof g_where[0],
                "ringmaster run: rank %d: terminated (a peer rank failed or the job was "
                "stopped) in %s\n",
                rank, what.c_str());
  g_current.store(buf);
  g_spare ^= 1;
}

}  // namespace

Watchdog::Watchdog(int rank, double deadline_s)
    : rank_(rank), deadline_s_(deadline_s), last_poll_(monotonic_s()), thread_([this] { run(); }) {
  std::signal(SIGTERM, on_sigterm);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(const std::string& what, int waits_on) {
  publish_where(rank_, what);
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  armed_at_ = monotonic_s();
  waits_on_ = waits_on;
  what_ = what;
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void Watchdog::blame_self() {
  std::lock_guard<std::mutex> lock(mu_);
  waits_on_ = kOwnWork;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  // Poll often enough that the bound is deadline + 0.1 s.
  constexpr double kPollS = 0.1;
  double not_running_s = 0;
  while (!cv_.wait_for(lock, std::chrono::duration<double>(kPollS), [this] { return stop_; })) {
    const double now = monotonic_s();
    // A poll 1 s late means this process did not run (SIGSTOP, a starved host): the time is
    // its own, not a peer's.
    if (now - last_poll_ > kPollS + 1.0) not_running_s += now - last_poll_ - kPollS;
    last_poll_ = now;
    if (!armed_) {
      not_running_s = 0;
      continue;
    }
    if (now - armed_at_ <= deadline_s_) continue;
    std::string why;
    char buf[160];
    if (not_running_s > 0) {
      std::snprintf(buf, sizeof buf, "this rank was not running for %.1f s (stopped or starved)", not_running_s);
      why = buf;
    } else if (waits_on_ == kOwnWork) {
      why = "this rank's own step ran past the timeout";
    } else if (waits_on_ == kOtherRanks) {
      why = "no progress from the other ranks (one died or stalled)";
    } else {
      std::snprintf(buf, sizeof buf, "no progress from peer %d (it died or stalled)", waits_on_);
      why = buf;
    }
    std::fprintf(stderr, "ringmaster run: rank %d: %s: %.1f s in %s (see --timeout-s); aborting\n", rank_,
                 why.c_str(), deadline_s_, what_.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }
}

FaultSpec fault_from_env() {
  FaultSpec f;
  const char* env = std::getenv("RINGMASTER_FAULT");
  if (env == nullptr || *env == '\0') return f;
  // At most 9 digits: the numbers fit an int (a longer one made std::stoi throw, exit 1).
  static const std::regex re(
      R"((kill|stall|swap|checkpoint-kill|fsdp-unit|pp-order|comm-order):rank=(\d{1,9}),step=(\d{1,9}))");
  static const std::regex setup_re(R"(setup-stall:rank=(\d{1,9}))");
  std::cmatch m;
  if (std::regex_match(env, m, setup_re)) {
    f.kind = FaultSpec::Kind::kSetupStall;
    f.rank = std::stoi(m[1]);
    return f;
  }
  if (!std::regex_match(env, m, re))
    fail_input("RINGMASTER_FAULT", env,
               "expected kill|stall|swap|checkpoint-kill|fsdp-unit|pp-order|comm-order:rank=R,step=S or "
               "setup-stall:rank=R");
  f.kind = m[1] == "kill"              ? FaultSpec::Kind::kKill
           : m[1] == "stall"           ? FaultSpec::Kind::kStall
           : m[1] == "swap"            ? FaultSpec::Kind::kSwap
           : m[1] == "checkpoint-kill" ? FaultSpec::Kind::kCheckpointKill
           : m[1] == "fsdp-unit"       ? FaultSpec::Kind::kFsdpUnit
           : m[1] == "pp-order"        ? FaultSpec::Kind::kPpOrder
                                       : FaultSpec::Kind::kCommOrder;
  f.rank = std::stoi(m[2]);
  f.step = std::stoi(m[3]);
  return f;
}

void maybe_inject_fault(const FaultSpec& fault, int rank, int step, Watchdog* watchdog) {
  if (fault.kind != FaultSpec::Kind::kKill && fault.kind != FaultSpec::Kind::kStall) return;
  if (fault.rank != rank || fault.step != step) return;
  std::fprintf(stderr, "ringmaster run: rank %d: injected fault (%s) at step %d\n", rank,
               fault.kind == FaultSpec::Kind::kKill ? "kill" : "stall", step);
  std::fflush(stderr);
  if (fault.kind == FaultSpec::Kind::kKill) std::raise(SIGKILL);
  stall_forever(watchdog);
}

void maybe_stall_setup(const FaultSpec& fault, int rank, Watchdog& watchdog) {
  if (fault.kind != FaultSpec::Kind::kSetupStall || fault.rank != rank) return;
  std::fprintf(stderr, "ringmaster run: rank %d: injected fault (setup-stall)\n", rank);
  std::fflush(stderr);
  stall_forever(&watchdog);
}

void maybe_swap_posts(const FaultSpec& fault, RankSchedule& rank) {
  if (fault.kind != FaultSpec::Kind::kSwap || fault.rank != rank.gpu) return;
  auto& ops = rank.ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].kind != OpKind::kRecv || ops[i].step < fault.step) continue;
    for (size_t j = i + 1; j < ops.size() && ops[j].phase == ops[i].phase; ++j) {
      if (ops[j].kind == OpKind::kRecv && ops[j].peer == ops[i].peer) {
        std::fprintf(stderr, "ringmaster run: rank %d: injected fault (swap) of ops %zu and %zu\n",
                     rank.gpu, i, j);
        std::swap(ops[i], ops[j]);
        return;
      }
    }
  }
}

}  // namespace rm::exec
