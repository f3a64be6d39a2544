// Checks on command-line values shared by several subcommands (declared in commands.h).
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>

#include "cli/commands.h"

namespace rm::cli {

namespace {

// A whole finite number for which `in` holds; the message names `range` as written.
CLI::Validator finite_number(const std::string& range, std::function<bool(double)> in) {
  return CLI::Validator(
      [range, in](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        const bool whole = !value.empty() && end == value.c_str() + value.size();
        if (whole && std::isfinite(v) && in(v)) return "";
        return "expected a number in " + range + " (got '" + value + "')";
      },
      "NUMBER in " + range);
}

}  // namespace

CLI::Validator finite_in(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << ", " << hi << "]";
  return finite_number(range.str(), [lo, hi](double v) { return v >= lo && v <= hi; });
}

CLI::Validator finite_positive(double hi) {
  std::ostringstream range;
  range << "(0, " << hi << "]";
  return finite_number(range.str(), [hi](double v) { return v > 0 && v <= hi; });
}

}  // namespace rm::cli
