// Fork, pipe and the child's answer (see child_process.h).
#include "simulator/child_process.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "planner/input_error.h"

namespace rm::sim {

namespace {

// The child's answer: a status, then `answer_bytes` of answer and `message_bytes` of error
// message.
struct WireHeader {
  int status = 0;  // 0 ok, 1 runtime error, 2 input error
  size_t answer_bytes = 0;
  size_t message_bytes = 0;
};

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string read_all(int fd) {
  std::string out;
  char buf[1 << 16];
  ssize_t k;
  while ((k = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(k));
  return out;
}

[[noreturn]] void child(int fd, const std::function<std::string()>& work) {
  WireHeader h{};
  std::string answer, message;
  try {
    answer = work();
  } catch (const InputError& e) {
    h.status = 2;
    message = e.what();
  } catch (const std::exception& e) {
    h.status = 1;
    message = e.what();
  }
  h.answer_bytes = answer.size();
  h.message_bytes = message.size();
  const bool ok = write_all(fd, &h, sizeof h) && write_all(fd, answer.data(), answer.size()) &&
                  write_all(fd, message.data(), message.size());
  std::fflush(stderr);
  ::_exit(ok ? 0 : 1);
}

}  // namespace

std::string run_in_child_process(const std::function<std::string()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("replay: pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("replay: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    child(fds[1], work);
  }
  ::close(fds[1]);
  const std::string reply = read_all(fds[0]);
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  WireHeader h{};
  if (reply.size() < sizeof h) {
    throw std::runtime_error(
        "the simulation process died (" +
        (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus)) +
                                    // What the kernel's out-of-memory killer sends.
                                    (WTERMSIG(wstatus) == SIGKILL ? ", SIGKILL: out of memory?" : "")
                              : "exit status " + std::to_string(WEXITSTATUS(wstatus))) +
        ") before reporting");
  }
  std::memcpy(&h, reply.data(), sizeof h);
  if (reply.size() != sizeof h + h.answer_bytes + h.message_bytes) {
    throw std::runtime_error("the simulation process sent a truncated answer");
  }
  const std::string message = reply.substr(sizeof h + h.answer_bytes);
  if (h.status == 2) throw InputError(message);
  if (h.status != 0) throw std::runtime_error(message);
  return reply.substr(sizeof h, h.answer_bytes);
}

}  // namespace rm::sim
