// `ringmaster validate`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'validate' is not implemented yet"); });
}

}  // namespace rm::cli
