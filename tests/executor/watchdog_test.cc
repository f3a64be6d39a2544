// The watchdog's three verdicts (executor/watchdog.h), each in a forked child because the
// watchdog ends its process: a peer that sends nothing, the rank's own slow step, and a rank
// that was itself stopped (SIGSTOP, then SIGCONT after the deadline) and must not blame its
// peer when it resumes.
#include <doctest/doctest.h>

#include <csignal>
#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "executor/watchdog.h"

using rm::exec::Watchdog;

namespace {

struct ChildResult {
  int exit_code = -1;
  std::string err;  // what the child wrote to stderr
};

// Runs `body` in a child whose stderr is captured. `while_stopped` runs in the parent once the
// child has stopped itself (SIGSTOP); the parent then sends SIGCONT.
ChildResult run_child(const std::function<void()>& body, const std::function<void()>& while_stopped = {}) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    body();
    _exit(0);  // the watchdog did not fire
  }
  close(fds[1]);
  int status = 0;
  if (while_stopped) {
    REQUIRE(waitpid(pid, &status, WUNTRACED) == pid);
    REQUIRE(WIFSTOPPED(status));
    while_stopped();
    kill(pid, SIGCONT);
  }
  ChildResult r;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) r.err.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  REQUIRE(waitpid(pid, &status, 0) == pid);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

constexpr double kDeadlineS = 0.3;

}  // namespace

TEST_CASE("watchdog: a receive that never completes blames the peer it waits for") {
  const ChildResult r = run_child([] {
    Watchdog w(1, kDeadlineS);
    w.arm("forward step 2 recv kv from 2", 2);
    sleep(30);
  });
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("rank 1: no progress from peer 2 (it died or stalled): 0.3 s in forward step 2 recv kv from 2") !=
        std::string::npos);
}

TEST_CASE("watchdog: the rank's own slow step blames itself") {
  const ChildResult r = run_child([] {
    Watchdog w(0, kDeadlineS);
    w.arm("forward step 0 attention", Watchdog::kOwnWork);
    sleep(30);
  });
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("rank 0: this rank's own step ran past the timeout") != std::string::npos);
}

TEST_CASE("watchdog: a rank stopped past the deadline says so when resumed, not that its peer stalled") {
  const ChildResult r = run_child(
      [] {
        Watchdog w(1, kDeadlineS);
        w.arm("forward step 1 recv kv from 0", 0);
        raise(SIGSTOP);  // every thread stops, the watchdog's too
        sleep(30);
      },
      [] { sleep(2); });
  CHECK(r.exit_code == 1);
  INFO(r.err);
  CHECK(r.err.find("rank 1: this rank was not running for ") != std::string::npos);
  CHECK(r.err.find("(stopped or starved)") != std::string::npos);
  CHECK(r.err.find("no progress from peer") == std::string::npos);
}

TEST_CASE("watchdog: an op that finishes within the deadline is not reported") {
  const ChildResult r = run_child([] {
    Watchdog w(0, kDeadlineS);
    for (int i = 0; i < 5; ++i) {
      w.arm("step", 1);
      usleep(100'000);
      w.disarm();
    }
  });
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
}
