// The AMP options `ampfuse convert`, `run` and `dot` share: --amp and the class overrides.
#pragma once

#include "engine/passes/amp_options.h"
#include "ir/graph.h"

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ampfuse::tools {

struct AmpArgs {
  std::string amp = "off";  // off, bf16, fp16
  std::vector<std::string> lp16_ops, fp32_ops, widest_ops, neutral_ops, exclude;
  bool cast_params_offline = false;
  bool cast_narrow = false;
  std::string layout;

  // The options for engine::convert_for_amp, or nullopt for --amp off. Throws
  // ampfuse::Error naming the option for a bad value.
  std::optional<engine::AmpOptions> options() const;
  // The options for `convert` (the CLI's and the Python module's), which writes a model:
  // --amp must be bf16 or fp16, and --layout nhwc or keep (a file has no "auto").
  engine::AmpOptions convert_options() const;
};

// Throws ampfuse::Error for an --exclude name that is no node of `g` (the model as loaded,
// before conversion): a misspelt name would otherwise leave that node in low precision
// without a word.
void check_excluded_nodes(const std::optional<engine::AmpOptions>& amp, const ir::Graph& g);

// Adds --amp (with `amp_help`, its values shown as `amp_values`) and, with `overrides`, the
// op-class and layout options. Returns the --amp option.
CLI::Option* add_amp_args(CLI::App& cmd, AmpArgs& a, const std::string& amp_help, bool overrides,
                          const std::string& amp_values = "off|bf16|fp16");

}  // namespace ampfuse::tools
