// `ringmaster simulate`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_simulate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'simulate' is not implemented yet"); });
}

}  // namespace rm::cli
