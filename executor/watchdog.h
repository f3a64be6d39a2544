// Bounded failure for `ringmaster run`: a rank whose current op makes no progress for
// the deadline (a peer died or stalled, so a receive never completes) prints which rank,
// pass, step and op it was stuck in and whom it waited for ("no progress from peer N", or
// "this rank's own step ran past the timeout" for its own compute, or "this rank was not
// running" when the rank itself was stopped) and exits with status 1. mpirun then terminates the
// other ranks (it ends the job when one rank exits non-zero), so every rank exits
// non-zero within about deadline + mpirun's teardown, never hangs.
//
// A watchdog thread per rank polls the armed op's start time; the ring loop arms it
// before every op and disarms it at the end. It never calls MPI (the ranks run with
// MPI_THREAD_FUNNELED), it writes stderr and calls _Exit. A rank that mpirun terminates
// (SIGTERM, after another rank died) also prints the op it was in before it exits.
//
// Fault injection for tests (hidden): RINGMASTER_FAULT="kill:rank=R,step=S" makes rank R
// kill itself with SIGKILL at its first op of ring step S; "stall:rank=R,step=S" makes it
// sleep forever there (its watchdog and its peers' then fire); "swap:rank=R,step=S" swaps
// rank R's first two receives from one peer in a posting phase of step S or later, which
// breaks the message contract (its transport then reports the link and both messages);
// "setup-stall:rank=R" makes rank R of `ringmaster run` sleep forever in its set-up (the
// backend's device and transport, the ring's connect), which the watchdog watches too;
// "checkpoint-kill:rank=R,step=S" makes rank R of `ringmaster train` kill itself while it
// writes the checkpoint of training step S, after its data files and before its manifest;
// "fsdp-unit:rank=R,step=S" makes rank R of `ringmaster train` all-gather the wrong FSDP
// unit once in training step S (1-based, as train prints it; fsdp.h), which the step's
// order check must name; "pp-order:rank=R,step=S" makes rank R's pipeline stage send the
// next micro-batch's tag with its first message of training step S (pipeline_stage.h),
// which the receiving stage's transport must name; "comm-order:rank=R,step=S" makes rank R
// of `ringmaster train` prefetch no FSDP unit in training step S (fsdp.h), so its
// all-gathers come after ring transfers that the other ranks post after them, which the
// step's check of the order across communicators must name (post_log.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "planner/op_list.h"

namespace rm::exec {

class Watchdog {
 public:
  Watchdog(int rank, double deadline_s);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Who the armed op waits for, so a timeout blames the right one.
  static constexpr int kOwnWork = -1;    // this rank's own compute or copy
  static constexpr int kOtherRanks = -2;  // a collective (barrier, gather): any other rank
  // Starts the deadline for an op; `what` names it for the message (kept until disarm);
  // `waits_on` is the peer rank it waits for, or kOwnWork / kOtherRanks.
  void arm(const std::string& what, int waits_on = kOtherRanks);
  // Arms the set-up that run and train share: the backend's device and transport and the
  // ring's connect, so one that never answers fails naming it instead of hanging.
  void arm_setup(const std::string& backend) {
    arm("setting up the " + backend + " backend and connecting the ring");
  }
  void disarm();
  // The armed op now waits on this rank itself (an injected stall): a timeout says so.
  void blame_self();

 private:
  void run();
  int rank_;
  double deadline_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  double armed_at_ = 0;
  int waits_on_ = kOtherRanks;
  std::string what_;
  // Set before the thread starts: a process stopped before the thread first ran still shows
  // the gap at the first poll.
  double last_poll_;
  std::thread thread_;
};

struct FaultSpec {
  enum class Kind { kNone, kKill, kStall, kSwap, kCheckpointKill, kFsdpUnit, kPpOrder, kCommOrder, kSetupStall } kind = Kind::kNone;
  int rank = -1;
  int step = -1;
};

// Parses RINGMASTER_FAULT (unset or empty = none). Throws InputError on a bad value.
FaultSpec fault_from_env();

// Applies a kill or stall fault if it targets this rank and step (does not return then);
// a stall tells `watchdog` (when given) that the rank itself is what is stuck.
void maybe_inject_fault(const FaultSpec& fault, int rank, int step, Watchdog* watchdog);
// Applies a setup-stall fault if it targets this rank (does not return then): the rank
// sleeps in its set-up, which `watchdog` watches.
void maybe_stall_setup(const FaultSpec& fault, int rank, Watchdog& watchdog);
// Applies a swap fault to the rank's op list if it targets this rank.
void maybe_swap_posts(const FaultSpec& fault, RankSchedule& rank);

}  // namespace rm::exec
