// The ops the heavy NN layers' gradient rules need beyond forward ops:
//   _backward_Convolution_weight(data, out_grad): Convolution's weight gradient (and, with
//       the roles swapped, Deconvolution's; see convolution_gradient in nn_conv.cpp);
//   _backward_Pooling(data, out_grad): Pooling's data gradient;
//   _backward_AdaptiveAvgPooling2D(data, out_grad): its data gradient;
//   _backward_Embedding(data, out_grad): the weight gradient, a scatter-add of rows.
// Each takes its forward op's attributes, is a compute op (not fused, AMP neutral) and has
// a plain-loop reference kernel in runtime/reference/nn_backward_kernels.cpp. The data
// gradients of Convolution and Deconvolution need no op of their own: each is the other's
// forward (see nn_conv.cpp).
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

// A backward op reading (data, out_grad) under the attributes of forward op `forward`.
OpDef backward_def(const OpRegistry& r, const std::string& forward, std::vector<InputSlot> inputs) {
  const OpDef& fwd = r.get(forward);
  OpDef d;
  d.name = "_backward_" + forward;
  d.kind = OpKind::compute;
  d.inputs = std::move(inputs);
  d.attrs = fwd.attrs;
  d.ignored_attrs = fwd.ignored_attrs;
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  return d;
}

// The gradient arriving at the forward output must have the output's type.
void require_out_grad(const InferContext& ctx, const TensorType& want) {
  const TensorType& got = ctx.in(1);
  if (got != want) fail("input 1 (out_grad) is {} but the forward output is {}", type_str(got), type_str(want));
}

OpDef convolution_weight_def(const OpRegistry& r) {
  OpDef d = backward_def(r, "Convolution", {{"data"}, {"out_grad"}});
  d.name = "_backward_Convolution_weight";
  d.infer = [](InferContext& ctx) {
    const TensorType& data = ctx.in(0);
    require_float(data, "input 0 (data)");
    const ConvGeometry g = conv_geometry(ctx.attrs, data.shape, false);
    require_out_grad(ctx, {data.dtype, g.output_shape()});
    ctx.outputs[0] = TensorType{data.dtype, g.weight_shape()};
  };
  return d;
}

OpDef pooling_backward_def(const OpRegistry& r) {
  OpDef d = backward_def(r, "Pooling", {{"data"}, {"out_grad"}});
  d.infer = [](InferContext& ctx) {
    const TensorType& data = ctx.in(0);
    require_float(data, "input 0 (data)");
    require_out_grad(ctx, {data.dtype, pool_geometry(ctx.attrs, data.shape).output_shape()});
    ctx.outputs[0] = data;
  };
  return d;
}

OpDef adaptive_avg_pool_backward_def(const OpRegistry& r) {
  OpDef d = backward_def(r, "_contrib_AdaptiveAvgPooling2D", {{"data"}, {"out_grad"}});
  d.name = "_backward_AdaptiveAvgPooling2D";
  d.infer = [](InferContext& ctx) {
    const TensorType& data = ctx.in(0);
    require_float(data, "input 0 (data)");
    if (data.shape.size() != 4) fail("the data {} must be 4-d (N, C, H, W)", shape_str(data.shape));
    const auto [h, w] = adaptive_pool_output_size(ctx.attrs);
    require_out_grad(ctx, {data.dtype, {data.shape[0], data.shape[1], h, w}});
    ctx.outputs[0] = data;
  };
  return d;
}

OpDef embedding_backward_def(const OpRegistry& r) {
  OpDef d = backward_def(r, "Embedding", {{.name = "data", .index = true}, {"out_grad"}});
  d.infer = [](InferContext& ctx) {
    const TensorType& indices = ctx.in(0);
    const TensorType& grad = ctx.in(1);
    require_float(grad, "input 1 (out_grad)");
    const int64_t rows = ctx.attrs.get_int("input_dim"), cols = ctx.attrs.get_int("output_dim");
    Shape want = indices.shape;
    want.push_back(cols);
    require_out_grad(ctx, {grad.dtype, want});
    ctx.outputs[0] = TensorType{grad.dtype, {rows, cols}};
  };
  return d;
}

}  // namespace

void register_nn_backward_ops(OpRegistry& r) {
  r.add(convolution_weight_def(r));
  r.add(pooling_backward_def(r));
  r.add(adaptive_avg_pool_backward_def(r));
  r.add(embedding_backward_def(r));
}

}  // namespace ampfuse::ir::nn
