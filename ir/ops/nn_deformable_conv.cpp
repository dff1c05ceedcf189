// _contrib_ModulatedDeformableConvolution (DCNv2; GluonCV's CenterNet ..._dcnv2 heads): a
// convolution whose every tap (i, j) at output (y, x) reads the data at the grid position
// moved by a learned (dy, dx) offset, bilinearly, and scales it by a learned mask, as MXNet
// 1.9.1's src/operator/contrib/modulated_deformable_convolution-inl.h and
// nn/modulated_deformable_im2col.h. Inputs data (N, C, H, W), offset (N, 2 dg kh kw, OH, OW),
// mask (N, dg kh kw, OH, OW), weight (num_filter, C / num_group, kh, kw), bias (num_filter).
// An external (compute) op: which elements a tap reads depends on the offsets. The kernel
// is runtime/reference/deformable_conv_kernels.cpp; docs/ops.md "Deformable convolution".
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

DeformableConvGeometry deformable_conv_geometry(const Attrs& a, const Shape& data) {
  DeformableConvGeometry g;
  const std::vector<int64_t> kernel = a.get_ints("kernel");
  if (kernel.size() != 2) fail("kernel={} must be 2-d (h, w): MXNet implements only the 2-d op", format_mxnet_attr(a.get("kernel")));
  const std::string layout = a.get_string("layout");
  if (layout != "None" && layout != "NCHW") fail("layout={}: only NCHW (MXNet's only 2-d layout for this op)", layout);
  // MXNet's defaults when a list is not given: stride and dilate 1, pad 0.
  auto pair = [&](const char* name, int64_t fallback) {
    std::vector<int64_t> v = a.get_ints(name);
    if (v.empty()) v = {fallback, fallback};
    if (v.size() != 2) fail("{}={} must have two values (h, w)", name, format_mxnet_attr(a.get(name)));
    return std::array<int64_t, 2>{v[0], v[1]};
  };
  g.kernel = {kernel[0], kernel[1]};
  g.stride = pair("stride", 1);
  g.dilate = pair("dilate", 1);
  g.pad = pair("pad", 0);
  for (int k = 0; k < 2; ++k) {
    if (g.kernel[k] < 1) fail("kernel={} must be positive", format_mxnet_attr(a.get("kernel")));
    if (g.stride[k] < 1) fail("stride={} must be positive", format_mxnet_attr(a.get("stride")));
    if (g.dilate[k] < 1) fail("dilate={} must be positive", format_mxnet_attr(a.get("dilate")));
    if (g.pad[k] < 0) fail("pad={} must not be negative", format_mxnet_attr(a.get("pad")));
  }
  g.out_channels = a.get_int("num_filter");
  g.groups = a.get_int("num_group");
  g.deformable_groups = a.get_int("num_deformable_group");
  if (g.out_channels < 1) fail("num_filter={} must be positive", g.out_channels);
  if (g.groups < 1 || g.deformable_groups < 1)
    fail("num_group={} and num_deformable_group={} must be positive", g.groups, g.deformable_groups);
  if (data.size() != 4) fail("the data {} must be 4-d (N, C, H, W)", shape_str(data));
  g.batch = data[0];
  g.in_channels = data[1];
  g.in_size = {data[2], data[3]};
  // MXNet's checks, in its words where they are clear.
  if (g.in_channels % g.groups != 0) fail("num_group={} does not divide the data's {} channels", g.groups, g.in_channels);
  if (g.in_channels % g.deformable_groups != 0)
    fail("num_deformable_group={} does not divide the data's {} channels", g.deformable_groups, g.in_channels);
  if (g.out_channels % g.groups != 0) fail("num_group={} does not divide num_filter={}", g.groups, g.out_channels);
  if (g.out_channels % g.deformable_groups != 0)
    fail("num_deformable_group={} does not divide num_filter={} (MXNet requires it)", g.deformable_groups, g.out_channels);
  const int64_t step = a.get_int("im2col_step");
  if (step < 1) fail("im2col_step={} must be positive", step);
  // MXNet processes the batch in chunks of im2col_step images and would skip a remainder.
  if (g.batch > step && g.batch % step != 0)
    fail("a batch of {} is neither at most im2col_step={} nor a multiple of it (MXNet refuses it)", g.batch, step);
  for (int k = 0; k < 2; ++k) {
    const int64_t span = g.dilate[k] * (g.kernel[k] - 1) + 1;
    if (g.in_size[k] + 2 * g.pad[k] < span)
      fail("the kernel (dilated extent {}) exceeds the padded data ({} + 2 x {})", span, g.in_size[k], g.pad[k]);
    g.out_size[k] = (g.in_size[k] + 2 * g.pad[k] - span) / g.stride[k] + 1;
  }
  return g;
}

namespace {

OpDef modulated_deformable_conv_def() {
  OpDef d;
  d.name = "_contrib_ModulatedDeformableConvolution";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"offset"}, {"mask"}, {"weight", SlotRole::param}, {"bias", SlotRole::param, true}};
  d.num_inputs = [](const Attrs& a) { return a.get_bool("no_bias") ? 4 : 5; };
  d.attrs = {required("kernel", AttrKind::IntList), optional("stride", AttrKind::IntList, std::vector<int64_t>{}),
             optional("dilate", AttrKind::IntList, std::vector<int64_t>{}),
             optional("pad", AttrKind::IntList, std::vector<int64_t>{}), required("num_filter", AttrKind::Int),
             optional("num_group", AttrKind::Int, int64_t{1}), optional("num_deformable_group", AttrKind::Int, int64_t{1}),
             optional("no_bias", AttrKind::Bool, false), optional("im2col_step", AttrKind::Int, int64_t{64}),
             one_of("layout", "None", {"None", "NCW", "NCHW", "NCDHW"})};
  d.ignored_attrs = {"workspace"};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const DeformableConvGeometry g = deformable_conv_geometry(ctx.attrs, data->shape);
    const int64_t taps = g.kernel[0] * g.kernel[1] * g.deformable_groups;
    // MXNet's InferType: every input has the data's dtype.
    fill_input(ctx, 1, "offset", {data->dtype, {g.batch, 2 * taps, g.out_size[0], g.out_size[1]}},
               "2 x num_deformable_group x kh x kw channels at the output's size");
    fill_input(ctx, 2, "mask", {data->dtype, {g.batch, taps, g.out_size[0], g.out_size[1]}},
               "num_deformable_group x kh x kw channels at the output's size");
    fill_input(ctx, 3, "weight", {data->dtype, {g.out_channels, g.in_channels / g.groups, g.kernel[0], g.kernel[1]}});
    if (ctx.inputs.size() > 4) fill_input(ctx, 4, "bias", {data->dtype, {g.out_channels}});
    ctx.outputs[0] = TensorType{data->dtype, {g.batch, g.out_channels, g.out_size[0], g.out_size[1]}};
  };
  // In none of MXNet 1.9.1's AMP lists (its sibling _contrib_DeformableConvolution is in
  // both lists' FP32_FUNCS): f32, as that sibling and _contrib_box_decode. The offsets are
  // sub-pixel positions, which 8 significant bits would move by up to a pixel at 256.
  d.amp_fp16 = d.amp_bf16 = AmpClass::fp32;
  // No gradient rule: MXNet 1.9.1 has none on the CPU either ("only implemented in GPU").
  return d;
}

}  // namespace

void register_deformable_conv_ops(OpRegistry& r) { r.add(modulated_deformable_conv_def()); }

}  // namespace ampfuse::ir::nn
