// `ringmaster sweep`: plan a grid of GPU counts x sequence lengths. With no options it is
// the study's suite: 8K..1M tokens on 16..128 GPUs of the DGX A100 cluster with Llama-2
// 7B, the 7B-class model the Ring Attention paper trains on A100s (and MHA, so the paper's
// c >= F/B threshold applies unchanged): 24 rows.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/plan_questions.h"
#include "cli/plan_report.h"
#include "cli/sweep.h"
#include "planner/input_error.h"
#include "planner/published_accuracy.h"
#include "planner/export_target.h"
#include "planner/input_limits.h"
#include "planner/parallel_for.h"
#include "planner/pipeline_parallel.h"
#include "planner/search.h"
#include "planner/spec_library.h"
#include "planner/units.h"
#include "simulator/simulate.h"

namespace rm::cli {

std::vector<SweepRow> plan_sweep(const JobOptions& options, const std::vector<int>& gpus,
                                 const std::vector<int64_t>& seqs, bool progress, const SweepShard& shard,
                                 const std::string& target) {
  size_t total = 0;
  for (size_t i = 0; i < gpus.size() * seqs.size(); ++i) total += shard.holds(i);
  // One planner per GPU count (its traffic patterns are reused across lengths), and the
  // counts share nothing, so each is planned on a thread of its own: the rows, and each
  // row's search, are what one thread would find.
  std::vector<std::vector<SweepRow>> by_count(gpus.size());
  std::atomic<size_t> done{0};
  auto plan_count = [&](size_t gi) {
    const int g = gpus[gi];
    std::optional<ResolvedJob> r;
    std::optional<Planner> planner;
    for (size_t si = 0; si < seqs.size(); ++si) {
      const size_t grid_row = gi * seqs.size() + si;
      if (!shard.holds(grid_row)) continue;
      if (!planner) {
        r = resolve_job(options, g, seqs.front());
        planner.emplace(r->model, *r->fabric, r->cost);
      }
      const auto t0 = std::chrono::steady_clock::now();
      Job job = r->job;
      job.seq_len = seqs[si];
      SweepRow row;
      row.grid_row = grid_row;
      row.plan = target.empty() ? planner->plan(job, r->pins)
                                : plan_job_for_target(*planner, *r, options, job, target, kCommandLine);
      row.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (progress) {
        const Plan& p = row.plan;
        std::fprintf(stderr, "sweep: [%zu/%zu] %d GPUs, %s tokens: tp %d x cp %d x dp %d, %s, %.1f ms\n",
                     done.fetch_add(1) + 1, total, g, format_size(seqs[si]).c_str(), p.choice.tp, p.choice.cp,
                     p.choice.dp, cp_exchange_text(p.choice).c_str(), 1e3 * row.plan_seconds);
      }
      by_count[gi].push_back(std::move(row));
    }
  };
  // Largest counts first: they take longest, so the threads finish together.
  std::vector<size_t> order(gpus.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return gpus[a] > gpus[b]; });
  parallel_for(order, plan_count);  // an error: the first in grid order
  std::vector<SweepRow> rows;
  for (std::vector<SweepRow>& count_rows : by_count)
    for (SweepRow& row : count_rows) rows.push_back(std::move(row));
  return rows;
}

