// The command-line options of tools/amp_args.h and tools/plan_args.h (CLI11), apart from the
// options they build, which the Python module uses too.
#include "tools/amp_args.h"
#include "tools/plan_args.h"

#include <CLI/CLI.hpp>

namespace ampfuse::tools {

CLI::Option* add_amp_args(CLI::App& cmd, AmpArgs& a, const std::string& amp_help, bool overrides,
                          const std::string& amp_values) {
  CLI::Option* amp = cmd.add_option("--amp", a.amp, amp_help)->type_name(amp_values);
  if (!overrides) return amp;
  cmd.add_option("--lp16-ops", a.lp16_ops, "Ops that run in the low-precision type (comma-separated)")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--fp32-ops", a.fp32_ops, "Ops that stay in f32")->delimiter(',')->type_name("OP,...");
  cmd.add_option("--widest-ops", a.widest_ops, "Ops that run in the widest type of their inputs (amp_multicast)")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--neutral-ops", a.neutral_ops, "Ops that run in whatever type their inputs have")
      ->delimiter(',')
      ->type_name("OP,...");
  cmd.add_option("--exclude", a.exclude, "Node names that stay in f32")->delimiter(',')->type_name("NAME,...");
  cmd.add_flag("--cast-params-offline", a.cast_params_offline,
               "Store a weight in the low-precision type when every reader casts it");
  cmd.add_flag("--cast-narrow", a.cast_narrow, "Widest-type ops with mixed inputs run in low precision");
  cmd.add_option("--layout", a.layout,
                 "Where convolution regions run: auto (run's default: channels-last for inference on the CPU), "
                 "nhwc (channels-last) or keep (the model's layout)")
      ->type_name("auto|nhwc|keep");
  return amp;
}

void add_plan_args(CLI::App& cmd, PlanArgs& a) {
  add_amp_args(cmd, a.amp, "Convert for automatic mixed precision first (default off)", true);
  cmd.add_flag("--no-fuse", a.no_fuse, "Plan op by op: one compiled kernel per elementwise op");
  cmd.add_flag("--no-fold-bn", a.no_fold_bn,
               "Keep each BatchNorm that follows a Convolution (fused plans fold it into the convolution's weights "
               "and bias, computed once)");
  cmd.add_flag("--no-epilogues", a.no_epilogues,
               "Keep the add and LeakyReLU after each Convolution and FullyConnected as fused kernels (fused inference "
               "plans on the CPU run them as oneDNN post-ops of that op)");
  cmd.add_flag("--relu-post-ops", a.relu_post_ops,
               "Run a relu after a Convolution or FullyConnected as its oneDNN post-op too: faster, but NaN becomes 0 "
               "there, as in MXNet's oneDNN fusion (without it the relu keeps NaN)");
  cmd.add_flag("--no-row-kernels", a.no_row_kernels,
               "Run softmax, log_softmax, LayerNorm and sum/mean/max/min on oneDNN or the reference kernels (fused "
               "inference plans on the CPU generate them, over the last axis, with the kernels around them merged in)");
}

}  // namespace ampfuse::tools
