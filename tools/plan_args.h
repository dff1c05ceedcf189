// The planning options `ampfuse run` and `dot` share, so that dot draws the plan run runs.
#pragma once

#include "engine/execution/executor.h"
#include "tools/amp_args.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace ampfuse::tools {

struct PlanArgs {
  AmpArgs amp;
  bool no_fuse = false;
  bool no_fold_bn = false;
  bool no_epilogues = false;
  bool relu_post_ops = false;
  bool no_row_kernels = false;

  // Fused runs fold BatchNorms into convolutions, run convolutions with their add and LeakyReLU
  // as oneDNN post-ops, generate row kernels, and keep the weights' derived forms.
  engine::ExecutorOptions executor_options() const;
};

// Adds --amp and its overrides, --no-fuse, --no-fold-bn, --no-epilogues, --relu-post-ops and
// --no-row-kernels.
void add_plan_args(CLI::App& cmd, PlanArgs& a);

}  // namespace ampfuse::tools
