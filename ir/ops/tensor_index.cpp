// Indexing, shape and data-movement ops the GluonCV model zoo uses beyond ir/ops/tensor.cpp:
// _arange and _contrib_arange_like, reverse, tile, repeat, take, pick, one_hot, gather_nd,
// reshape_like, shape_array / size_array, depth_to_space / space_to_depth, the legacy Crop,
// Pad, UpSampling (nearest; bilinear as the depthwise Deconvolution it is in MXNet),
// _contrib_BilinearResize2D and SequenceMask / SequenceLast / SequenceReverse.
// MXNet 1.9.1 names, attributes and defaults; shape rules in ir/ops/index_shapes.h, shared
// with the reference kernels (runtime/reference/index_kernels.cpp).
//
// AMP: every op here is in MXNet 1.9.1's FP16_FP32_FUNCS (fp16: runs in whatever type it
// gets) and in its bf16 list's FP32_FUNCS (bf16: runs in f32); ampfuse follows each
// target's list (docs/mxnet_amp_facts.md).
//
// Index inputs (take's indices, pick's index, one_hot's indices, gather_nd's indices, the
// Sequence ops' sequence_length) are InputSlot::index (index_input below): their values are
// positions, which AMP must never round to 16 bits (bf16 holds integers exactly only up to
// 256). Without that, a neutral op that runs low because its data is low would read its
// indices through a cast too.
//
// Fusion: reshape_like is a view and fuses. reverse would be a negative-stride access map,
// which the kernel generators do not take (see below). tile, repeat, depth_to_space and
// UpSampling would need modulo / division in an access map, which AccessMap (offset +
// scale * i) cannot express; they run as one strided gather each in the reference
// kernels. The ops reading index tensors (take, pick, gather_nd, one_hot, Sequence*)
// depend on data and do not fuse either.
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/index_shapes.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"
#include "ir/ops/op_helpers.h"
#include "ir/ops/tensor_backward.h"
#include "ir/ops/tensor_shapes.h"

namespace ampfuse::ir {

namespace {

AttrSpec required(std::string name, AttrKind kind) { return {std::move(name), kind, std::nullopt, {}}; }
AttrSpec with_default(std::string name, AttrKind kind, AttrValue v) { return {std::move(name), kind, std::move(v), {}}; }
AttrSpec none_default(std::string name, AttrKind kind) { return {std::move(name), kind, std::monostate{}, {}}; }
AttrSpec choice(std::string name, std::string def, std::vector<std::string> choices) {
  return {std::move(name), AttrKind::String, AttrValue{std::move(def)}, std::move(choices)};
}

OpDef make_op(std::string name, OpKind kind, std::vector<InputSlot> inputs) {
  OpDef d;
  d.name = std::move(name);
  d.kind = kind;
  d.amp_fp16 = AmpClass::neutral;  // MXNet 1.9.1: FP16_FP32_FUNCS
  d.amp_bf16 = AmpClass::fp32;     // MXNet 1.9.1: the bf16 list's FP32_FUNCS
  d.inputs = std::move(inputs);
  return d;
}

// Marks input `slot` as holding indices (InputSlot::index): AMP reads it in its own type,
// never rounded to 16 bits.
void index_input(OpDef& d, int slot) { d.inputs.at(slot).index = true; }

// A one-input op whose output keeps the input's dtype, its shape computed from the input's.
InferFn keep_dtype(std::function<Shape(const Shape&, const Attrs&)> shape_fn) {
  return [shape_fn](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    ctx.outputs[0] = TensorType{in.dtype, shape_fn(in.shape, ctx.attrs)};
  };
}

// ---- ranges and shapes as values ---------------------------------------------------------

void register_ranges(OpRegistry& r) {
  // Not OpKind::source: AMP makes a source's output directly in the type its readers want
  // (engine/passes/amp_convert.cpp), exact for zeros and ones but not for a range (bf16
  // holds integers exactly only up to 256, and YOLOv3's grid offsets go past that).
  OpDef arange = make_op("_arange", OpKind::compute, {});
  arange.attrs = {required("start", AttrKind::Float), none_default("stop", AttrKind::Float),
                  with_default("step", AttrKind::Float, 1.0), with_default("repeat", AttrKind::Int, int64_t{1}),
                  with_default("infer_range", AttrKind::Bool, false),
                  with_default("dtype", AttrKind::DType, DType::f32)};
  arange.ignored_attrs = {"ctx"};
  arange.infer = [](InferContext& ctx) {
    const ArangeSpec s = arange_spec(ctx.attrs);
    ctx.outputs[0] = TensorType{ctx.attrs.get_dtype("dtype"), {s.count * s.repeat}};
  };
  r.add(std::move(arange));

  // The data lends its shape and dtype; values start + (i / repeat) * step, computed in the
  // data's dtype (MXNet: an int32 input truncates step 0.5 to 0).
  OpDef like = make_op("_contrib_arange_like", OpKind::compute, {{"data"}});
  like.attrs = {with_default("start", AttrKind::Float, 0.0), with_default("step", AttrKind::Float, 1.0),
                with_default("repeat", AttrKind::Int, int64_t{1}), none_default("axis", AttrKind::Int)};
  like.ignored_attrs = {"ctx"};
  like.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    if (ctx.attrs.get_int("repeat") < 1) fail("attribute 'repeat' must be at least 1, not {}", ctx.attrs.get_int("repeat"));
    Shape out = in.shape;
    if (const auto axis = ctx.attrs.get_opt_int("axis")) out = {in.shape[resolve_axis(*axis, in.shape, "axis")]};
    ctx.outputs[0] = TensorType{in.dtype, out};
  };
  like.gradient = no_gradient;  // the data lends its shape only (MXNet: MakeZeroGradNodes)
  r.add(std::move(like));

