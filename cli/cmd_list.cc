// `ringmaster list`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_list_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("list", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'list' is not implemented yet"); });
}

}  // namespace rm::cli
