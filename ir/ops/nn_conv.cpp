// Convolution, Deconvolution and Pooling: schemas, type inference and gradient rules.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

// Names the two channel counts when a given weight disagrees with the data on them, which
// is the usual cause of a weight shape mismatch.
std::string channel_detail(const ConvGeometry& g, const std::optional<TensorType>& weight) {
  const Shape want = g.weight_shape();
  if (!weight || weight->shape.size() != want.size()) return {};
  const size_t c = g.channels_last ? want.size() - 1 : 1;
  const size_t c_in = g.deconv ? 0 : c;  // the weight dimension that counts data channels
  const int64_t per = g.deconv ? 1 : g.groups;
  if (weight->shape[c_in] == want[c_in]) return {};
  return fmt::format("the data has {} channels but the weight is for {}", g.in_channels, weight->shape[c_in] * per);
}

// Convolution and Deconvolution are each other's transposes over one weight (MXNet's
// layouts line Convolution's (O, C/g, k...) up with Deconvolution's (C, F/g, k...)), so
//   Convolution:   dx = Deconvolution(dy, w), adj giving back the input extents that the
//                  stride's rounding down lost; dw = _backward_Convolution_weight(x, dy);
//   Deconvolution: dx = Convolution(dy, w); dw = _backward_Convolution_weight(dy, x), the
//                  image and the window grid trading places;
// and the bias gets dy summed over every axis but the channels, in the bias's dtype. The
// data gradients thus run on the forward kernels (oneDNN in the executor).
InputGrads convolution_gradient(GradContext& c, bool deconv) {
  const Attrs attrs = c.attrs();
  const TensorType data = c.input_type(0);
  const bool has_bias = c.num_inputs() > 2;
  const DType bias_dtype = has_bias ? c.input_type(2).dtype : data.dtype;
  const ConvGeometry g = conv_geometry(attrs, data.shape, deconv);
  InputGrads grads(c.num_inputs());
  if (!c.out_grad_opt(0)) return grads;
  const ValueRef dy = *c.out_grad_opt(0);
  // The forward's window as Convolution attributes with `filters` outputs and no bias.
  const auto conv_attrs = [&](int64_t filters) {
    Attrs a = attrs;
    a.erase("adj");
    a.erase("target_shape");
    a.set("num_filter", filters);
    a.set("no_bias", true);
    return a;
  };
  if (c.wants(0) && deconv) grads[0] = c.emit_typed("Convolution", {dy, c.input(1)}, conv_attrs(g.in_channels));
  if (c.wants(0) && !deconv) {
    Attrs a = conv_attrs(g.in_channels);
    std::vector<int64_t> adj;
    for (size_t i = 0; i < g.spatial(); ++i) {
      const int64_t span = g.dilate[i] * (g.kernel[i] - 1) + 1;
      adj.push_back((g.in_size[i] + 2 * g.pad[i] - span) % g.stride[i]);
    }
    a.set("adj", adj);
    grads[0] = c.emit_typed("Deconvolution", {dy, c.input(1)}, std::move(a));
  }
  if (c.wants(1))
    grads[1] = deconv ? c.emit_typed("_backward_Convolution_weight", {dy, c.input(0)}, conv_attrs(g.in_channels))
                      : c.emit_typed("_backward_Convolution_weight", {c.input(0), dy}, conv_attrs(g.out_channels));
  if (has_bias && c.wants(2)) {
    const int64_t rank = static_cast<int64_t>(data.shape.size()), channel_axis = g.channels_last ? rank - 1 : 1;
    std::vector<int64_t> axes;
    for (int64_t i = 0; i < rank; ++i)
      if (i != channel_axis) axes.push_back(i);
    Attrs a;
    a.set("axis", axes);
    grads[2] = c.emit_typed("sum", {c.cast(dy, bias_dtype)}, std::move(a));
  }
  return grads;
}