namespace {

struct SweepOptions {
  JobOptions job;
  std::vector<std::string> seqs;  // "8k,32k" or "8k 32k"
  std::vector<std::string> gpus;
  std::string format = "table";
  bool simulate = false;
  std::optional<std::string> shard;  // "K/N" (sweep_shard.h); unset = the whole grid
  std::string headroom;               // as `plan --headroom`: parsed into job.headroom
  std::string target;                 // as `plan --target`: "" or megatron, torchtitan, slurm
};

// What defines a sweep's grid and its plans: parts of one sweep carry equal copies
// (sweep_shard.h), so merge can refuse parts of another.
// Every JobOptions field but the job size (the grid's lists stand for it) is here.
nlohmann::json sweep_identity(const SweepOptions& o, const JobOptions& j, const std::vector<int>& gpus,
                              const std::vector<int64_t>& seqs) {
  auto pin = [](const std::optional<int>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  return {{"model", j.model.empty() ? kDefaultModel : j.model},
          {"topology", j.topology.empty() ? kStudyTopology : j.topology},
          {"gpus", gpus}, {"seqs", seqs}, {"batch_tokens", j.batch_tokens},
          {"global_batch_size", j.global_batch_size ? nlohmann::json(*j.global_batch_size) : nlohmann::json()},
          {"causal", j.causal},
          {"chunked_loss", j.chunked_loss}, {"compiled_loss", j.compiled_loss},
          {"grad_reduce_in_fp32", j.grad_reduce_in_fp32},
          {"grad_reduce_in_bf16", j.grad_reduce_in_bf16}, {"workload", j.workload}, {"profile", j.profile},
          {"attention_kernel", j.attention_kernel}, {"fp8", j.fp8}, {"main_params_dtype", j.main_params_dtype},
          {"store_param_remainders", j.store_param_remainders}, {"exp_avg_dtype", j.exp_avg_dtype},
          {"exp_avg_sq_dtype", j.exp_avg_sq_dtype}, {"headroom", j.headroom}, {"tp", pin(j.tp)}, {"cp", pin(j.cp)},
          {"dp", pin(j.dp)}, {"tp_comm_overlap", j.tp_comm_overlap}, {"no_tp_comm_overlap", j.no_tp_comm_overlap},
          {"cp_comm_type", j.cp_comm_type}, {"hierarchical_cp_sizes", j.hierarchical_cp_sizes},
          {"schedule", j.schedule}, {"order", j.order}, {"load_balance", j.load_balance},
          {"block_q", pin(j.block_q)}, {"block_kv", pin(j.block_kv)}, {"kv_subblocks", pin(j.kv_subblocks)},
          {"checkpointing", j.checkpointing}, {"sharding", j.sharding}, {"micro_batch", pin(j.micro_batch)},
          {"pp", pin(j.pp)}, {"virtual_stages", pin(j.virtual_stages)},
          {"embedding_in_split", j.embedding_in_split}, {"no_embedding_in_split", j.no_embedding_in_split},
          {"loss_in_split", j.loss_in_split}, {"no_loss_in_split", j.no_loss_in_split}, {"simulate", o.simulate},
          {"target", o.target}};
}

// A row's replay, or why its plan is priced, not simulated (an interleaved pipeline with pp 2).
struct SimulatedRow {
  std::optional<sim::Simulation> sim;
  std::string why_not;
};

// Replays every row's plan on SimGrid (simulate.h), progress on stderr.
std::vector<SimulatedRow> simulate_rows(const JobOptions& options, const std::vector<SweepRow>& rows) {
  std::vector<SimulatedRow> out;
  for (const SweepRow& row : rows) {
    const Plan& p = row.plan;
    const std::string head = "sweep: [" + std::to_string(out.size() + 1) + "/" + std::to_string(rows.size()) + "] " +
                             std::to_string(p.job.gpus) + " GPUs, " + format_size(p.job.seq_len) + " tokens: ";
    if (std::string why = pp_replay_why_not(p.choice.pp, p.choice.virtual_stages); !why.empty()) {
      std::fprintf(stderr, "%snot simulated: %s\n", head.c_str(), why.c_str());
      out.push_back({std::nullopt, std::move(why)});
      continue;
    }
    const ResolvedJob r = resolve_job(options, p.job.gpus, p.job.seq_len);
    sim::SimulateOptions so;
    so.set_fast(true);  // as `simulate` without --full
    const sim::Simulation s = sim::simulate_plan(p, r.model, *r.fabric, r.cost, so);
    std::fprintf(stderr, "%ssimulated %.4g s (planner %.4g s), %.2f s wall\n", head.c_str(), s.step_time_s,
                 p.predicted.step_time_s, s.replay.wall_s);
    out.push_back({s, ""});
  }
  return out;
}

void run_sweep(const SweepOptions& o) {
  std::vector<int64_t> seqs = kStudySeqs;
  if (!o.seqs.empty()) {
    seqs.clear();
    for (const auto& s : o.seqs) seqs.push_back(parse_size(s, kCommandLine, "--seqs", kMaxSeqTokens));
  }
  std::vector<int> gpus;
  if (!o.gpus.empty()) {
    for (const auto& s : o.gpus) {
      const int64_t g = parse_size(s, kCommandLine, "--gpus", kMaxGpus);
      gpus.push_back(static_cast<int>(g));
    }
  } else {
    // The study's counts, as far as the topology reaches.
    const int max = load_topology(o.job.topology.empty() ? kStudyTopology : o.job.topology).max_gpus();
    for (int g : kStudyGpus)
      if (g <= max) gpus.push_back(g);
    if (gpus.empty()) gpus.push_back(max);
  }

  JobOptions job = o.job;
  job.headroom = o.headroom.empty() ? 0 : parse_percent(o.headroom, kCommandLine, "--headroom");
  const SweepShard shard = o.shard ? parse_shard(*o.shard, "--shard") : SweepShard{};
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<SweepRow> rows = plan_sweep(job, gpus, seqs, true, shard, o.target);
  const std::vector<SimulatedRow> sims = o.simulate ? simulate_rows(job, rows) : std::vector<SimulatedRow>{};
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (o.format == "json") {
    nlohmann::json plans = nlohmann::json::array();
    // One GPU type and workload for the whole grid: one record, carried by each row as `plan` carries it.
    const nlohmann::json record =
        rows.empty() ? nlohmann::json(nullptr)
                     : track_record_json(plan_track_record(rows.front().plan.job, !o.job.profile.empty()));
    for (size_t i = 0; i < rows.size(); ++i) {
      plans.push_back(plan_to_json(rows[i].plan));
      add_accuracy_json(plans.back(), rows[i].plan, !o.job.profile.empty(), record);
      if (o.simulate && sims[i].sim) plans.back()["simulated"] = sim::simulation_to_json(*sims[i].sim, false);
      if (o.simulate && !sims[i].sim) {
        plans.back()["simulated"] = nullptr;
        plans.back()["not_simulated"] = sims[i].why_not;
      }
    }
    nlohmann::json out{{"plans", plans}};
    if (o.shard) {
      std::vector<size_t> grid_rows;
      for (const SweepRow& row : rows) grid_rows.push_back(row.grid_row);
      out["shard"] = shard_to_json(shard, grid_rows, gpus.size() * seqs.size(), sweep_identity(o, job, gpus, seqs));
    }
    std::printf("%s\n", out.dump(2).c_str());
  } else if (rows.empty()) {
    std::printf("ringmaster sweep: shard %s holds no rows of this %zu-row grid\n", o.shard->c_str(),
                gpus.size() * seqs.size());
  } else {
    std::vector<Column> columns = sweep_columns();
    if (o.simulate) {
      columns.insert(columns.end(), {{"sim step", "s", Align::kRight},
                                     {"sim - pred", "%", Align::kRight},
                                     {"sim comm", "% exposed", Align::kRight},
                                     {"sim memory", "GiB", Align::kRight}});
    }
    std::map<int64_t, std::string> typed;  // each --seqs length as typed (1.5M, 128000)
    for (size_t i = 0; i < o.seqs.size(); ++i) typed.emplace(seqs[i], o.seqs[i]);
    Table t(columns);
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto as_typed = typed.find(rows[i].plan.job.seq_len);
      std::vector<std::string> cells = sweep_cells(rows[i].plan, as_typed == typed.end() ? "" : as_typed->second);
      if (o.simulate && !sims[i].sim) cells.insert(cells.end(), {"-", "-", "-", "-"});  // priced, not simulated
      if (o.simulate && sims[i].sim) {
        const sim::Simulation& s = *sims[i].sim;
        const double pred = rows[i].plan.predicted.step_time_s;
        cells.insert(cells.end(), {sig(s.step_time_s, 4), fixed(100 * (s.step_time_s - pred) / pred, 2),
                                   fixed(100 * s.comm_overhead, 1), fixed(s.memory_bytes_per_gpu / kGiB, 1)});
      }
      t.add_row(cells);
    }
    const Plan& first = rows.front().plan;
    if (o.format == "csv") {
      std::fputs(t.csv().c_str(), stdout);
    } else {
      // The global batch asked for: in tokens each row holds as many whole sequences as fit
      // in it (at least one); in sequences (--global-batch-size) every row holds that many.
      const std::string batch =
          o.job.global_batch_size
              ? std::to_string(*o.job.global_batch_size) + " sequences (--global-batch-size), at every length"
              : (o.job.batch_tokens.empty() ? format_size(kDefaultBatchTokens) + " tokens (--batch-tokens)"
                                            : o.job.batch_tokens + " tokens") +
                    " in whole sequences (at least one)";
      const std::string kept = job.headroom > 0 ? ", keeping " + fixed(100 * job.headroom, 0) +
                                                      " % of GPU memory free (--headroom)"
                                                : "";
      const std::string only =
          o.target.empty() ? ""
                           : std::string(", only plans for ") +
                                 display_name(parse_export_target(o.target, kCommandLine, "--target")) +
                                 " (--target " + o.target + ")";
      const bool calibrated = !o.job.profile.empty();
      const std::string fp8 = fp8_header_text(first.job);
      std::printf("ringmaster sweep: %s on %s, %s, attention %s%s, global batch %s%s%s\n%s\n%s\n",
                  first.job.model.c_str(), first.job.topology.c_str(),
                  first.job.causal ? "causal" : "full attention", first.job.attention_kernel.c_str(), fp8.c_str(),
                  batch.c_str(),
                  kept.c_str(), only.c_str(), t.render().c_str(),
                  track_record_line(first.job, calibrated, plan_track_record(first.job, calibrated)).c_str());
    }
  }
  std::fprintf(stderr, "sweep: %zu plans%s in %.2f s\n", rows.size(), o.simulate ? " (planned and simulated)" : "", secs);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto opts = std::make_shared<SweepOptions>();
  auto* cmd = app.add_subcommand(
      "sweep",
      "Plan every GPU count x sequence length. Default: the study's suite, 8K..1M tokens on 16..128 "
      "GPUs of dgx-a100-ib with llama2-7b (the 7B-class MHA model of the Ring Attention paper's A100 runs)");
  add_job_options(cmd, opts->job, false);
  cmd->add_option("--seqs", opts->seqs, "sequence lengths, e.g. 8k,32k,128k,256k,512k,1M (or space separated)")
      ->delimiter(',');
  cmd->add_option("--gpus", opts->gpus, "GPU counts, e.g. 16,32,64,128 (or space separated)")->delimiter(',');
  cmd->add_option("--format", opts->format, "table, json or csv")->check(CLI::IsMember({"table", "json", "csv"}));
  cmd->add_flag("--simulate", opts->simulate,
                "also replay each plan on SimGrid (like `simulate`): simulated step time, comm overhead, memory");
  cmd->add_option("--shard", opts->shard,
                  "run only the K-th of N disjoint parts of the grid, e.g. 3/8 (row i goes to part i mod N + 1); "
                  "`ringmaster merge` joins the parts' JSON");
  cmd->add_option("--headroom", opts->headroom,
                  "keep this share of GPU memory free, e.g. 10% (plans fit in the rest), as plan --headroom");
  cmd->add_option("--target", opts->target,
                  "plan each row as plan --target does: only plans the framework runs, priced as it runs them "
                  "(megatron or torchtitan), or that `ringmaster run` executes (slurm)")
      ->check(CLI::IsMember({"megatron", "torchtitan", "slurm"}));
  cmd->callback([opts] { run_sweep(*opts); });
}

}  // namespace rm::cli
