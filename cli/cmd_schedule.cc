// `ringmaster schedule --plan plan.yaml [--rank R] [--layers N] [--format table|json]`:
// each rank's op list as the schedule generator emits it (planner/op_list.h), the list the
// simulator replays and the executor runs: for people debugging a plan, and for tests.
// Ends with whether the message contract holds (planner/message_contract.h).
//
// --format json prints
//   {"ranks": [{"rank", "ring", "position", "ops": [{"index", "kind", "layer", "step",
//     "pass", "peer", "tag", "phase", "bytes", "flops", "buffer", "role", "kv_owner", "a2a",
//     "request", "waits_for"}]}], "buffers": [{"id", "label", "role", "bytes", "blocks"}],
//    "note", "contract"}
// with -1 / null where a field does not apply ("peer" of a compute op, ...); "contract" is
// "ok" or the first violation. `kv_owner` is the ring position whose K,V an attention op
// reads, or whose block of a gathered buffer (all_gather) an op names, or the member of an
// all-to-all's group a staging block is for (on a pack or unpack: this rank's own index);
// the table shows such a block as buffer[position]. `a2a` is what an all-to-all's ops move
// ("qkv", "out", "dout", "dqkv"; null elsewhere), shown after the kind in the table.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/plan_report.h"
#include "cli/table.h"
#include "planner/input_error.h"
#include "planner/input_limits.h"
#include "planner/message_contract.h"
#include "planner/plan_loader.h"
#include "planner/schedule.h"

