// The neural-network kernel families that register_nn_kernels (nn_kernels.cpp) registers.
// Private to runtime/reference/.
#pragma once

#include "ir/graph.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace ampfuse::runtime::ref {

void register_conv_kernels();      // Convolution, Deconvolution, Pooling, _fused_conv
void register_dense_kernels();     // FullyConnected, _fused_fc, dot, batch_dot, Embedding
void register_norm_kernels();      // BatchNorm, LayerNorm
void register_norm_train_kernels();     // _BatchNorm_train
void register_dropout_train_kernels();  // _Dropout_train
void register_softmax_kernels();   // softmax, log_softmax, softmin, SoftmaxActivation, SoftmaxOutput
void register_rnn_kernels();       // RNN
void register_zoo_norm_kernels();  // InstanceNorm, GroupNorm, L2Normalization, LRN
void register_ordering_kernels();  // argmax..., norm, nansum, nanprod, topk, sort, argsort
void register_linalg_kernels();    // _linalg_gemm2, _linalg_gemm
void register_adaptive_pool_kernels();  // _contrib_AdaptiveAvgPooling2D
void register_deformable_conv_kernels();  // _contrib_ModulatedDeformableConvolution
void register_loss_backward_kernels();  // _backward_softmax, _backward_SoftmaxOutput, norms
void register_custom_op_kernel();  // Custom, dispatching on op_type
void register_nn_backward_kernels();  // _backward_Convolution_weight, _backward_Pooling...

// _fused_conv's and _fused_fc's epilogue (ir/ops/nn_epilogue.cpp) on `y`, the op's result
// in its compute type: + the residual (the node's last input, with with_residual), then the
// activation, each by its op's scalar recipe (elemwise_add, relu), with no rounding between;
// the caller rounds once when it stores.
Tensor apply_epilogue(const ir::Node& node, std::span<const Tensor> in, Tensor y);
template <class T>
void apply_epilogue(const ir::Node& node, std::span<const Tensor> in, std::vector<T>& y, const ir::Shape& shape) {
  Tensor acc(TensorType{std::is_same_v<T, double> ? ir::DType::f64 : ir::DType::f32, shape});
  store(y, acc);  // exact: T is that type
  y = load<T>(apply_epilogue(node, in, std::move(acc)));
}

// The weight row an Embedding index reads (forward) or adds to (backward): truncated toward
// zero and clipped into [0, rows), as MXNet's Embedding does; NaN reads row 0.
int64_t embedding_row(double index, int64_t rows);

}  // namespace ampfuse::runtime::ref