// The data gradient, _backward_Pooling (ir/ops/nn_backward.cpp), recomputes each window
// from the data: max pooling's gradient goes to the window's first maximum, as MXNet's.
InputGrads pooling_gradient(GradContext& c) {
  InputGrads grads(1);
  if (c.out_grad_opt(0)) grads[0] = c.emit_typed("_backward_Pooling", {c.input(0), *c.out_grad_opt(0)}, c.attrs());
  return grads;
}

OpDef convolution_def(bool deconv) {
  OpDef d;
  d.name = deconv ? "Deconvolution" : "Convolution";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"weight", SlotRole::param}, {"bias", SlotRole::param, true}};
  d.num_inputs = [](const Attrs& a) { return a.get_bool("no_bias") ? 2 : 3; };
  d.attrs = {required("kernel", AttrKind::IntList), optional("stride", AttrKind::IntList, std::vector<int64_t>{}),
             optional("dilate", AttrKind::IntList, std::vector<int64_t>{}),
             optional("pad", AttrKind::IntList, std::vector<int64_t>{}), required("num_filter", AttrKind::Int),
             optional("num_group", AttrKind::Int, int64_t{1}),
             // MXNet's Deconvolution has no bias unless asked for one.
             optional("no_bias", AttrKind::Bool, deconv), layout_attr()};
  if (deconv) {
    d.attrs.push_back(optional("adj", AttrKind::IntList, std::vector<int64_t>{}));
    d.attrs.push_back(optional("target_shape", AttrKind::IntList, std::vector<int64_t>{}));
  }
  d.ignored_attrs = {"workspace", "cudnn_tune", "cudnn_off"};
  d.infer = [deconv](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    const ConvGeometry g = conv_geometry(ctx.attrs, in.shape, deconv);
    fill_input(ctx, 1, "weight", {in.dtype, g.weight_shape()}, channel_detail(g, ctx.inputs[1]));
    // A bias may stay wider than the data (f32 with bf16 data, as oneDNN and cuDNN take it).
    if (ctx.inputs.size() > 2) fill_float_input(ctx, 2, "bias", {in.dtype, {g.out_channels}});
    ctx.outputs[0] = TensorType{in.dtype, g.output_shape()};
  };
  // MXNet 1.9.1: both in the fp16 list's FP16_FUNCS; the bf16 list has Convolution in
  // BF16_FUNCS but Deconvolution in FP32_FUNCS (no bf16 Deconvolution kernel in its oneDNN).
  d.amp_fp16 = AmpClass::lowp;
  d.amp_bf16 = deconv ? AmpClass::fp32 : AmpClass::lowp;
  d.channels_last =
      ChannelsLastRule{ChannelsLastRule::Channels::layout_attr, "layout", /*every_input=*/false,
                       /*output_per_input=*/false, /*starts_region=*/true};
  d.gradient = [deconv](GradContext& c) { return convolution_gradient(c, deconv); };
  return d;
}

OpDef pooling_def() {
  OpDef d;
  d.name = "Pooling";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {optional("kernel", AttrKind::IntList, std::vector<int64_t>{}),
             one_of("pool_type", "max", {"max", "avg", "sum", "lp"}),
             optional("global_pool", AttrKind::Bool, false),
             one_of("pooling_convention", "valid", {"valid", "full", "same"}),
             optional("stride", AttrKind::IntList, std::vector<int64_t>{}),
             optional("pad", AttrKind::IntList, std::vector<int64_t>{}),
             none_by_default("p_value", AttrKind::Int),
             none_by_default("count_include_pad", AttrKind::Bool),
             layout_attr()};
  d.ignored_attrs = {"cudnn_off"};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    ctx.outputs[0] = TensorType{data->dtype, pool_geometry(ctx.attrs, data->shape).output_shape()};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  d.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::layout_attr, "layout"};
  d.gradient = pooling_gradient;
  return d;
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  r.add(convolution_def(false));
  r.add(convolution_def(true));
  r.add(with_epilogue(convolution_def(false), "_fused_conv"));
  r.add(pooling_def());
}

}  // namespace ampfuse::ir::nn
