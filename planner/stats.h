// Summary statistics of repeated measurements, shared by calibration (benchmark repeats,
// the transfer-overlap fit), kernel timing and `ringmaster validate`.
#pragma once

#include <vector>

namespace rm {

// The median of `v` as one of its own elements: the middle one for an odd count, the
// upper of the two middle ones for an even count (a time that was measured, never an
// average of two). `v` must not be empty. O(n); `v` is taken by value and reordered.
double median(std::vector<double> v);

}  // namespace rm
