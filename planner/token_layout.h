// Which global token indices a ring position holds (per sequence), by load balance:
// contiguous (position i holds [i*c, (i+1)*c)), striped (tokens i, i+P, i+2P, ...),
// zigzag (chunks i and 2P-1-i of 2P chunks of c/2).
#pragma once

#include <cstdint>
#include <string>

#include "planner/plan.h"

namespace rm {

struct TokenLayout {
  LoadBalance lb;
  int64_t seq_len;  // N
  int ring;         // P
  int64_t tokens_per_rank() const { return seq_len / ring; }  // c
  // Global index of the `local`-th token (0..c-1) held by ring position `pos`;
  // increasing in `local`.
  int64_t global_index(int pos, int64_t local) const;
  // Throws InputError if N is not divisible as the load balance needs (P, or 2P for zigzag).
  static void check_divisible(LoadBalance lb, int64_t seq_len, int ring, const std::string& where);
};

}  // namespace rm
