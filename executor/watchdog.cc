// Watchdog and fault injection (see watchdog.h).
#include "executor/watchdog.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <unistd.h>

#include "planner/input_error.h"

namespace rm::exec {

namespace {

double monotonic_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Watchdog::Watchdog(int rank, double deadline_s)
    : rank_(rank), deadline_s_(deadline_s), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::arm(const std::string& what) {
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
  static const std::regex re(R"((kill|stall):rank=(\d+),step=(\d+))");
  std::cmatch m;
  if (!std::regex_match(env, m, re))
    fail_input("RINGMASTER_FAULT", env, "expected kill:rank=R,step=S or stall:rank=R,step=S");
  f.kind = m[1] == "kill" ? FaultSpec::Kind::kKill : FaultSpec::Kind::kStall;
  f.rank = std::stoi(m[2]);
  f.step = std::stoi(m[3]);
  return f;
}

void maybe_inject_fault(const FaultSpec& fault, int rank, int step) {
  if (fault.kind == FaultSpec::Kind::kNone || fault.rank != rank || fault.step != step) return;
  std::fprintf(stderr, "ringmaster run: rank %d: injected fault (%s) at step %d\n", rank,
               fault.kind == FaultSpec::Kind::kKill ? "kill" : "stall", step);
  std::fflush(stderr);
  if (fault.kind == FaultSpec::Kind::kKill) std::raise(SIGKILL);
  for (;;) pause();
}

}  // namespace rm::exec
