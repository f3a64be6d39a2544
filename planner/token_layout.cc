// TokenLayout: which global token indices a ring position holds (token_layout.h).
#include "planner/token_layout.h"

#include <string>

#include "planner/input_error.h"

namespace rm {

int64_t TokenLayout::global_index(int pos, int64_t local) const {
  const int64_t c = tokens_per_rank();
  switch (lb) {
    case LoadBalance::kContiguous:
      return pos * c + local;
    case LoadBalance::kStriped:
      // Token t lives on position t mod P.
      return local * ring + pos;
    case LoadBalance::kZigzag: {
      // 2P chunks of c/2: position i holds chunk i, then chunk 2P-1-i.
      const int64_t half = c / 2;
      if (local < half) return pos * half + local;
      return (2 * static_cast<int64_t>(ring) - 1 - pos) * half + (local - half);
    }
  }
  return -1;
}

void TokenLayout::check_divisible(LoadBalance lb, int64_t seq_len, int ring,
                                  const std::string& where) {
  if (ring < 1) fail_input(where, "cp", "must be >= 1 (got " + std::to_string(ring) + ")");
  if (seq_len < 1) fail_input(where, "seq_len", "must be >= 1 (got " + std::to_string(seq_len) + ")");
  const int64_t need = lb == LoadBalance::kZigzag ? 2 * static_cast<int64_t>(ring) : ring;
  if (seq_len % need != 0) {
    fail_input(where, "seq_len",
               std::string("must be a multiple of ") + std::to_string(need) + " for " +
                   to_string(lb) + " load balance over a ring of " + std::to_string(ring) +
                   " (got " + std::to_string(seq_len) + ")");
  }
}

}  // namespace rm
