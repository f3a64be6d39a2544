#include "cli/self_launch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "cli/mpirun_relay.h"
#include "planner/input_error.h"

namespace rm::cli {
namespace {

volatile pid_t g_mpirun = 0;  // the mpirun child relaunch_under_mpirun waits for

void forward_to_mpirun(int sig) {
  if (g_mpirun > 0) kill(g_mpirun, sig);
}

std::vector<char*> c_argv(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

}  // namespace

bool under_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::string self_path() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot find this binary's path (/proc/self/exe)");
  return std::string(buf, static_cast<size_t>(n));
}

void check_output_path(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(dir.c_str(), W_OK) != 0)
    fail_input(flag, path, "folder '" + dir + "' does not exist or is not writable");
}

void relaunch_under_mpirun(int np, const std::vector<std::string>& args) {
  std::vector<std::string> all{"mpirun", "-np", std::to_string(np)};
  if (geteuid() == 0) all.push_back("--allow-run-as-root");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (np > cores) {
    all.push_back("--oversubscribe");
    // A plan prices one device per rank; ranks sharing cores wait for one, and what they
    // measure (run, validate, calibrate) says so only here.
    std::fprintf(stderr,
                 "ringmaster: warning: %d ranks on the %d cores of this machine (mpirun --oversubscribe): ranks wait "
                 "for a core, so times measured here exceed what a plan for %d devices predicts\n",
                 np, cores, np);
  }
  for (const char* a : {"--bind-to", "none", "-x", "OMP_NUM_THREADS=1"}) all.push_back(a);
  if (std::getenv("RINGMASTER_FAULT") != nullptr) {
    all.push_back("-x");
    all.push_back("RINGMASTER_FAULT");
  }
  all.push_back(self_path());
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv = c_argv(all);
  std::fflush(stdout);
  std::fflush(stderr);
  // mpirun runs as a child whose stderr passes through the relay (mpirun_relay.h); its exit
  // status becomes ours, and an interrupt is handed on to it.
  int pipe_fd[2];
  if (pipe(pipe_fd) != 0) throw std::runtime_error("pipe failed: " + std::string(std::strerror(errno)));
  int ready[2];  // closed on exec: tells the parent whether mpirun started
  if (pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed: " + std::string(std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    close(pipe_fd[0]);
    close(ready[0]);
    dup2(pipe_fd[1], STDERR_FILENO);
    close(pipe_fd[1]);
    execvp("mpirun", argv.data());
    const int err = errno;
    (void)!write(ready[1], &err, sizeof err);
    _exit(127);
  }
  close(pipe_fd[1]);
  close(ready[1]);
  int exec_errno = 0;
  const bool failed = read(ready[0], &exec_errno, sizeof exec_errno) == static_cast<ssize_t>(sizeof exec_errno);
  close(ready[0]);
  if (failed) {
    waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot start mpirun (" + std::string(std::strerror(exec_errno)) +
                             "): install Open MPI, or launch the ranks with your MPI launcher");
  }
  g_mpirun = pid;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, forward_to_mpirun);
  relay_mpirun_stderr(pipe_fd[0]);
  close(pipe_fd[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid failed: " + std::string(std::strerror(errno)));
  std::fflush(stdout);
  std::exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t begin = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == '\0') {
      args.push_back(all.substr(begin, i - begin));
      begin = i + 1;
    }
  if (!args.empty()) args.erase(args.begin());  // the binary
  return args;
}

int run_child(const std::vector<std::string>& args, const std::string& stdout_path) {
  std::vector<std::string> all{self_path()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv = c_argv(all);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    if (!stdout_path.empty()) {
      const int fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(127);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waitpid failed: " + std::string(std::strerror(errno)));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace rm::cli
