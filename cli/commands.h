// Each subcommand adds itself to the app; its callback does the work and returns through
// CliExit (see main.cc) so that errors map to exit codes in one place.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

namespace rm::cli {

void add_list_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_sweep_command(CLI::App& app);
void add_merge_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_tune_command(CLI::App& app);
void add_validate_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_report_command(CLI::App& app);
// `help CMD`: keeps a reference to `app` for the commands it explains.
void add_help_command(CLI::App& app);

// A finite number in [lo, hi] (CLI::Range and CLI::PositiveNumber let nan through).
CLI::Validator finite_in(double lo, double hi);
// A finite number in (0, hi].
CLI::Validator finite_positive(double hi);
// Whole counts (steps, ranks, rows): CLI::Range with these bounds names them in its message,
// where CLI::PositiveNumber and NonNegativeNumber print the double range up to 1.8e308.
inline constexpr int64_t kMaxCount = 1000000000;

}  // namespace rm::cli