  // The input's shape (shape_array) or element count (size_array) as int64 values.
  OpDef shape = make_op("shape_array", OpKind::compute, {{"data"}});
  shape.infer = [](InferContext& ctx) {
    ctx.outputs[0] = TensorType{DType::i64, {static_cast<int64_t>(ctx.in(0).shape.size())}};
  };
  r.add(std::move(shape));

  OpDef size = make_op("size_array", OpKind::compute, {{"data"}});
  size.infer = [](InferContext& ctx) {
    ctx.in(0);
    ctx.outputs[0] = TensorType{DType::i64, {1}};
  };
  r.add(std::move(size));
}

// ---- re-indexing without index tensors -----------------------------------------------------

// reverse's axes, checked: MXNet accepts only non-negative axes below the rank. An axis
// named twice is reversed twice (no change), as MXNet does.
std::vector<bool> reversed_dims(const Shape& in, const Attrs& a) {
  std::vector<bool> flip(in.size(), false);
  for (int64_t axis : a.get_ints("axis")) {
    if (axis < 0 || axis >= static_cast<int64_t>(in.size()))
      fail("axis {} (attribute 'axis') is out of range [0, {}) for input {}: reverse takes no negative axes",
           axis, in.size(), shape_str(in));
    flip[axis] = !flip[axis];
  }
  return flip;
}

// Every copy of an input element adds its gradient: the output's gradient seen as
// (copies, extent) per dim (tile) or (extent, copies) along one dim (repeat), summed over
// the copies.
ValueRef sum_copies(GradContext& c, ValueRef grad, const Shape& split, std::vector<int64_t> copy_axes, const Shape& in) {
  Attrs a;
  a.set("axis", std::move(copy_axes));
  return c.reshape(c.emit_typed("sum", {c.reshape(grad, split)}, std::move(a)), in);
}

InputGrads tile_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const TilePlan p = tile_plan(in, c.attrs());
  const auto& reps = c.attrs().get_ints("reps");  // right-aligned against in_view
  const size_t lead = p.in_view.size() - reps.size();
  Shape split;
  std::vector<int64_t> copy_axes;
  for (size_t d = 0; d < p.in_view.size(); ++d) {
    copy_axes.push_back(static_cast<int64_t>(split.size()));
    split.push_back(d < lead ? 1 : reps[d - lead]);
    split.push_back(p.in_view[d]);
  }
  return data_gradient(c, sum_copies(c, c.out_grad(0), split, std::move(copy_axes), in));
}

InputGrads repeat_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const RepeatPlan p = repeat_plan(in, c.attrs());
  Shape split = p.in_view;
  split.insert(split.begin() + p.axis + 1, p.repeats);
  return data_gradient(c, sum_copies(c, c.out_grad(0), split, {p.axis + 1}, in));
}

// depth_to_space and space_to_depth with one block size are inverse permutations.
InputGrads block_permutation_gradient(GradContext& c, const char* inverse_op) {
  const Attrs a = c.attrs();
  return data_gradient(c, c.emit_typed(inverse_op, {c.out_grad(0)}, a));
}

