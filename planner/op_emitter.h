// Building blocks of the schedule generator: the table of buffer ids shared by all ranks,
// and the emitter that appends one rank's ops (request ids, the step's sync cost, the
// current layer / step / pass stamped on every op).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "planner/op_list.h"

namespace rm {

// Buffer ids by label: the same label means the same buffer id (and role) on every rank.
class BufferTable {
 public:
  explicit BufferTable(std::vector<BufferInfo>& list) : list_(list) {}
  int id(const std::string& label, double bytes, BufferRole role = BufferRole::kAccounting, int blocks = 1);

 private:
  std::vector<BufferInfo>& list_;
  std::map<std::string, int> ids_;
};

// Appends ops to one rank's list; tracks the request ids.
class RankEmitter {
 public:
  explicit RankEmitter(RankSchedule& rs) : rs_(rs) {}

  int layer = 0;
  int step = 0;
  bool backward = false;
  bool micro_stand_in = false;  // stamped on every op (OpSchedule::micro_stand_in_weight)
  bool sequence_stand_in = false;  // likewise (OpSchedule::sequence_stand_in_weight)
  // Added to the phase of every transfer: a pipeline stage numbers its ring passes' phases
  // between its stage-to-stage exchanges (schedule.cc), 0 without a pipeline.
  int phase_base = 0;
  // Stamped on every op while set: what the all-to-all being emitted moves.
  A2aPayload a2a = A2aPayload::kNone;

  // A ring step starts: the next op carries the step's fixed sync cost (overhead_s).
  void begin_step(int s, double sync_s) {
    step = s;
    pending_sync_ += sync_s;
  }

  // Restores layer, step and backward when it goes out of scope.
  class Scope {
   public:
    explicit Scope(RankEmitter& em) : em_(em), layer_(em.layer), step_(em.step), bwd_(em.backward) {}
    ~Scope() {
      em_.layer = layer_;
      em_.step = step_;
      em_.backward = bwd_;
    }

   private:
    RankEmitter& em_;
    int layer_, step_;
    bool bwd_;
  };

  // A send or receive (`kind`) with `peer` in posting phase `phase`; returns its request.
  // `kv_owner`: on a gathered buffer, the ring position whose block the message carries; on
  // an all-to-all's staging, the member it goes to or comes from.
  int transfer(OpKind kind, int peer, double bytes, int buffer, int tag, int phase, int kv_owner = -1);
  int collective(CollectiveKind kind, int group, double bytes, int buffer, int tag);
  void wait(int request);
  void wait_all(std::vector<int>& requests);
  void compute(ComputeKind kind, double flops, double useful, double efficiency, int buffer,
               int aux_buffer, int kv_owner = -1);
  void alloc(int buffer, double bytes);
  void free(int buffer);
  void begin_pass(bool backward_pass);  // kBeginPass (a recompute is a forward pass)
  void own_grad(int buffer, int kv_owner = -1);  // kOwnGrad (kv_owner: of a gathered buffer)

 private:
  RankSchedule& rs_;
  int next_request_ = 0;
  double pending_sync_ = 0;

  Op base(OpKind kind);
  int post(Op op, double bytes, int buffer, int tag);
};

}  // namespace rm
