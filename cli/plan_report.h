// The human rendering of plans: one plan in detail (`plan`), many as one row each
// (`sweep`). `--format json` prints plan_to_json instead; these are only the tables (and the
// track record line under them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/table.h"
#include "planner/cost_params.h"
#include "planner/model_spec.h"
#include "planner/plan.h"
#include "planner/published_accuracy.h"
#include "planner/topology.h"

namespace rm::cli {

// What the header says besides the job: the sequence length as the user typed it ("128000",
// "1.5M"; empty: the plan's, formatted) and lines on the defaults and questions that shaped
// the answer.
struct ReportHeader {
  std::string seq_as_typed;
  std::vector<std::string> notes;
};

// "only 2 sequences a step: 6 of 8 data-parallel replicas idle" where the batch leaves some of
// `dp` replicas without a sequence, else "".
std::string idle_replicas_text(const Job& job, int dp);
// The sweep table's "cp kind" cell ("-" at cp 1, Megatron's cp_comm_type, a2a+p2p with its
// split: "a2a+p2p 8x2") and "cp x dp" cell (with ", tp T" and ", pp P[/virtual stages]").
std::string cp_kind_cell(const PlanChoice& c);
std::string layout_cell(const PlanChoice& c);
// The "schedule" and "balance" cells: "-" where the plan has none (has_ring_schedule,
// has_load_balance).
std::string schedule_cell(const PlanChoice& c);
std::string balance_cell(const PlanChoice& c);

// The choice, the prediction with its memory breakdown, the baselines, and the overlap
// threshold of each link class of the topology.
std::string plan_report(const Plan& plan, const Topology& topo, const CostParams& cost,
                        const ModelSpec& model, bool max_seq, const ReportHeader& header = {});

// The per-link-class overlap thresholds (c >= F/B, the Ring Attention paper's Table 2).
std::string overlap_threshold_table(const Topology& topo, const CostParams& cost, const ModelSpec& model);

// One row per plan: the sweep table's columns. Callers may add columns after these.
std::vector<Column> sweep_columns();
// `seq_as_typed`: the length as the user typed it (1.5M, 128000), shown as typed; "" shows
// format_size's spelling.
std::vector<std::string> sweep_cells(const Plan& plan, const std::string& seq_as_typed = "");

// "track record: 13 published a100-80gb step runs priced within a median 2.9 % (held out 6:
// 3.8 %), worst 26.2 % (id); ringmaster validate --published", or why there is none: the line
// under plan's header and sweep's table (planner/published_accuracy.h plan_track_record).
std::string track_record_line(const Job& job, bool calibrated, const std::optional<TrackRecord>& t);

// ", fp8 linear layers (delayed)" after the attention kernel in plan's and sweep's headers;
// "" for bf16.
std::string fp8_header_text(const Job& job);

// "closest published runs: id (gpu) -26.7 %, ...; (published - predicted) / predicted,
// ringmaster validate --published --entry ID": the line under the track record in plan's
// header (planner/published_accuracy.h closest_runs); nullopt when there are none.
std::optional<std::string> closest_runs_line(const std::vector<ClosestRun>& runs);

}  // namespace rm::cli
