// The straggler term of a lockstep ring. A p2p ring step ends when its transfers do, and a
// position forwards a block only after receiving it: so over a pass every position keeps
// the pace of the ring's slowest GPU. When GPUs' speeds (their attention kernels' mean
// times) spread with relative standard deviation sigma (CostParams::lockstep_jitter), the
// ring's kernels take the mean GPU's time x (1 + sigma x E[max of P standard normals]):
// nothing at P = 1, 0.56 sigma at P = 2, 1.42 sigma at 8, 2.07 sigma at 32. A kernel's own
// noise around its GPU's speed costs little: the ring's one step of slack absorbs it (a
// ring of 8 with every kernel drawn at 5 % noise replayed 0.9-1.1 % slower, where speeds
// spread by 5 % cost 6.5 % over 20 draws; validation/README.md).
//
// The cost model charges it on a p2p ring's kernels (a later step's beside the overlap
// interference), and the SimGrid replay on the same kernels (OpSchedule::lockstep_slowdown,
// or each GPU's drawn speed under `simulate --gpu-spread`), so they agree. It is waiting,
// not compute: the free-communication step leaves it out, and a plan reports it as exposed
// (Prediction::lockstep_wait_s). all_gather's and a2a's one kernel a layer do not pay it
// (nor, yet, the other synchronous work a slow GPU holds up: collectives, TP).
#pragma once

namespace rm {

// E[max of n independent standard normals]: 0 for n <= 1, 1/sqrt(pi) for 2. Numerical
// integration of x n phi(x) Phi(x)^(n-1), for n up to 2^30 (within 1e-9 of the closed forms
// at 2 and 3, 1e-6 of Harter's table at 4 to 100).
double expected_max_standard_normal(int n);

// What a ring of `ranks` positions' kernels take over the mean GPU's when the GPUs' speeds
// spread by `jitter`: 1 + jitter x expected_max_standard_normal(ranks); exactly 1 when
// jitter is 0 or ranks <= 1.
double lockstep_slowdown(double jitter, int ranks);

}  // namespace rm
