// The ampfuse command line: parses, dispatches to a subcommand, and turns every failure
// into one "ampfuse: error: ..." line and exit status 1 (a user never sees a stack trace).
#include "ampfuse/version.h"
#include "ir/error.h"
#include "tools/commands.h"

#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

// `ampfuse --version`: this program, the LLVM it was built with, the oneDNN it runs with.
std::string version_text() {
  const dnnl_version_t* dnnl = dnnl_version();
  return fmt::format("ampfuse {}\nLLVM {}\noneDNN {}.{}.{}", AMPFUSE_VERSION, AMPFUSE_LLVM_VERSION, dnnl->major,
                     dnnl->minor, dnnl->patch);
}

int report_error(const char* message) {
  std::fflush(stdout);
  std::fprintf(stderr, "ampfuse: error: %s\n", message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ampfuse: a JIT fusion engine for mixed-precision deep-learning graphs (MXNet compatible).\n"
               "Inspects MXNet *-symbol.json models, converts them for automatic mixed precision, and runs\n"
               "them as fused kernels compiled at run time (or on the reference interpreter, which defines\n"
               "what every graph computes).",
               "ampfuse"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text, "Print the versions of ampfuse, LLVM and oneDNN and exit");
  app.footer("Run 'ampfuse COMMAND --help' for the options of a command.\n"
             "Exit status: 0 on success, 1 on any error (printed as 'ampfuse: error: ...'),\n"
             "2 from 'info --json' when output shapes could not be inferred.\n"
             "Environment: AMPFUSE_THREADS, AMPFUSE_TEAMS, OMP_NUM_THREADS, OMP_WAIT_POLICY, AMPFUSE_STRICT, AMPFUSE_DUMP,\n"
             "AMPFUSE_CACHE_DIR, AMPFUSE_FAULT and more\n"
             "(README.md, \"Environment switches\").");
  std::vector<ampfuse::tools::Command> commands = {ampfuse::tools::add_info_command(app),
                                                   ampfuse::tools::add_run_command(app),
                                                   ampfuse::tools::add_convert_command(app),
                                                   ampfuse::tools::add_fuzz_command(app),
                                                   ampfuse::tools::add_dot_command(app),
                                                   ampfuse::tools::add_train_command(app)};
  try {
    // CLI11 would only say "a subcommand is required" for a misspelt one.
    if (argc > 1 && argv[1][0] != '-' &&
        std::none_of(commands.begin(), commands.end(), [&](const auto& c) { return c.app->check_name(argv[1]); }))
      return report_error(fmt::format("unknown command '{}' (commands: info, run, convert, dot, fuzz, train)", argv[1]).c_str());
    app.parse(argc, argv);
    for (const auto& c : commands)
      if (c.app->parsed()) return c.run();
    return report_error("no command given (try 'ampfuse --help')");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help
    return report_error(fmt::format("{} (try 'ampfuse --help')", e.what()).c_str());
  } catch (const ampfuse::Error& e) {
    return report_error(e.what());
  } catch (const std::exception& e) {
    // Not expected (allocation failure, a filesystem error): still one line, not an abort.
    return report_error(e.what());
  }
}