void register_reindexing(OpRegistry& r) {
  // Not fused: an AccessMap can say "offset n-1, scale -1", but the kernel generators take
  // no negative strides (a kernel holding one falls back to the interpreter), so reverse is
  // one strided gather with negative strides in the reference kernel.
  OpDef reverse = make_op("reverse", OpKind::data_movement, {{"data"}});
  reverse.attrs = {required("axis", AttrKind::IntList)};
  reverse.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    reversed_dims(in, a);
    return in;
  });
  reverse.aliases = {"flip"};
  reverse.gradient = self_inverse_gradient;  // reversing the same axes again
  r.add(std::move(reverse));

  OpDef tile = make_op("tile", OpKind::data_movement, {{"data"}});
  tile.attrs = {required("reps", AttrKind::IntList)};
  tile.infer = keep_dtype([](const Shape& in, const Attrs& a) { return tile_plan(in, a).out; });
  tile.gradient = tile_gradient;
  r.add(std::move(tile));

  OpDef repeat = make_op("repeat", OpKind::data_movement, {{"data"}});
  repeat.attrs = {required("repeats", AttrKind::Int), none_default("axis", AttrKind::Int)};
  repeat.infer = keep_dtype([](const Shape& in, const Attrs& a) { return repeat_plan(in, a).out; });
  repeat.gradient = repeat_gradient;
  r.add(std::move(repeat));

  OpDef reshape_like = make_op("reshape_like", OpKind::view, {{"lhs"}, {"rhs"}});
  reshape_like.fusable = true;
  reshape_like.attrs = {none_default("lhs_begin", AttrKind::Int), none_default("lhs_end", AttrKind::Int),
                        none_default("rhs_begin", AttrKind::Int), none_default("rhs_end", AttrKind::Int)};
  // rhs lends its shape only; the output is lhs's elements in order.
  reshape_like.infer = [](InferContext& ctx) {
    const TensorType& lhs = ctx.in(0);
    ctx.outputs[0] = TensorType{lhs.dtype, reshape_like_shape(lhs.shape, ctx.in(1).shape, ctx.attrs)};
  };
  reshape_like.gradient = reshape_back_gradient;
  r.add(std::move(reshape_like));

  OpDef d2s = make_op("depth_to_space", OpKind::data_movement, {{"data"}});
  d2s.attrs = {required("block_size", AttrKind::Int)};
  d2s.infer = keep_dtype(depth_to_space_shape);
  d2s.gradient = [](GradContext& c) { return block_permutation_gradient(c, "space_to_depth"); };
  r.add(std::move(d2s));

  OpDef s2d = make_op("space_to_depth", OpKind::data_movement, {{"data"}});
  s2d.attrs = {required("block_size", AttrKind::Int)};
  s2d.infer = keep_dtype(space_to_depth_shape);
  s2d.gradient = [](GradContext& c) { return block_permutation_gradient(c, "depth_to_space"); };
  r.add(std::move(s2d));
}

// ---- gathers through index tensors ---------------------------------------------------------

// The gradient of a gather through an index tensor: `backward_op` scatters the output's
// gradient into zeros of the data's shape (adding where indices repeat), reading the same
// indices and the forward attributes. The indices get none (MXNet: zeros).
InputGrads scatter_gradient(GradContext& c, const char* backward_op) {
  Attrs a = c.attrs();
  const Shape data = c.input_type(0).shape;
  a.set("shape", std::vector<int64_t>(data.begin(), data.end()));
  const ValueRef indices = c.input(1);
  return data_gradient(c, c.emit_typed(backward_op, {c.out_grad(0), indices}, std::move(a)));
}

