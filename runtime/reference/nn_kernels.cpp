#include "runtime/reference/custom_kernels.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

namespace ampfuse::runtime {

void register_nn_kernels() {
  ref::register_conv_kernels();
  ref::register_dense_kernels();
  ref::register_norm_kernels();
  ref::register_norm_train_kernels();
  ref::register_dropout_train_kernels();
  ref::register_softmax_kernels();
  ref::register_rnn_kernels();
  ref::register_zoo_norm_kernels();
  ref::register_ordering_kernels();
  ref::register_linalg_kernels();
  ref::register_adaptive_pool_kernels();
  ref::register_deformable_conv_kernels();
  ref::register_loss_backward_kernels();
  ref::register_nn_backward_kernels();
  ref::register_custom_op_kernel();
  register_sockeye_kernels();
}

}  // namespace ampfuse::runtime
