// The job the simulator tests plan: the default model on a shipped topology.
#pragma once

#include <cstdint>

#include "planner/plan.h"
#include "planner/spec_library.h"
#include "planner/topology.h"

namespace rm {

inline Job make_job(const Topology& topo, int gpus, int64_t seq, Workload w) {
  Job j;
  j.model = kDefaultModel;
  j.topology = topo.name;
  j.gpus = gpus;
  j.seq_len = seq;
  j.workload = w;
  return j;
}

}  // namespace rm
