#include "tools/plan_args.h"

namespace ampfuse::tools {

engine::ExecutorOptions PlanArgs::executor_options() const {
  engine::ExecutorOptions eo;
  eo.amp = amp.options();
  eo.fuse = !no_fuse;
  eo.constant_params = true;  // the weights stay bound: their derived forms are computed once
  eo.fold_batchnorm = !no_fuse && !no_fold_bn;
  return eo;
}

void add_plan_args(CLI::App& cmd, PlanArgs& a) {
  add_amp_args(cmd, a.amp, "Convert for automatic mixed precision first (default off)", true);
  cmd.add_flag("--no-fuse", a.no_fuse, "Plan op by op: one compiled kernel per elementwise op");
  cmd.add_flag("--no-fold-bn", a.no_fold_bn,
               "Keep each BatchNorm that follows a Convolution (fused plans fold it into the convolution's weights "
               "and bias, computed once)");
}

}  // namespace ampfuse::tools
