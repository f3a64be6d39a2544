// A file path for a test, in the system's temporary folder and unique to the test process
// (its pid), so concurrent ctest runs do not share files: "<tmp>/rm_<pid>_<name>".
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

namespace rm::test {

inline std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("rm_" + std::to_string(::getpid()) + "_" + name)).string();
}

}  // namespace rm::test
