// The subcommands of the `ampfuse` program. Each adds itself to the parent app and returns
// the action to run once the command line is parsed and that subcommand was chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace ampfuse::tools {

struct Command {
  CLI::App* app;
  std::function<int()> run;  // returns the exit status; throws ampfuse::Error on failure
};

Command add_info_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_convert_command(CLI::App& parent);
Command add_fuzz_command(CLI::App& parent);
Command add_dot_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);

}  // namespace ampfuse::tools