void register_gathers(OpRegistry& r) {
  OpDef take = make_op("take", OpKind::data_movement, {{"a"}, {"indices"} /* index input */});
  take.attrs = {with_default("axis", AttrKind::Int, int64_t{0}), choice("mode", "clip", {"clip", "raise", "wrap"})};
  take.infer = [](InferContext& ctx) {
    const TensorType& a = ctx.in(0);
    ctx.outputs[0] = TensorType{a.dtype, take_shape(a.shape, ctx.in(1).shape, ctx.attrs)};
  };
  index_input(take, 1);
  take.gradient = [](GradContext& c) { return scatter_gradient(c, "_backward_take"); };
  r.add(std::move(take));

  OpDef pick = make_op("pick", OpKind::data_movement, {{"data"}, {"index"} /* index input */});
  pick.attrs = {{"axis", AttrKind::Int, AttrValue{int64_t{-1}}, {}}, with_default("keepdims", AttrKind::Bool, false),
                choice("mode", "clip", {"clip", "wrap"})};
  pick.infer = [](InferContext& ctx) {
    const TensorType& data = ctx.in(0);
    ctx.outputs[0] = TensorType{data.dtype, pick_shape(data.shape, ctx.in(1).shape, ctx.attrs)};
  };
  index_input(pick, 1);
  pick.gradient = [](GradContext& c) { return scatter_gradient(c, "_backward_pick"); };
  r.add(std::move(pick));

  OpDef gather = make_op("gather_nd", OpKind::data_movement, {{"data"}, {"indices"} /* index input */});
  gather.infer = [](InferContext& ctx) {
    const TensorType& data = ctx.in(0);
    ctx.outputs[0] = TensorType{data.dtype, gather_nd_shape(data.shape, ctx.in(1).shape)};
  };
  index_input(gather, 1);
  gather.gradient = [](GradContext& c) { return scatter_gradient(c, "_backward_gather_nd"); };
  r.add(std::move(gather));

  // Output: indices' shape + (depth,), on_value where the index is k, else off_value.
  OpDef one_hot = make_op("one_hot", OpKind::compute, {{"indices"} /* index input */});
  one_hot.attrs = {required("depth", AttrKind::Int), with_default("on_value", AttrKind::Float, 1.0),
                   with_default("off_value", AttrKind::Float, 0.0), with_default("dtype", AttrKind::DType, DType::f32)};
  one_hot.infer = [](InferContext& ctx) {
    const int64_t depth = ctx.attrs.get_int("depth");
    if (depth < 0) fail("attribute 'depth' must not be negative, not {}", depth);
    Shape out = ctx.in(0).shape;
    out.push_back(depth);
    ctx.outputs[0] = TensorType{ctx.attrs.get_dtype("dtype"), out};
  };
  // Random test inputs for it are class ids below depth (runtime/random_bindings.cpp).
  one_hot.table_index = TableIndex{0, "depth"};
  index_input(one_hot, 0);
  one_hot.gradient = no_gradient;  // MXNet: MakeZeroGradNodes
  r.add(std::move(one_hot));
}

// ---- crops, pads, upsampling -----------------------------------------------------------------

// Crop's gradient: the output's gradient in the window, zeros around it; crop_like lends
// its shape only.
InputGrads crop_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const Shape like = c.num_inputs() > 1 ? c.input_type(1).shape : Shape{};
  const CropWindow w = crop_window(in, c.num_inputs() > 1 ? &like : nullptr, c.attrs());
  const std::vector<SliceDim> window = {{0, 1, in[0]}, {0, 1, in[1]}, {w.top, 1, w.height}, {w.left, 1, w.width}};
  return data_gradient(c, slice_backward(c, c.out_grad(0), in, window));
}

// Pad's gradient: constant mode, the input's window of the output's gradient (a slice);
// edge and reflect also add the gradient of each padded element to the element it copies
// (_backward_Pad).
InputGrads pad_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const PadPlan p = pad_plan(in, c.attrs());
  Attrs a;
  if (p.mode != PadMode::constant) {
    a.set("mode", c.attrs().get_string("mode"));
    a.set("pad_width", c.attrs().get_ints("pad_width"));
    return data_gradient(c, c.emit_typed("_backward_Pad", {c.out_grad(0)}, std::move(a)));
  }
  std::vector<int64_t> end;
  for (size_t d = 0; d < in.size(); ++d) end.push_back(p.before[d] + in[d]);
  a.set("begin", p.before);
  a.set("end", std::move(end));
  return data_gradient(c, c.emit_typed("slice", {c.out_grad(0)}, std::move(a)));
}

