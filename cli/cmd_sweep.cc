// `ringmaster sweep`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_sweep_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'sweep' is not implemented yet"); });
}

}  // namespace rm::cli
