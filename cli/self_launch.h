// Starting this binary again: replaced by itself under mpirun (so a subcommand typed on
// a shell runs as MPI ranks), or as a child process (validate and tune drive `run` and
// `calibrate` as separate jobs, each with its own mpirun).
#pragma once

#include <string>
#include <vector>

namespace rm::cli {

// True inside an MPI job (mpirun or a PMI/PMIx launcher set its environment).
bool under_mpi();
// Absolute path of the running binary.
std::string self_path();
// An output path is user input: InputError naming `flag` when its folder is missing or
// not writable (checked before any rank runs).
void check_output_path(const std::string& path, const char* flag);

// Runs
//   mpirun -np <np> [--allow-run-as-root] [--oversubscribe] --bind-to none
//          -x OMP_NUM_THREADS=1 [-x RINGMASTER_FAULT] <this binary> <args...>
// (--allow-run-as-root as root, --oversubscribe when np exceeds the cores, with a warning
// that times measured so are not a plan's for np devices) with its stderr
// through the relay (mpirun_relay.h: no Open MPI banners, one line per rank), interrupts
// handed on, and exits with its status.
[[noreturn]] void relaunch_under_mpirun(int np, const std::vector<std::string>& args);
// This process's own arguments after the binary name (from /proc/self/cmdline), for
// relaunching exactly what the user typed.
std::vector<std::string> own_arguments();

// Runs `<this binary> <args...>` as a child process with stdout and stderr inherited
// (or stdout to `stdout_path` when not empty); returns its exit status (128 + signal if
// killed).
int run_child(const std::vector<std::string>& args, const std::string& stdout_path = "");

}  // namespace rm::cli