// Bilinear UpSampling's gradients are those of the Deconvolution it is (nn_conv.cpp):
// dx = Convolution(dy, w) and dw = _backward_Convolution_weight(dy, x), both under that
// Deconvolution's window (num_filter = num_group = channels, no bias).
InputGrads bilinear_upsampling_gradient(GradContext& c) {
  Attrs d = bilinear_upsampling_deconv_attrs(c.attrs(), c.input_type(0).shape.at(1));
  d.erase("adj");  // Deconvolution's own, no Convolution attributes
  d.erase("target_shape");
  InputGrads grads(2);
  const auto dy = c.out_grad_opt(0);
  if (!dy) return grads;
  if (c.wants(0)) grads[0] = c.emit_typed("Convolution", {*dy, c.input(1)}, d);
  if (c.wants(1)) grads[1] = c.emit_typed("_backward_Convolution_weight", {*dy, c.input(0)}, d);
  return grads;
}

// UpSampling's gradient: each input's part of the output's gradient (its channels, with
// multi_input_mode=concat; all of it with sum) summed over the factor x factor block each
// of its elements filled.
InputGrads upsampling_gradient(GradContext& c) {
  if (is_bilinear_upsampling(c.attrs())) return bilinear_upsampling_gradient(c);
  std::vector<Shape> shapes;
  for (size_t k = 0; k < c.num_inputs(); ++k) shapes.push_back(c.input_type(k).shape);
  const UpSamplingPlan p = upsampling_plan(shapes, c.attrs());
  const bool concat = c.attrs().get_string("multi_input_mode") == "concat";
  const ValueRef grad = c.out_grad(0);
  InputGrads grads(shapes.size());
  int64_t channel = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Shape& s = shapes[k];
    const int64_t f = p.factors[k];
    const int64_t first = channel;
    channel += s[1];
    if (!c.wants(k)) continue;
    const ValueRef part = concat && shapes.size() > 1 ? slice_along(c, grad, 1, first, first + s[1]) : grad;
    grads[k] = sum_copies(c, part, {s[0], s[1], s[2], f, s[3], f}, {3, 5}, s);
  }
  return grads;
}

// _contrib_BilinearResize2D's gradient: _backward_BilinearResize2D spreads each output
// element's gradient over the input elements it read, with their weights. `like` lends its
// size only and gets none (MXNet: zeros).
InputGrads bilinear_resize_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  Attrs a;
  a.set("shape", std::vector<int64_t>(in.begin(), in.end()));
  a.set("align_corners", c.attrs().get_bool("align_corners"));
  return data_gradient(c, c.emit_typed("_backward_BilinearResize2D", {c.out_grad(0)}, std::move(a)));
}

