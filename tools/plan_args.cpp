#include "tools/plan_args.h"

namespace ampfuse::tools {

engine::ExecutorOptions PlanArgs::executor_options() const {
  engine::ExecutorOptions eo;
  eo.amp = amp.options();
  if (!amp.layout.empty()) eo.layout = amp.layout;  // also without AMP (f32 runs channels-last too)
  eo.fuse = !no_fuse;
  eo.constant_params = true;  // the weights stay bound: their derived forms are computed once
  eo.fold_batchnorm = !no_fuse && !no_fold_bn;
  eo.fuse_epilogues = !no_fuse && !no_epilogues;
  eo.relu_post_ops = relu_post_ops;
  eo.row_kernels = !no_fuse && !no_row_kernels;
  return eo;
}

}  // namespace ampfuse::tools
