// Convolution, Deconvolution and Pooling: schemas and type inference.
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
  return d;
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  r.add(convolution_def(false));
  r.add(convolution_def(true));
  r.add(pooling_def());
}

}  // namespace ampfuse::ir::nn
