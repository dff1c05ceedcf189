// The AMP options `ampfuse convert`, `run` and `dot` share: --amp and the class overrides.
#pragma once

#include "engine/passes/amp_options.h"

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
};

// Adds --amp (with `amp_help`, its values shown as `amp_values`) and, with `overrides`, the
// op-class and layout options. Returns the --amp option.
CLI::Option* add_amp_args(CLI::App& cmd, AmpArgs& a, const std::string& amp_help, bool overrides,
                          const std::string& amp_values = "off|bf16|fp16");

}  // namespace ampfuse::tools
