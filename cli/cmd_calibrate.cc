// `ringmaster calibrate`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'calibrate' is not implemented yet"); });
}

}  // namespace rm::cli
