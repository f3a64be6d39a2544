// `ringmaster tune`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_tune_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tune", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'tune' is not implemented yet"); });
}

}  // namespace rm::cli
