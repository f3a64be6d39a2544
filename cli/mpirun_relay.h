// What a command typed on a shell shows of its MPI ranks: their stderr, without Open MPI's
// own reports. mpirun frames each report (a rank exited non-zero, a rank was killed) as a
// help-message block between lines of dashes, eight lines that repeat what the ranks said;
// the relay drops the blocks, says in one line which rank a signal killed, and prints a
// line that several ranks wrote identically (the same bad input, found by each) once.
#pragma once

#include <set>
#include <string>

namespace rm::cli {

class MpirunRelay {
 public:
  // One line of mpirun's stderr, without its newline; returns what to print ("" for nothing,
  // else the line with its newline).
  std::string line(const std::string& text);

 private:
  bool in_block_ = false;
  std::set<std::string> said_;
};

// Reads `fd` (mpirun's stderr) to its end through an MpirunRelay, writing to stderr.
void relay_mpirun_stderr(int fd);

}  // namespace rm::cli
