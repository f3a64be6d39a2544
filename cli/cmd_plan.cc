// `ringmaster plan`: placeholder until its issue lands.
#include <stdexcept>

#include "cli/commands.h"

namespace rm::cli {

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "(not built yet)");
  cmd->callback([] { throw std::runtime_error("'plan' is not implemented yet"); });
}

}  // namespace rm::cli
