// The neural-network kernel families that register_nn_kernels (nn_kernels.cpp) registers.
// Private to runtime/reference/.
#pragma once

namespace ampfuse::runtime::ref {

void register_conv_kernels();      // Convolution, Deconvolution, Pooling
void register_dense_kernels();     // FullyConnected, dot, batch_dot, Embedding
void register_norm_kernels();      // BatchNorm, LayerNorm
void register_softmax_kernels();   // softmax, log_softmax, SoftmaxOutput
void register_rnn_kernels();       // RNN
void register_custom_op_kernel();  // Custom, dispatching on op_type

}  // namespace ampfuse::runtime::ref
