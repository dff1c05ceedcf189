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

// For every option that names a file or directory: an empty value (most often a shell
// variable that was never set) is refused, where the commands would otherwise take "" for
// "not given" and silently skip the file or fall back to the default model.
inline CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& s) { return s.empty() ? std::string("an empty path") : std::string(); }, "",
                        "NON_EMPTY");
}

Command add_info_command(CLI::App& parent);
Command add_run_command(CLI::App& parent);
Command add_convert_command(CLI::App& parent);
Command add_fuzz_command(CLI::App& parent);
Command add_dot_command(CLI::App& parent);
Command add_train_command(CLI::App& parent);

}  // namespace ampfuse::tools
