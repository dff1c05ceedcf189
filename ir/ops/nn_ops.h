// The neural-network op families that register_nn_ops (ir/ops/nn.cpp) registers, and the
// inference helpers they share. Private to ir/ops/.
#pragma once

#include "ir/error.h"
#include "ir/op_registry.h"

#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir::nn {

void register_conv_ops(OpRegistry& r);     // Convolution, Deconvolution, Pooling, _fused_conv
void register_dense_ops(OpRegistry& r);    // FullyConnected, _fused_fc, dot, batch_dot, Embedding
void register_norm_ops(OpRegistry& r);     // BatchNorm, LayerNorm
void register_norm_train_ops(OpRegistry& r);     // _BatchNorm_train
void register_dropout_train_ops(OpRegistry& r);  // _Dropout_train
void register_softmax_ops(OpRegistry& r);  // softmax, log_softmax, softmin, SoftmaxActivation, SoftmaxOutput
void register_rnn_ops(OpRegistry& r);      // RNN
void register_zoo_norm_ops(OpRegistry& r);     // InstanceNorm, GroupNorm, L2Normalization, LRN
void register_ordering_ops(OpRegistry& r);     // norm, nansum, argmax..., topk, sort, argsort
void register_loss_linalg_ops(OpRegistry& r);  // regression outputs, MakeLoss, _linalg_gemm*
void register_adaptive_pool_ops(OpRegistry& r);  // _contrib_AdaptiveAvgPooling2D
void register_deformable_conv_ops(OpRegistry& r);  // _contrib_ModulatedDeformableConvolution
void register_loss_backward_ops(OpRegistry& r);  // _backward_softmax, _backward_SoftmaxOutput, norms

// The gradient rule of a normalization (data, gamma, beta) -> y [, mean, std]: one
// `backward_op` node (ir/ops/nn_loss_backward.cpp) of dy, data and gamma with the forward
// node's attributes `copied`, giving dx, dgamma and dbeta. Throws when a gradient reaches
// the statistics of output_mean_var=True.
InputGrads normalization_gradient(GradContext& c, const std::string& backward_op,
                                  const std::vector<std::string>& copied);
void register_nn_backward_ops(OpRegistry& r);    // _backward_Convolution_weight, _backward_Pooling...

// `base` (Convolution or FullyConnected: inputs data, weight, bias unless no_bias) with an
// epilogue, as op `name` (_fused_conv, _fused_fc; ir/ops/nn_epilogue.cpp).
OpDef with_epilogue(OpDef base, std::string name);

// Attribute schema entries.
inline AttrSpec required(std::string name, AttrKind kind) { return {std::move(name), kind, std::nullopt, {}}; }
inline AttrSpec optional(std::string name, AttrKind kind, AttrValue fallback) {
  return {std::move(name), kind, std::move(fallback), {}};
}
// A normalization's eps, added to the variance under a square root.
inline AttrSpec epsilon(double fallback) { return optional("eps", AttrKind::Float, fallback); }
// eps must be 0 or more: a negative one turns a small variance into the square root of a
// negative number, NaN for every element of that channel. Each forward normalization's
// infer calls this, so info refuses the graph as run does.
inline void check_epsilon(const Attrs& a) {
  const double eps = a.get_float("eps");
  if (!(eps >= 0)) fail("eps={} must be 0 or more", eps);
}
inline AttrSpec none_by_default(std::string name, AttrKind kind) {
  return {std::move(name), kind, AttrValue{std::monostate{}}, {}};
}
inline AttrSpec one_of(std::string name, std::string fallback, std::vector<std::string> choices) {
  return {std::move(name), AttrKind::String, AttrValue{std::move(fallback)}, std::move(choices)};
}
// MXNet's `layout` of Convolution, Deconvolution and Pooling; "None" is channels first.
AttrSpec layout_attr();

// Input i's type when inference knows it; nullptr while its producer is still open (the
// op then leaves its outputs unknown and the graph's inference comes back to it).
const TensorType* known_input(const InferContext& ctx, size_t i);
// Fills unknown input i (a weight MXNet's JSON gives no shape) with `want`; a known one
// must equal it. `detail`, when given, ends the message ("the data has 3 channels").
void fill_input(InferContext& ctx, size_t i, std::string_view slot, const TensorType& want,
                std::string_view detail = {});
// As fill_input, but a known input may have any float dtype (BatchNorm's statistics).
void fill_float_input(InferContext& ctx, size_t i, std::string_view slot, const TensorType& want);
// Throws unless `t` is a floating-point type.
void require_float(const TensorType& t, std::string_view what);

// The gradient rule of a matrix product op(A) * op(B) computed by `op` (dot, batch_dot,
// _linalg_gemm2) with transpose_a / transpose_b: each operand's gradient is another
// product by the same op of the head gradient and the other operand. `extra` attributes
// (gemm2's alpha) are copied onto those products. dot first reshapes its operands to the
// matrices it reads them as; the batched ops need no reshape.
InputGrads matmul_gradient(GradContext& c, const std::string& op, const std::vector<std::string>& extra = {});

}  // namespace ampfuse::ir::nn