void register_windows(OpRegistry& r) {
  OpDef crop = make_op("Crop", OpKind::data_movement, {{"data"}, {"crop_like", SlotRole::data, true}});
  crop.attrs = {with_default("num_args", AttrKind::Int, int64_t{1}),
                with_default("offset", AttrKind::IntList, std::vector<int64_t>{0, 0}),
                with_default("h_w", AttrKind::IntList, std::vector<int64_t>{0, 0}),
                with_default("center_crop", AttrKind::Bool, false)};
  crop.num_inputs = [](const Attrs& a) {
    const int64_t n = a.get_int("num_args");
    if (n != 1 && n != 2) fail("attribute 'num_args' must be 1 or 2, not {}", n);
    return static_cast<int>(n);
  };
  // crop_like lends its height and width only; its dtype does not matter.
  crop.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    const Shape* like = ctx.inputs.size() > 1 ? &ctx.in(1).shape : nullptr;
    const CropWindow w = crop_window(in.shape, like, ctx.attrs);
    ctx.outputs[0] = TensorType{in.dtype, {in.shape[0], in.shape[1], w.height, w.width}};
  };
  crop.gradient = crop_gradient;
  r.add(std::move(crop));

  OpDef pad = make_op("Pad", OpKind::data_movement, {{"data"}});
  pad.attrs = {{"mode", AttrKind::String, std::nullopt, {"constant", "edge", "reflect"}},
               required("pad_width", AttrKind::IntList), with_default("constant_value", AttrKind::Float, 0.0)};
  pad.infer = keep_dtype([](const Shape& in, const Attrs& a) { return pad_plan(in, a).out; });
  pad.aliases = {"pad"};
  pad.gradient = pad_gradient;
  r.add(std::move(pad));

  OpDef up = make_op("UpSampling", OpKind::data_movement, {{"data"}});
  up.attrs = {required("scale", AttrKind::Int), with_default("num_filter", AttrKind::Int, int64_t{0}),
              {"sample_type", AttrKind::String, std::nullopt, {"bilinear", "nearest"}},
              choice("multi_input_mode", "concat", {"concat", "sum"}),
              with_default("num_args", AttrKind::Int, int64_t{1})};
  up.ignored_attrs = {"workspace"};
  // Bilinear takes the data and a weight whatever num_args says (MXNet: "this must be 2").
  up.alt_inputs = {{"data"}, {"weight", SlotRole::param}};
  up.alt_inputs_apply = is_bilinear_upsampling;
  up.num_inputs = [](const Attrs& a) {
    if (is_bilinear_upsampling(a)) return 2;
    const int64_t n = a.get_int("num_args");
    if (n < 1 || n > 1024) fail("attribute 'num_args' must be between 1 and 1024, not {}", n);
    return static_cast<int>(n);
  };
  // Concatenated inputs keep no common type on their own: like Concat, all must agree.
  up.infer = [](InferContext& ctx) {
    if (is_bilinear_upsampling(ctx.attrs)) {
      // The Deconvolution it is (index_shapes.h) fills the weight (C, 1, k, k) and gives
      // (N, C, H * scale, W * scale).
      const TensorType* data = nn::known_input(ctx, 0);
      if (!data) return;
      nn::require_float(*data, "the data");
      if (data->shape.size() != 4)
        fail("input 0 (data) has shape {}: UpSampling needs 4-D (batch, channel, y, x)", shape_str(data->shape));
      const Attrs d = bilinear_upsampling_deconv_attrs(ctx.attrs, data->shape[1]);
      const nn::ConvGeometry g = nn::conv_geometry(d, data->shape, true);
      nn::fill_input(ctx, 1, "weight", {data->dtype, g.weight_shape()});
      ctx.outputs[0] = TensorType{data->dtype, g.output_shape()};
      return;
    }
    std::vector<Shape> shapes;
    for (size_t k = 0; k < ctx.inputs.size(); ++k) {
      if (ctx.in(k).dtype != ctx.in(0).dtype)
        fail("input {} is {} but input 0 is {}: UpSampling needs one dtype", k, dtype_name(ctx.in(k).dtype),
             dtype_name(ctx.in(0).dtype));
      shapes.push_back(ctx.in(k).shape);
    }
    ctx.outputs[0] = TensorType{ctx.in(0).dtype, upsampling_plan(shapes, ctx.attrs).out};
  };
  up.gradient = upsampling_gradient;
  r.add(std::move(up));

  // Bilinear resize of NCHW data (DeepLab, PSPNet and FCN heads). The data lends its dtype;
  // `like` (mode=like only) its height and width.
  OpDef resize = make_op("_contrib_BilinearResize2D", OpKind::compute, {{"data"}, {"like", SlotRole::data, true}});
  resize.attrs = {with_default("height", AttrKind::Int, int64_t{1}), with_default("width", AttrKind::Int, int64_t{1}),
                  none_default("scale_height", AttrKind::Float), none_default("scale_width", AttrKind::Float),
                  choice("mode", "size",
                         {"like", "odd_scale", "size", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up"}),
                  with_default("align_corners", AttrKind::Bool, true)};
  resize.num_inputs = [](const Attrs& a) { return a.get_string("mode") == "like" ? 2 : 1; };
  resize.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    const Shape* like = ctx.inputs.size() > 1 ? &ctx.in(1).shape : nullptr;
    const auto [h, w] = bilinear_resize_size(in.shape, like, ctx.attrs);
    ctx.outputs[0] = TensorType{in.dtype, {in.shape[0], in.shape[1], h, w}};
  };
  resize.gradient = bilinear_resize_gradient;
  r.add(std::move(resize));
}

// ---- sequences --------------------------------------------------------------------------------

// data (time, batch, ...) or (batch, time, ...) by `axis`; sequence_length (batch,) only
// with use_sequence_length=True.
OpDef sequence_op(std::string name) {
  OpDef d = make_op(std::move(name), OpKind::data_movement,
                    {{"data"}, {"sequence_length", SlotRole::data, true} /* index input */});
  d.attrs = {with_default("use_sequence_length", AttrKind::Bool, false),
             with_default("axis", AttrKind::Int, int64_t{0})};
  d.num_inputs = [](const Attrs& a) { return a.get_bool("use_sequence_length") ? 2 : 1; };
  index_input(d, 1);
  return d;
}

