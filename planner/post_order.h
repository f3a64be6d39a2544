// One order of posts across communicators, checked. NCCL matches a communicator's
// operations by call order, and a rank's operations on different communicators (each with
// its stream) need not run side by side: with CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron-LM's
// setting) their kernels queue on one hardware connection in posting order. So if rank A
// posts X before Y and rank B posts Y before X, where both take part in X and Y, each
// waits on the other and the job hangs; NCCL's documentation asks every rank to post in
// one consistent order.
//
// Nodes are operations every participant must reach together: a communicator's n-th
// collective, or one message of a link (its send and its receive). A rank posts steps, each
// a set of nodes posted together (one ncclGroupStart/End); each node of a step follows
// every node of the rank's previous step. violation() says whether one order of all nodes
// keeps every rank's: the edges form no cycle. The message contract's schedule check
// (message_contract.h) builds the graph from generated op lists; the executor's PostLog
// (executor/post_log.h) from what each rank really posted, at run time.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace rm {

class PostOrder {
 public:
  // A new node; ids count from 0.
  int add_node() { return nodes_++; }
  int nodes() const { return nodes_; }
  // The following steps are `rank`'s (each rank's steps come together, in posting order).
  void start_rank(int rank);
  // Rank's next step: `step`'s nodes, posted together after its previous step's.
  void post(const std::vector<int>& step);
  // "" when one order serves every rank; otherwise one cycle in words, `words` naming a node:
  //   "no one order of posts across communicators serves every rank (NCCL may hang): rank 1
  //    posts <a> before <b>; rank 0 posts <b> before <a>"
  std::string violation(const std::function<std::string(int)>& words) const;

 private:
  struct Edge {
    int from, to, rank;
  };
  int nodes_ = 0;
  int rank_ = -1;
  std::vector<int> prev_;  // the current rank's previous step
  std::vector<Edge> edges_;
};

}  // namespace rm
