// _contrib_AdaptiveAvgPooling2D (GluonCV's SE blocks, ResNeSt, PSPNet, DeepLab): average
// pooling to a given output size, each output cell averaging the input window
// [floor(i * H / OH), ceil((i + 1) * H / OH)) x [floor(j * W / OW), ceil((j + 1) * W / OW)),
// as MXNet 1.9.1's adaptive_avg_pooling.cc. An external (compute) op: the windows overlap
// and differ in size, which no access map expresses. The kernel is in
// runtime/reference/adaptive_pool_kernels.cpp; its gradient, _backward_AdaptiveAvgPooling2D
// (ir/ops/nn_backward.cpp), spreads each output's gradient evenly over its window.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

std::pair<int64_t, int64_t> adaptive_pool_output_size(const Attrs& a) {
  const std::vector<int64_t> s = a.get_ints("output_size");
  if (s.size() > 2) fail("output_size={} must have at most two values (height, width)", format_mxnet_attr(a.get("output_size")));
  const int64_t h = s.empty() ? 1 : s[0], w = s.size() == 2 ? s[1] : h;
  if (h < 1 || w < 1) fail("output_size={} must be positive", format_mxnet_attr(a.get("output_size")));
  return {h, w};
}

namespace {

OpDef adaptive_avg_pool_def() {
  OpDef d;
  d.name = "_contrib_AdaptiveAvgPooling2D";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {optional("output_size", AttrKind::IntList, std::vector<int64_t>{})};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    if (data->shape.size() != 4)
      fail("the data {} must be 4-d (N, C, H, W), as MXNet's AdaptiveAvgPooling2D", shape_str(data->shape));
    const auto [h, w] = adaptive_pool_output_size(ctx.attrs);
    ctx.outputs[0] = TensorType{data->dtype, {data->shape[0], data->shape[1], h, w}};
  };
  // MXNet 1.9.1: FP16_FP32_FUNCS in the fp16 list, FP32_FUNCS in the bf16 one.
  d.amp_fp16 = AmpClass::neutral;
  d.amp_bf16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) {
    InputGrads grads(1);
    if (c.out_grad_opt(0))
      grads[0] = c.emit_typed("_backward_AdaptiveAvgPooling2D", {c.input(0), *c.out_grad_opt(0)}, c.attrs());
    return grads;
  };
  return d;
}

}  // namespace

void register_adaptive_pool_ops(OpRegistry& r) { r.add(adaptive_avg_pool_def()); }

}  // namespace ampfuse::ir::nn