namespace rm::cli {

namespace {


struct ScheduleCliOptions {
  std::string plan_path;
  std::string profile;
  int rank = -1;  // -1 = every rank
  int layers = 0;
  std::string format = "table";
};

bool is_transfer(const Op& op) {
  return op.kind == OpKind::kSend || op.kind == OpKind::kRecv || op.kind == OpKind::kCollective;
}

const char* pass_name(const Op& op) { return op.backward ? "backward" : "forward"; }

nlohmann::json op_json(const OpSchedule& s, const Op& op, int index) {
  nlohmann::json j;
  j["index"] = index;
  j["kind"] = op_name(op);
  j["layer"] = op.layer;
  j["step"] = op.step;
  j["pass"] = pass_name(op);
  const bool xfer = is_transfer(op);
  j["peer"] = op.kind == OpKind::kSend || op.kind == OpKind::kRecv ? op.peer : -1;
  j["tag"] = xfer ? nlohmann::json(op.tag) : nlohmann::json(nullptr);
  j["phase"] = op.phase;
  j["bytes"] = xfer || op.kind == OpKind::kAlloc ? nlohmann::json(op.bytes) : nlohmann::json(nullptr);
  j["flops"] = op.kind == OpKind::kCompute ? nlohmann::json(op.flops) : nlohmann::json(nullptr);
  j["buffer"] = op.buffer >= 0 ? nlohmann::json(s.buffers[static_cast<size_t>(op.buffer)].label)
                               : nlohmann::json(nullptr);
  j["role"] = op.buffer >= 0 ? nlohmann::json(to_string(s.buffers[static_cast<size_t>(op.buffer)].role))
                             : nlohmann::json(nullptr);
  j["kv_owner"] = op.kv_owner;
  j["a2a"] = op.a2a != A2aPayload::kNone ? nlohmann::json(to_string(op.a2a)) : nlohmann::json(nullptr);
  j["request"] = xfer ? op.request : -1;
  j["waits_for"] = op.kind == OpKind::kWait ? op.request : -1;
  return j;
}

std::string op_size(const Op& op) {
  if (op.kind == OpKind::kCompute) return sig(op.flops) + " FLOP";
  if (is_transfer(op) || op.kind == OpKind::kAlloc) return sig(op.bytes) + " B";
  return "";
}

// "rank 3 (ring 0, position 3)", "(CP group 0, position 3)"; at cp 1 the rank is its
// data-parallel replica alone, with no position in it.
std::string rank_name(const PlanChoice& c, const RankSchedule& rs) {
  return "rank " + std::to_string(rs.gpu) + " (" + cp_group_noun(c) + " " + std::to_string(rs.ring) +
         (c.cp > 1 ? ", position " + std::to_string(rs.position) : "") + ")";
}

std::string rank_table(const OpSchedule& s, const PlanChoice& c, const RankSchedule& rs) {
  Table t({{"op", "", Align::kRight},
           {"kind", "", Align::kLeft},
           {"layer", "", Align::kRight},
           {"pass", "", Align::kLeft},
           {"step", "", Align::kRight},
           {"phase", "", Align::kRight},
           {"peer", "", Align::kRight},
           {"tag", "", Align::kRight},
           {"size", "", Align::kRight},
           {"buffer", "", Align::kLeft},
           {"role", "", Align::kLeft},
           {"request", "", Align::kRight}});
  for (size_t i = 0; i < rs.ops.size(); ++i) {
    const Op& op = rs.ops[i];
    const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
    const bool buffered = op.buffer >= 0;
    const BufferInfo* b = buffered ? &s.buffers[static_cast<size_t>(op.buffer)] : nullptr;
    std::string label = b ? b->label : "";
    // A block of a gathered or staging buffer (a pack or unpack covers every block).
    if (b && (gathered(b->role) || (a2a_staging(b->role) && op.kind != OpKind::kCompute)) && op.kv_owner >= 0)
      label += "[" + std::to_string(op.kv_owner) + "]";
    const std::string kind = op.a2a != A2aPayload::kNone && op.kind != OpKind::kWait
                                 ? std::string(op_name(op)) + " " + to_string(op.a2a)
                                 : op_name(op);
    std::string req;
    if (is_transfer(op)) req = "r" + std::to_string(op.request);
    if (op.kind == OpKind::kWait) req = "waits r" + std::to_string(op.request);
    t.add_row({std::to_string(i), kind, std::to_string(op.layer), pass_name(op),
               std::to_string(op.step), op.phase >= 0 ? std::to_string(op.phase) : "",
               p2p ? std::to_string(op.peer) : "", is_transfer(op) ? std::to_string(op.tag) : "",
               op_size(op), label, b ? to_string(b->role) : "", req});
  }
  return rank_name(c, rs) + ": " + std::to_string(rs.ops.size()) + " ops\n" + t.render();
}

void run_schedule(const ScheduleCliOptions& o) {
  if (o.layers < 0) fail_input(kCommandLine, "--layers", "must be >= 0 (0 = all layers)");
  const LoadedPlanFile l = load_plan_file(o.plan_path, o.profile);
  const int gpus = l.plan.job.gpus;
  if (o.rank >= gpus) {
    fail_input(kCommandLine, "--rank", "must be in [0, " + std::to_string(gpus - 1) + "], the plan's GPUs (got " +
                                     std::to_string(o.rank) + ")");
  }
  ScheduleOptions so;
  so.max_layers = o.layers;
  so.costs = &l.cost;
  so.where = o.plan_path;
  const OpSchedule s = generate_schedule(l.plan, l.model, *l.fabric, so);
  // The contract is a property of all lists together: checked before any filtering.
  const std::string violation = message_contract_violation(s);
  std::vector<const RankSchedule*> shown;
  for (const RankSchedule& rs : s.ranks)
    if (o.rank < 0 || rs.gpu == o.rank) shown.push_back(&rs);

  if (o.format == "json") {
    nlohmann::json j;
    j["ranks"] = nlohmann::json::array();
    for (const RankSchedule* rs : shown) {
      nlohmann::json r{{"rank", rs->gpu}, {"ring", rs->ring}, {"position", rs->position}};
      r["ops"] = nlohmann::json::array();
      for (size_t i = 0; i < rs->ops.size(); ++i) r["ops"].push_back(op_json(s, rs->ops[i], static_cast<int>(i)));
      j["ranks"].push_back(std::move(r));
    }
    j["buffers"] = nlohmann::json::array();
    for (size_t i = 0; i < s.buffers.size(); ++i) {
      j["buffers"].push_back({{"id", i}, {"label", s.buffers[i].label},
                              {"role", to_string(s.buffers[i].role)}, {"bytes", s.buffers[i].bytes},
                              {"blocks", s.buffers[i].blocks}});
    }
    j["note"] = s.note;
    j["contract"] = violation.empty() ? "ok" : violation;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::string out = "ringmaster schedule: " + o.plan_path + ", " + std::to_string(gpus) + " ranks" +
                      (s.note.empty() ? "" : " (" + s.note + ")") + "\n";
    for (const RankSchedule* rs : shown) out += "\n" + rank_table(s, l.plan.choice, *rs);
    out += "\nmessage contract (each link pairs sends and receives in posting order): " +
           (violation.empty() ? std::string("ok") : "BROKEN: " + violation) + "\n";
    std::fputs(out.c_str(), stdout);
  }
  if (!violation.empty()) throw std::runtime_error("the schedule breaks the message contract");
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto o = std::make_shared<ScheduleCliOptions>();
  auto* cmd = app.add_subcommand(
      "schedule",
      "Print each rank's op list for a plan (kind, layer, pass, step, posting phase, peer, tag, "
      "bytes or FLOPs, buffer and its role, requests) and check the message contract");
  cmd->add_option("--plan,plan", o->plan_path, "plan.yaml from `ringmaster plan -o`")->required();
  cmd->add_option("--rank", o->rank, "print this rank only (default: every rank)")
      ->check(CLI::Range(0, kMaxGpus - 1));
  cmd->add_option("--layers", o->layers, "emit only this many layers (they are identical); 0 = all");
  cmd->add_option("--profile", o->profile, "calibrated profile.yaml (sets the ops' efficiencies)");
  cmd->add_option("--format", o->format, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd->callback([o] { run_schedule(*o); });
}

}  // namespace rm::cli
