// ringmaster: will this model at this context length fit on this cluster, how fast will it
// train, and what exact ring-attention plan should I launch?
//
// Exit codes: 0 success, 1 run-time failure (a rank died, verification failed),
// 2 bad input (file, field and expectation named on stderr).
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "planner/input_error.h"

int main(int argc, char** argv) {
  CLI::App app{"ringmaster: plan, simulate and run ring attention for long-context training"};
  app.require_subcommand(1);
  app.fallthrough(false);
  rm::cli::add_list_command(app);
  rm::cli::add_plan_command(app);
  rm::cli::add_sweep_command(app);
  rm::cli::add_merge_command(app);
  rm::cli::add_simulate_command(app);
  rm::cli::add_schedule_command(app);
  rm::cli::add_run_command(app);
  rm::cli::add_train_command(app);
  rm::cli::add_calibrate_command(app);
  rm::cli::add_tune_command(app);
  rm::cli::add_validate_command(app);
  rm::cli::add_export_command(app);
  rm::cli::add_report_command(app);
  rm::cli::add_help_command(app);
  app.set_version_flag("--version", RM_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Bad CLI values are bad input: same exit code as a bad file.
    app.exit(e);
    return e.get_exit_code() == 0 ? 0 : rm::kExitBadInput;
  } catch (const rm::InputError& e) {
    std::fprintf(stderr, "ringmaster: %s\n", e.what());
    return rm::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringmaster: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
