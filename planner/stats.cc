#include "planner/stats.h"

#include <algorithm>
#include <cassert>

namespace rm {

double median(std::vector<double> v) {
  assert(!v.empty());
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

}  // namespace rm
