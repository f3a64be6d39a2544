// ringmaster: will this model at this context length fit on this cluster, how fast will it
// train, and what exact ring-attention plan should I launch?
//
// Exit codes: 0 success, 1 run-time failure (a rank died, verification failed),
// 2 bad input (file, field and expectation named on stderr).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "planner/input_error.h"
#include "planner/input_file.h"
#include "planner/input_limits.h"

int main(int argc, char** argv) {
  CLI::App app{"ringmaster: plan, simulate and run ring attention for long-context training"};
  app.require_subcommand(1);
  // The limits every reader enforces (planner/input_limits.h, planner/input_file.h).
  auto mib = [](rm::InputKind k) { return std::to_string(rm::max_input_bytes(k) >> 20) + " MiB"; };
  app.footer("Inputs: regular files only (not FIFOs, devices or folders), one YAML document, no key twice;\n"
             "at most " + mib(rm::InputKind::kTopology) + " for a topology, model or profile, " +
             mib(rm::InputKind::kPlan) + " for a plan, " + mib(rm::InputKind::kMeasurements) +
             " for measurements.\nJobs: at most " + std::to_string(rm::kMaxGpus) + " GPUs, " +
             std::to_string(rm::kMaxGpusPerNode) + " per node; sequences up to 1G (2^30) tokens, batches up to "
             "2^40.\nBad input exits 2 naming the file, line and field (README: What the readers promise).");
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
  // CLI11's own parse errors (an unknown option, a value out of range) read like ours.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("ringmaster: command line: ") + e.what() + "\nRun with --help for more information.\n";
  });
  try {
    // An empty value ("--topology ''", "-o ''") is a mistake, never "use the default".
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.empty()) {
        rm::fail_input(rm::kCommandLine, i > 1 ? argv[i - 1] : "argument " + std::to_string(i),
                       "expected a value (got an empty string)");
      }
      if (arg.rfind("--", 0) == 0 && arg.back() == '=') {
        rm::fail_input(rm::kCommandLine, arg.substr(0, arg.size() - 1), "expected a value (got an empty string)");
      }
    }
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
