// median: an element of the sample, the upper middle one for an even count.
#include <doctest/doctest.h>

#include "planner/stats.h"

TEST_CASE("median of odd and even counts, in any order") {
  CHECK(rm::median({4.0}) == 4.0);
  CHECK(rm::median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(rm::median({5.0, 1.0, 4.0, 2.0, 3.0}) == 3.0);
  CHECK(rm::median({4.0, 1.0, 3.0, 2.0}) == 3.0);  // upper middle: a measured value
  CHECK(rm::median({2.0, 2.0, 9.0, 1.0}) == 2.0);
}
