// `ringmaster run`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'run' is not implemented yet"); });
}

}  // namespace rm::cli
