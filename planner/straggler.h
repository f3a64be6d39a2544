// The straggler term of a lockstep ring. A p2p ring step ends when its transfers do, and the
// block a position receives was forwarded by its neighbour after that neighbour's previous
// step: so each step waits, in effect, for the slowest of the ring's P kernels. When a
// kernel's time varies from rank to rank with relative standard deviation sigma
// (CostParams::lockstep_jitter), the step takes the mean kernel's time x (1 + sigma x
// E[max of P standard normals]): nothing at P = 1, 0.56 sigma at P = 2, 1.42 sigma at 8,
// 2.07 sigma at 32. An upper bound: a ring's double buffering lets a slow step borrow from
// the next one's slack, which the expected maximum of independent steps ignores.
//
// Only the p2p rings' steps after a position's own block pay it: the cost model charges it
// with the overlap interference, and the SimGrid replay charges it on the same kernels
// (OpSchedule::lockstep_slowdown), so they agree. It is waiting, not compute: the
// free-communication step leaves it out, and a plan reports it as exposed
// (Prediction::lockstep_wait_s). all_gather and a2a compute each layer's attention as one
// kernel per GPU, with one wait for the collective after it.
#pragma once

namespace rm {

// E[max of n independent standard normals]: 0 for n <= 1, 1/sqrt(pi) for 2. Numerical
// integration of x n phi(x) Phi(x)^(n-1); exact to 1e-9 for n up to 2^30.
double expected_max_standard_normal(int n);

// What a lockstep step over `ranks` positions costs over its mean kernel: 1 + jitter x
// expected_max_standard_normal(ranks); exactly 1 when jitter is 0 or ranks <= 1.
double lockstep_slowdown(double jitter, int ranks);

}  // namespace rm
