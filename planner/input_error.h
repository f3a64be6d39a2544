// Errors in what a user gave us: a YAML file, a plan, a CLI value, a measurements file.
//
// Everything that reads user input throws InputError with a message that names the
// file (and line where known), the field and what was expected, e.g.
//   topologies/x.yaml:12: gpus_per_node: must be > 0 (got -8)
// The CLI catches it, prints the message and exits with kExitBadInput. Programmer
// mistakes use assert; run-time failures that are not the user's input (MPI, CUDA)
// use std::runtime_error and exit 1.
#pragma once

#include <stdexcept>
#include <string>

namespace rm {

inline constexpr int kExitBadInput = 2;

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws InputError("<where>: <field>: <expected>").
[[noreturn]] inline void fail_input(const std::string& where, const std::string& field,
                                    const std::string& expected) {
  throw InputError(where + ": " + field + ": " + expected);
}

// `where` for a bad option value: "command line: --seq: ...".
inline constexpr const char* kCommandLine = "command line";

}  // namespace rm