void check_lengths(const InferContext& ctx, const Shape& data, int64_t axis) {
  if (ctx.inputs.size() < 2) return;
  const Shape& len = ctx.in(1).shape;
  const int64_t batch = data[1 - axis];
  if (len != Shape{batch})
    fail("input 1 (sequence_length) has shape {} but [{}] is needed for data {}", shape_str(len), batch,
         shape_str(data));
}

// SequenceMask and SequenceReverse are their own gradients: the masked steps get none
// (the mask with value 0), and reversing the first `length` steps is its own inverse, as
// MXNet's backward kernels do. Without lengths SequenceMask is the identity.
InputGrads sequence_gradient(GradContext& c) {
  const std::string op = c.node().op;
  Attrs a = c.attrs();
  const bool lengths = a.get_bool("use_sequence_length");
  if (op == "SequenceMask") {
    if (!lengths) return data_gradient(c, c.out_grad(0));
    a.set("value", 0.0);
  }
  std::vector<ValueRef> ins = {c.out_grad(0)};
  if (lengths) ins.push_back(c.input(1));
  return data_gradient(c, c.emit_typed(op, std::move(ins), std::move(a)));
}

// SequenceLast's gradient: the output's gradient at step length-1 of each sequence, zeros
// elsewhere. Without lengths that is the last step (a slice's gradient). With lengths, the
// gradient repeated over the steps and masked twice, by the lengths and by the lengths
// minus 1: the difference keeps step length-1 alone. SequenceMask reads the lengths as the
// forward kernel does (truncated, NaN as 0), so a length outside [1, T] keeps nothing, as
// the forward op gives zeros there; and trunc(l - 1) = trunc(l) - 1 for l >= 1, while for
// l in (0, 1) both masks keep nothing. (An infinite gradient turns into NaN at the other
// steps, where a scatter kernel would keep 0: overflow shows either way.)
InputGrads sequence_last_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  Attrs a = c.attrs();
  const int64_t axis = sequence_axis(in, a, false);
  Shape step = in;
  step[axis] = 1;
  const ValueRef grad = c.reshape(c.out_grad(0), step);
  if (!a.get_bool("use_sequence_length")) {
    std::vector<SliceDim> window;
    for (int64_t e : in) window.push_back({0, 1, e});
    window[axis] = {in[axis] - 1, 1, 1};
    return data_gradient(c, slice_backward(c, grad, in, window));
  }
  const ValueRef lengths = c.input(1);
  Attrs broadcast;
  broadcast.set("shape", std::vector<int64_t>(in.begin(), in.end()));
  const ValueRef every_step = c.emit_typed("broadcast_to", {grad}, std::move(broadcast));
  Attrs one;
  one.set("scalar", 1.0);
  const ValueRef shorter = c.emit_typed("_minus_scalar", {lengths}, std::move(one));
  a.set("value", 0.0);
  const ValueRef up_to_last = c.emit_typed("SequenceMask", {every_step, lengths}, a);
  const ValueRef before_last = c.emit_typed("SequenceMask", {every_step, shorter}, a);
  return data_gradient(c, c.emit("elemwise_sub", {up_to_last, before_last}));
}

void register_sequences(OpRegistry& r) {
  OpDef mask = sequence_op("SequenceMask");
  mask.attrs.push_back(with_default("value", AttrKind::Float, 0.0));
  mask.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    check_lengths(ctx, in.shape, sequence_axis(in.shape, ctx.attrs, false));
    ctx.outputs[0] = in;
  };
  mask.gradient = sequence_gradient;
  r.add(std::move(mask));

  OpDef last = sequence_op("SequenceLast");
  last.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    const int64_t axis = sequence_axis(in.shape, ctx.attrs, false);
    check_lengths(ctx, in.shape, axis);
    Shape out = in.shape;
    out.erase(out.begin() + axis);
    ctx.outputs[0] = TensorType{in.dtype, out};
  };
  last.gradient = sequence_last_gradient;
  r.add(std::move(last));

  OpDef rev = sequence_op("SequenceReverse");
  rev.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    check_lengths(ctx, in.shape, sequence_axis(in.shape, ctx.attrs, true));
    ctx.outputs[0] = in;
  };
  rev.gradient = sequence_gradient;
  r.add(std::move(rev));
}

}  // namespace

void register_index_ops(OpRegistry& r) {
  register_ranges(r);
  register_reindexing(r);
  register_gathers(r);
  register_windows(r);
  register_sequences(r);
}

}  // namespace ampfuse::ir
