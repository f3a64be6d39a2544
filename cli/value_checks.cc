// Checks on command-line values shared by several subcommands (declared in commands.h).
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "cli/commands.h"

namespace rm::cli {

CLI::Validator finite_in(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << ", " << hi << "]";
  const std::string text = range.str();
  return CLI::Validator(
      [lo, hi, text](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        const bool whole = !value.empty() && end == value.c_str() + value.size();
        if (whole && std::isfinite(v) && v >= lo && v <= hi) return "";
        return "expected a number in " + text + " (got '" + value + "')";
      },
      "NUMBER in " + text);
}

}  // namespace rm::cli
