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
    : rank_(rank), deadline_s_(deadline_s), thread_([this] { run(); }) {
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

void Watchdog::arm(const std::string& what) {
  publish_where(rank_, what);
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  armed_at_ = monotonic_s();
  what_ = what;
}

void Watchdog::disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  // Poll often enough that the bound is deadline + 0.1 s.
  while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; })) {
    if (armed_ && monotonic_s() - armed_at_ > deadline_s_) {
      std::fprintf(stderr,
                   "ringmaster run: rank %d: no progress for %.1f s in %s: a peer rank died or "
                   "stalled (see --timeout-s); aborting\n",
                   rank_, deadline_s_, what_.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
}

FaultSpec fault_from_env() {
  FaultSpec f;
  const char* env = std::getenv("RINGMASTER_FAULT");
  if (env == nullptr || *env == '\0') return f;
  static const std::regex re(R"((kill|stall|swap|checkpoint-kill):rank=(\d+),step=(\d+))");
  std::cmatch m;
  if (!std::regex_match(env, m, re))
    fail_input("RINGMASTER_FAULT", env, "expected kill|stall|swap|checkpoint-kill:rank=R,step=S");
  f.kind = m[1] == "kill"    ? FaultSpec::Kind::kKill
           : m[1] == "stall" ? FaultSpec::Kind::kStall
           : m[1] == "swap"  ? FaultSpec::Kind::kSwap
                             : FaultSpec::Kind::kCheckpointKill;
  f.rank = std::stoi(m[2]);
  f.step = std::stoi(m[3]);
  return f;
}

void maybe_inject_fault(const FaultSpec& fault, int rank, int step) {
  if (fault.kind != FaultSpec::Kind::kKill && fault.kind != FaultSpec::Kind::kStall) return;
  if (fault.rank != rank || fault.step != step) return;
  std::fprintf(stderr, "ringmaster run: rank %d: injected fault (%s) at step %d\n", rank,
               fault.kind == FaultSpec::Kind::kKill ? "kill" : "stall", step);
  std::fflush(stderr);
  if (fault.kind == FaultSpec::Kind::kKill) std::raise(SIGKILL);
  for (;;) pause();
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
