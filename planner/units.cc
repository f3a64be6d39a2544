#include "planner/units.h"

#include <cctype>
#include <cstdio>
#include <limits>

#include "planner/input_error.h"

namespace rm {

int64_t parse_size(const std::string& text, const std::string& where, const std::string& field,
                   int64_t max) {
  auto bad = [&]() {
    fail_input(where, field, "expected a positive size like 8k, 1M or 1048576 (got '" + text + "')");
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t end = text.size();
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  if (i == end) bad();
  int64_t value = 0;
  size_t digits = 0;
  for (; i < end && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
    if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) bad();
    value = value * 10 + (text[i] - '0');
  }
  if (digits == 0) bad();
  // A fraction ("1.5M") must come with a suffix and give a whole number of tokens.
  int64_t frac = 0, frac_scale = 1;
  if (i < end && text[i] == '.') {
    for (++i; i < end && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
      if (frac_scale > std::numeric_limits<int64_t>::max() / 100) bad();
      frac = frac * 10 + (text[i] - '0');
      frac_scale *= 10;
    }
    if (frac_scale == 1 || i == end) bad();
  }
  int64_t mult = 1;
  if (i < end) {
    switch (text[i]) {
      case 'k': case 'K': mult = 1024; break;
      case 'm': case 'M': mult = 1024 * 1024; break;
      case 'g': case 'G': mult = int64_t{1024} * 1024 * 1024; break;
      default: bad();
    }
    ++i;
  }
  if (i != end) bad();
  if (value > std::numeric_limits<int64_t>::max() / mult - 1) bad();
  if (frac > 0 && (frac > std::numeric_limits<int64_t>::max() / mult || (frac * mult) % frac_scale != 0)) bad();
  const int64_t n = value * mult + (frac > 0 ? frac * mult / frac_scale : 0);
  if (n == 0) bad();
  if (n > max) {
    fail_input(where, field, "expected at most " + format_size(max) + " (" + std::to_string(max) + ") (got '" + text + "')");
  }
  return n;
}

std::string format_size(int64_t n) {
  char buf[32];
  const int64_t m = 1024 * 1024, k = 1024;
  if (n >= m && n % (m / 2) == 0) {
    std::snprintf(buf, sizeof buf, n % m == 0 ? "%.0fM" : "%.1fM", static_cast<double>(n) / m);
  } else if (n >= k && n % (k / 2) == 0) {
    std::snprintf(buf, sizeof buf, n % k == 0 ? "%.0fK" : "%.1fK", static_cast<double>(n) / k);
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  }
  return buf;
}

}  // namespace rm
