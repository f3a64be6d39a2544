// The posting-phase rules of a transport (backend.h begin_phase / end_phase), kept by every
// transport as the NCCL one needs them: it issues a phase's transfers as one
// ncclGroupStart/End at end_phase(), so a phase opened inside another would merge two
// steps, an end_phase() without a begin would issue nothing it means to, and a wait on a
// transfer of the phase still open waits on a kernel never launched: the rank hangs. MPI
// and the local transport would run all three; checking them there too is what lets CI,
// with no GPU, catch a ring loop that breaks them. The messages are the same everywhere.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace rm::exec {

class PostingPhases {
 public:
  explicit PostingPhases(std::string transport) : transport_(std::move(transport)) {}

  void begin() {
    if (open_) throw std::logic_error(transport_ + " transport: begin_phase() inside a phase");
    open_ = true;
    ++phase_;
  }
  void end() {
    if (!open_) throw std::logic_error(transport_ + " transport: end_phase() without begin_phase()");
    open_ = false;
  }
  bool open() const { return open_; }
  // The phase a transfer posted now belongs to: the open one, or -1 outside a phase.
  long long posted() const { return open_ ? phase_ : -1; }
  // Before a wait or test of a transfer posted in `phase` (posted()'s value then).
  void check_wait(long long phase) const {
    if (open_ && phase == phase_)
      throw std::logic_error(transport_ + " transport: wait on a transfer of a phase not yet ended");
  }
  // After an abort: whatever was open is dropped.
  void reset() { open_ = false; }

 private:
  std::string transport_;
  bool open_ = false;
  long long phase_ = 0;
};

}  // namespace rm::exec
