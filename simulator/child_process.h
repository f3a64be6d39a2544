// Running work in a forked child process and reading its answer back through a pipe. A
// SimGrid engine can be run once per process (its clock and models are global), so
// replay() runs it in a child: the caller's process is untouched and replay() can be
// called any number of times.
//
// The child runs `work`, writes a header (status, sizes), the bytes `work` returned and any
// error message, and _exits: the parent's atexit handlers and SimGrid's teardown are not
// the child's to run.
#pragma once

#include <functional>
#include <string>

namespace rm::sim {

// Returns the bytes `work` returned in the child. An InputError thrown there is thrown
// again here as an InputError, any other std::exception as std::runtime_error with its
// message; a child that dies before answering is a std::runtime_error naming its signal or
// exit status. Flushes stdout and stderr before forking.
std::string run_in_child_process(const std::function<std::string()>& work);

}  // namespace rm::sim
