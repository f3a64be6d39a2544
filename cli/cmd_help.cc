// `ringmaster help [COMMAND]`: the same text as `ringmaster COMMAND --help` (or the command
// list), for people who type help first.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "planner/input_error.h"

namespace rm::cli {

void add_help_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("help", "Help on one command: ringmaster help plan");
  auto name = std::make_shared<std::string>();
  cmd->add_option("command", *name, "the command to explain");
  cmd->callback([&app, name] {
    if (name->empty()) {
      // Through the formatter: App::help() would print the selected subcommand's (this one's).
      std::fputs(app.get_formatter()->make_help(&app, app.get_name(), CLI::AppFormatMode::Normal).c_str(), stdout);
      return;
    }
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == *name) {
        std::fputs(sub->help(app.get_name()).c_str(), stdout);
        return;
      }
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    fail_input(kCommandLine, "help", "expected a command: " + names + " (got '" + *name + "')");
  });
}

}  // namespace rm::cli
