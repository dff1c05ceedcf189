// Tensor ops: views (Reshape...), data movement (transpose, slices, Concat, broadcasts),
// reductions, constant sources and the AMP helpers all_finite / amp_multicast. MXNet 1.x
// names, attributes and defaults; the shape rules live in ir/ops/tensor_shapes.h so that
// the reference kernels read attributes the same way.
//
// AMP classes (fp16 / bf16), each target from its own MXNet 1.9.1 list (symbol_fp16.py,
// symbol_bf16.py; tests/amp_lists_test.cpp checks them against tests/data/mxnet_amp_lists.txt):
//   neutral / fp32  Reshape Flatten expand_dims squeeze transpose SwapAxis SliceChannel slice
//                   slice_axis slice_like broadcast_to/axis/like max min all_finite
//                   multi_all_finite _zeros _ones _full (MXNet's bf16 list has them in
//                   FP32_FUNCS: its CPU kernels of 1.9.1 do not take bf16 for them)
//   widest / neutral  Concat (bf16 list: BF16_FP32_FUNCS, "runs in what it gets")
//   widest          stack
//   fp32            sum mean prod
//   neutral         amp_multicast (fp16 list; the bf16 list leaves it out: a cast, which
//                   the AMP pass never reclassifies)
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/op_helpers.h"
#include "ir/ops/tensor_backward.h"
#include "ir/ops/tensor_shapes.h"

#include <algorithm>

namespace ampfuse::ir {

namespace {

AttrSpec required(std::string name, AttrKind kind) { return {std::move(name), kind, std::nullopt, {}}; }
AttrSpec with_default(std::string name, AttrKind kind, AttrValue v) { return {std::move(name), kind, std::move(v), {}}; }
AttrSpec none_default(std::string name, AttrKind kind) { return {std::move(name), kind, std::monostate{}, {}}; }
AttrValue no_ints() { return std::vector<int64_t>{}; }

// `amp` is the op's AMP class for both targets; callers set amp_bf16 where MXNet's bf16
// list differs (see the AMP classes in the file comment).
OpDef make_op(std::string name, OpKind kind, AmpClass amp, bool fusable) {
  OpDef d;
  d.name = std::move(name);
  d.kind = kind;
  d.amp_bf16 = d.amp_fp16 = amp;
  d.fusable = fusable;
  d.inputs = {{"data"}};
  return d;
}

// A count attribute (num_args, num_outputs...) that sizes the inputs or outputs. The upper
// bound keeps a typo from sizing vectors of billions of slots.
std::function<int(const Attrs&)> count_from(std::string attr) {
  return [attr](const Attrs& a) {
    const int64_t n = a.get_int(attr);
    if (n < 1 || n > 1'000'000) fail("attribute '{}' must be between 1 and 1000000, not {}", attr, n);
    return static_cast<int>(n);
  };
}

// Inference of a single-input op whose output has the input's dtype and a shape computed
// from the input's.
InferFn keep_dtype(std::function<Shape(const Shape&, const Attrs&)> shape_fn) {
  return [shape_fn](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    ctx.outputs[0] = TensorType{in.dtype, shape_fn(in.shape, ctx.attrs)};
  };
}

// Concat and stack do not promote: AMP (a widest-class op) casts their inputs first.
DType require_one_dtype(const InferContext& ctx) {
  static const std::vector<InputSlot> slots = {{"data"}};
  return require_same_dtype(ctx, slots, all_inputs(ctx));
}

// ---- views ---------------------------------------------------------------------------

void register_views(OpRegistry& r) {
  OpDef reshape = make_op("Reshape", OpKind::view, AmpClass::neutral, true);
  reshape.amp_bf16 = AmpClass::fp32;
  reshape.attrs = {with_default("shape", AttrKind::IntList, no_ints()), with_default("reverse", AttrKind::Bool, false),
                   with_default("target_shape", AttrKind::IntList, no_ints()),
                   with_default("keep_highest", AttrKind::Bool, false)};
  reshape.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    // The pre-1.0 spelling: rare in exported graphs, and MXNet itself deprecates it.
    if (!a.get_ints("target_shape").empty() || a.get_bool("keep_highest"))
      fail("the legacy attributes 'target_shape' / 'keep_highest' are not supported: use 'shape'");
    return reshape_output_shape(in, a.get_ints("shape"), a.get_bool("reverse"));
  });
  reshape.aliases = {"reshape"};
  reshape.gradient = reshape_back_gradient;
  r.add(std::move(reshape));

  OpDef flatten = make_op("Flatten", OpKind::view, AmpClass::neutral, true);
  flatten.amp_bf16 = AmpClass::fp32;
  flatten.infer = keep_dtype([](const Shape& in, const Attrs&) {
    if (in.empty()) fail("cannot flatten a 0-d input");
    return Shape{in[0], num_elements(Shape(in.begin() + 1, in.end()))};
  });
  flatten.aliases = {"flatten"};
  flatten.gradient = reshape_back_gradient;
  r.add(std::move(flatten));

  OpDef expand = make_op("expand_dims", OpKind::view, AmpClass::neutral, true);
  expand.amp_bf16 = AmpClass::fp32;
  expand.attrs = {required("axis", AttrKind::Int)};
  expand.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    Shape out = in;
    out.insert(out.begin() + resolve_insert_axis(a.get_int("axis"), in, "axis"), 1);
    return out;
  });
  expand.gradient = reshape_back_gradient;
  r.add(std::move(expand));

  OpDef squeeze = make_op("squeeze", OpKind::view, AmpClass::neutral, true);
  squeeze.amp_bf16 = AmpClass::fp32;
  squeeze.attrs = {none_default("axis", AttrKind::IntList)};
  squeeze.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    std::vector<bool> drop(in.size(), false);
    if (a.is_none("axis")) {
      for (size_t d = 0; d < in.size(); ++d) drop[d] = in[d] == 1;
    } else {
      for (int64_t axis : a.get_ints("axis")) {
        const int64_t d = resolve_axis(axis, in, "axis");
        if (in[d] != 1) fail("cannot squeeze dim {} of input {}: its extent is {}, not 1", d, shape_str(in), in[d]);
        if (drop[d]) fail("axis={} names dim {} twice", format_mxnet_attr(a.get("axis")), d);
        drop[d] = true;
      }
    }
    Shape out;
    for (size_t d = 0; d < in.size(); ++d)
      if (!drop[d]) out.push_back(in[d]);
    if (out.empty()) out = {1};  // MXNet 1.x has no 0-d arrays
    return out;
  });
  squeeze.gradient = reshape_back_gradient;
  r.add(std::move(squeeze));
}

// ---- data movement -------------------------------------------------------------------

// The access map of an op whose output dim j is input dim perm[j]: input dim perm[j] walks
// with iteration dim j.
AccessMap permutation_access(const std::vector<int64_t>& perm) {
  AccessMap m = AccessMap::identity(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) m.iter_dim[perm[j]] = static_cast<int32_t>(j);
  return m;
}

// A slice reads input index begin + step * o along each dim.
AccessMap slice_access(const std::vector<SliceDim>& dims) {
  AccessMap m = AccessMap::identity(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) m.scale[k] = dims[k].step, m.offset[k] = dims[k].begin;
  return m;
}

std::vector<int64_t> swap_permutation(const Shape& in, const Attrs& a) {
  std::vector<int64_t> perm(in.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  std::swap(perm[resolve_axis(a.get_int("dim1"), in, "dim1")], perm[resolve_axis(a.get_int("dim2"), in, "dim2")]);
  return perm;
}

// The gradient of a permutation is the inverse permutation of the output's gradient.
InputGrads transpose_gradient(GradContext& c) {
  const auto perm = transpose_permutation(c.input_type(0).shape, c.attrs().get_ints("axes"));
  std::vector<int64_t> inverse(perm.size());
  for (size_t j = 0; j < perm.size(); ++j) inverse[perm[j]] = static_cast<int64_t>(j);
  Attrs a;
  a.set("axes", std::move(inverse));
  return data_gradient(c, c.emit_typed("transpose", {c.out_grad(0)}, std::move(a)));
}

void register_permutes(OpRegistry& r) {
  OpDef transpose = make_op("transpose", OpKind::data_movement, AmpClass::neutral, true);
  transpose.amp_bf16 = AmpClass::fp32;
  transpose.attrs = {with_default("axes", AttrKind::IntList, no_ints())};
  transpose.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    Shape out;
    for (int64_t d : transpose_permutation(in, a.get_ints("axes"))) out.push_back(in[d]);
    return out;
  });
  transpose.remap_access = [](const Attrs& a, const Shape& in, const Shape&) {
    return permutation_access(transpose_permutation(in, a.get_ints("axes")));
  };
  transpose.gradient = transpose_gradient;
  r.add(std::move(transpose));

  OpDef swap = make_op("SwapAxis", OpKind::data_movement, AmpClass::neutral, true);
  swap.amp_bf16 = AmpClass::fp32;
  swap.attrs = {with_default("dim1", AttrKind::Int, int64_t{0}), with_default("dim2", AttrKind::Int, int64_t{0})};
  swap.infer = keep_dtype([](const Shape& in, const Attrs& a) {
    Shape out;
    for (int64_t d : swap_permutation(in, a)) out.push_back(in[d]);
    return out;
  });
  swap.remap_access = [](const Attrs& a, const Shape& in, const Shape&) {
    return permutation_access(swap_permutation(in, a));
  };
  swap.aliases = {"swapaxes"};
  swap.gradient = self_inverse_gradient;  // swapping the same dims again
  r.add(std::move(swap));
}

// Each input's gradient is its part of the output's gradient.
InputGrads concat_gradient(GradContext& c) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < c.num_inputs(); ++i) shapes.push_back(c.input_type(i).shape);
  const int64_t axis = resolve_axis(c.attrs().get_int("dim"), shapes[0], "dim");
  const ValueRef grad = c.out_grad(0);
  InputGrads grads(shapes.size());
  int64_t position = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t extent = shapes[i][axis];
    if (c.wants(i)) grads[i] = shapes.size() == 1 ? grad : slice_along(c, grad, axis, position, position + extent);
    position += extent;
  }
  return grads;
}

// Input k's gradient is entry k of the stacked axis.
InputGrads stack_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const int64_t axis = resolve_insert_axis(c.attrs().get_int("axis"), in, "axis");
  const ValueRef grad = c.out_grad(0);
  InputGrads grads(c.num_inputs());
  for (size_t k = 0; k < grads.size(); ++k)
    if (c.wants(k)) grads[k] = c.reshape(slice_along(c, grad, axis, static_cast<int64_t>(k), static_cast<int64_t>(k) + 1), in);
  return grads;
}

// The outputs' gradients joined back (zeros for outputs no gradient reaches).
InputGrads slice_channel_gradient(GradContext& c) {
  const Shape in = c.input_type(0).shape;
  const int64_t axis = resolve_axis(c.attrs().get_int("axis"), in, "axis");
  const size_t n = c.num_outputs();
  Shape part = in;
  part[axis] /= static_cast<int64_t>(n);
  std::vector<ValueRef> parts;
  for (size_t k = 0; k < n; ++k) parts.push_back(c.reshape(c.out_grad(k), part));  // unsqueezed
  if (n == 1) return data_gradient(c, parts[0]);
  Attrs a;
  a.set("num_args", static_cast<int64_t>(n));
  a.set("dim", axis);
  return data_gradient(c, c.emit_typed("Concat", std::move(parts), std::move(a)));
}

void register_joins_and_splits(OpRegistry& r) {
  OpDef concat = make_op("Concat", OpKind::data_movement, AmpClass::widest, false);
  concat.amp_bf16 = AmpClass::neutral;
  concat.attrs = {required("num_args", AttrKind::Int), with_default("dim", AttrKind::Int, int64_t{1})};
  concat.num_inputs = count_from("num_args");
  concat.infer = [](InferContext& ctx) {
    const DType dtype = require_one_dtype(ctx);
    const Shape& first = ctx.in(0).shape;
    const int64_t axis = resolve_axis(ctx.attrs.get_int("dim"), first, "dim");
    Shape out = first;
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const Shape& s = ctx.in(i).shape;
      Shape masked = s;
      if (s.size() == first.size()) masked[axis] = first[axis];
      if (masked != first)
        fail("input {} has shape {} but input 0 has {}: only dim {} may differ", i, shape_str(s), shape_str(first), axis);
      out[axis] += s[axis];
    }
    ctx.outputs[0] = TensorType{dtype, out};
  };
  concat.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::axis_attr, "dim", /*every_input=*/true};
  concat.aliases = {"concat"};
  concat.gradient = concat_gradient;
  r.add(std::move(concat));

  OpDef stack = make_op("stack", OpKind::data_movement, AmpClass::widest, false);
  stack.attrs = {required("num_args", AttrKind::Int), with_default("axis", AttrKind::Int, int64_t{0})};
  stack.num_inputs = count_from("num_args");
  stack.infer = [](InferContext& ctx) {
    const DType dtype = require_one_dtype(ctx);
    const Shape& first = ctx.in(0).shape;
    for (size_t i = 1; i < ctx.inputs.size(); ++i)
      if (ctx.in(i).shape != first)
        fail("input {} has shape {} but input 0 has {}: stack needs one shape", i, shape_str(ctx.in(i).shape),
             shape_str(first));
    Shape out = first;
    out.insert(out.begin() + resolve_insert_axis(ctx.attrs.get_int("axis"), first, "axis"),
               static_cast<int64_t>(ctx.inputs.size()));
    ctx.outputs[0] = TensorType{dtype, out};
  };
  stack.gradient = stack_gradient;
  r.add(std::move(stack));

  OpDef split = make_op("SliceChannel", OpKind::data_movement, AmpClass::neutral, false);
  split.amp_bf16 = AmpClass::fp32;
  split.attrs = {required("num_outputs", AttrKind::Int), with_default("axis", AttrKind::Int, int64_t{1}),
                 with_default("squeeze_axis", AttrKind::Bool, false)};
  split.num_outputs = count_from("num_outputs");
  split.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    const int64_t n = static_cast<int64_t>(ctx.outputs.size());
    const int64_t axis = resolve_axis(ctx.attrs.get_int("axis"), in.shape, "axis");
    if (in.shape[axis] % n != 0)
      fail("cannot split dim {} (extent {}) of input {} into num_outputs={} equal parts", axis, in.shape[axis],
           shape_str(in.shape), n);
    Shape out = in.shape;
    out[axis] /= n;
    if (ctx.attrs.get_bool("squeeze_axis")) {
      if (in.shape[axis] != n)
        fail("squeeze_axis=True needs dim {} of input {} to equal num_outputs={}", axis, shape_str(in.shape), n);
      out.erase(out.begin() + axis);
      if (out.empty()) out = {1};  // MXNet 1.x has no 0-d arrays
    }
    for (auto& o : ctx.outputs) o = TensorType{in.dtype, out};
  };
  // No channels_last rule: moving a split across a layout change would need a transpose
  // per output, more than the one it removes (layout_optimize moves the join, Concat).
  split.aliases = {"split"};
  split.gradient = slice_channel_gradient;
  r.add(std::move(split));
}

// A slice's gradient: the output's gradient in its window of the input, zeros elsewhere.
// shape_like (slice_like) lends its shape only and gets none.
InputGrads slice_gradient(GradContext& c, const std::vector<SliceDim>& window) {
  return data_gradient(c, slice_backward(c, c.out_grad(0), c.input_type(0).shape, window));
}

void register_slices(OpRegistry& r) {
  OpDef slice = make_op("slice", OpKind::data_movement, AmpClass::neutral, true);
  slice.amp_bf16 = AmpClass::fp32;
  slice.attrs = {required("begin", AttrKind::IntList), required("end", AttrKind::IntList),
                 with_default("step", AttrKind::IntList, no_ints())};
  slice.infer = keep_dtype([](const Shape& in, const Attrs& a) { return slice_output_shape(slice_dims(in, a)); });
  slice.remap_access = [](const Attrs& a, const Shape& in, const Shape&) { return slice_access(slice_dims(in, a)); };
  slice.gradient = [](GradContext& c) { return slice_gradient(c, slice_dims(c.input_type(0).shape, c.attrs())); };
  // MXNet's `crop` is this op under another name (matrix_op.cc); its legacy `Crop` (two
  // inputs, offset / h_w / center_crop) is a different op, not registered here.
  slice.aliases = {"crop"};
  r.add(std::move(slice));

  OpDef slice_axis = make_op("slice_axis", OpKind::data_movement, AmpClass::neutral, true);
  slice_axis.amp_bf16 = AmpClass::fp32;
  // MXNet requires `end` but accepts None there; absent is read as None too.
  slice_axis.attrs = {required("axis", AttrKind::Int), required("begin", AttrKind::Int),
                      none_default("end", AttrKind::Int)};
  slice_axis.infer =
      keep_dtype([](const Shape& in, const Attrs& a) { return slice_output_shape(slice_axis_dims(in, a)); });
  slice_axis.remap_access = [](const Attrs& a, const Shape& in, const Shape&) {
    return slice_access(slice_axis_dims(in, a));
  };
  slice_axis.gradient = [](GradContext& c) {
    return slice_gradient(c, slice_axis_dims(c.input_type(0).shape, c.attrs()));
  };
  r.add(std::move(slice_axis));

  OpDef slice_like = make_op("slice_like", OpKind::data_movement, AmpClass::neutral, true);
  slice_like.amp_bf16 = AmpClass::fp32;
  slice_like.inputs = {{"data"}, {"shape_like"}};
  slice_like.attrs = {with_default("axes", AttrKind::IntList, no_ints())};
  // Only the shape of shape_like matters, so its dtype may differ from data's.
  slice_like.infer = [](InferContext& ctx) {
    const TensorType& in = ctx.in(0);
    ctx.outputs[0] = TensorType{in.dtype, slice_output_shape(slice_like_dims(in.shape, ctx.in(1).shape, ctx.attrs))};
  };
  slice_like.gradient = [](GradContext& c) {
    return slice_gradient(c, slice_like_dims(c.input_type(0).shape, c.input_type(1).shape, c.attrs()));
  };
  r.add(std::move(slice_like));
}

// A broadcast's gradient sums the output's gradient over the dims it repeated; rhs
// (broadcast_like) lends its shape only and gets none (MXNet: zeros).
InputGrads broadcast_gradient(GradContext& c) {
  return data_gradient(c, c.sum_to_shape(c.out_grad(0), c.input_type(0).shape));
}

void register_broadcasts(OpRegistry& r) {
  OpDef to = make_op("broadcast_to", OpKind::data_movement, AmpClass::neutral, true);
  to.amp_bf16 = AmpClass::fp32;
  to.attrs = {with_default("shape", AttrKind::IntList, no_ints())};
  to.infer = keep_dtype(broadcast_to_shape);
  // Input and output have one rank; extent-1 dims of the input repeat.
  const auto repeat_unit_dims = [](const Attrs&, const Shape& in, const Shape& out) {
    return AccessMap::broadcast(in, out);
  };
  to.remap_access = repeat_unit_dims;
  to.gradient = broadcast_gradient;
  r.add(std::move(to));

  OpDef axis = make_op("broadcast_axis", OpKind::data_movement, AmpClass::neutral, true);
  axis.amp_bf16 = AmpClass::fp32;
  axis.attrs = {with_default("axis", AttrKind::IntList, no_ints()), with_default("size", AttrKind::IntList, no_ints())};
  axis.infer = keep_dtype(broadcast_axis_shape);
  axis.remap_access = repeat_unit_dims;
  axis.aliases = {"broadcast_axes"};
  axis.gradient = broadcast_gradient;
  r.add(std::move(axis));

  OpDef like = make_op("broadcast_like", OpKind::data_movement, AmpClass::neutral, true);
  like.amp_bf16 = AmpClass::fp32;
  like.inputs = {{"lhs"}, {"rhs"}};
  like.attrs = {none_default("lhs_axes", AttrKind::IntList), none_default("rhs_axes", AttrKind::IntList)};
  // rhs only lends its shape; the output has lhs's dtype. No remap_access: a remapping
  // reads one input, and the planner would load rhs for nothing.
  like.infer = [](InferContext& ctx) {
    const TensorType& lhs = ctx.in(0);
    ctx.outputs[0] = TensorType{lhs.dtype, broadcast_like_shape(lhs.shape, ctx.in(1).shape, ctx.attrs)};
  };
  like.gradient = broadcast_gradient;
  r.add(std::move(like));
}

// ---- reductions ------------------------------------------------------------------------

// Gradients of the reductions, as MXNet 1.9.1 defines them (broadcast_reduce_op.h): the
// output's gradient `g` and value `y`, reshaped to the input's rank with the reduced dims
// of extent 1, broadcast back over x:
//   sum   g                    mean  g / (number of elements folded into each output)
//   max, min  g * (x == y): every element equal to the extreme gets all of g, ties too
//             (MXNet's ReduceAxesBackwardUseInOut with mshadow_op::eq)
//   prod  g * (y / x): MXNet's rdiv, so a zero element gives inf or nan, as in MXNet
enum class ReductionGrad { sum, mean, select, prod };

InputGrads reduction_gradient(GradContext& c, ReductionGrad kind) {
  const TensorType in = c.input_type(0);
  const Shape kept = reduce_plan(in.shape, c.attrs()).kept;
  ValueRef grad = c.reshape(c.out_grad(0), kept);
  if (kind == ReductionGrad::sum || kind == ReductionGrad::mean) {
    if (kind == ReductionGrad::mean) {
      int64_t folded = 1;
      for (size_t d = 0; d < kept.size(); ++d)
        if (kept[d] != in.shape[d]) folded *= in.shape[d];
      Attrs a;
      a.set("scalar", static_cast<double>(folded));
      grad = c.emit_typed("_div_scalar", {grad}, std::move(a));
    }
    Attrs a;
    a.set("shape", std::vector<int64_t>(in.shape.begin(), in.shape.end()));
    return data_gradient(c, c.emit_typed("broadcast_to", {grad}, std::move(a)));
  }
  const ValueRef x = c.input(0);
  const ValueRef y = c.reshape(c.output(0), kept);
  const ValueRef factor = kind == ReductionGrad::select ? c.emit("broadcast_equal", {x, y}) : c.emit("broadcast_div", {y, x});
  return data_gradient(c, c.emit("broadcast_mul", {factor, grad}));
}

void register_reductions(OpRegistry& r) {
  struct Reduction {
    const char* name;
    AmpClass amp;
    std::vector<std::string> aliases;
    ReductionGrad grad;
  };
  // sum, mean and prod overflow in 16 bits, so MXNet's AMP lists run them in fp32;
  // max and min pick an element and are exact in any type (fp16: neutral; MXNet's bf16
  // list has every reduction in fp32).
  const Reduction reductions[] = {{"sum", AmpClass::fp32, {"sum_axis"}, ReductionGrad::sum},
                                  {"mean", AmpClass::fp32, {}, ReductionGrad::mean},
                                  {"prod", AmpClass::fp32, {}, ReductionGrad::prod},
                                  {"max", AmpClass::neutral, {"max_axis"}, ReductionGrad::select},
                                  {"min", AmpClass::neutral, {"min_axis"}, ReductionGrad::select}};
  for (const Reduction& red : reductions) {
    OpDef d = make_op(red.name, OpKind::reduction, red.amp, false);
    d.amp_bf16 = AmpClass::fp32;
    d.attrs = {none_default("axis", AttrKind::IntList), with_default("keepdims", AttrKind::Bool, false),
               with_default("exclude", AttrKind::Bool, false)};
    d.infer = keep_dtype([](const Shape& in, const Attrs& a) { return reduce_plan(in, a).out; });
    d.aliases = red.aliases;
    d.gradient = [kind = red.grad](GradContext& c) { return reduction_gradient(c, kind); };
    r.add(std::move(d));
  }

  // The loss-scaling overflow check. init_output=False in MXNet ANDs into the previous
  // contents of the output array; a graph value has none, so both settings start from 1.
  OpDef all_finite = make_op("all_finite", OpKind::reduction, AmpClass::neutral, false);
  all_finite.amp_bf16 = AmpClass::fp32;
  all_finite.attrs = {with_default("init_output", AttrKind::Bool, true)};
  all_finite.infer = [](InferContext& ctx) {
    ctx.in(0);  // throws if the input is unknown
    ctx.outputs[0] = TensorType{DType::f32, {1}};
  };
  r.add(std::move(all_finite));

  OpDef multi = make_op("multi_all_finite", OpKind::reduction, AmpClass::neutral, false);
  multi.amp_bf16 = AmpClass::fp32;
  multi.attrs = {with_default("num_arrays", AttrKind::Int, int64_t{1}), with_default("init_output", AttrKind::Bool, true)};
  multi.num_inputs = count_from("num_arrays");
  multi.infer = [](InferContext& ctx) {
    for (size_t i = 0; i < ctx.inputs.size(); ++i) ctx.in(i);
    ctx.outputs[0] = TensorType{DType::f32, {1}};
  };
  r.add(std::move(multi));
}

// ---- sources -----------------------------------------------------------------------------

void register_sources(OpRegistry& r) {
  for (const char* name : {"_zeros", "_ones", "_full"}) {
    OpDef d = make_op(name, OpKind::source, AmpClass::neutral, false);
    d.amp_bf16 = AmpClass::fp32;
    d.inputs = {};
    d.attrs = {with_default("shape", AttrKind::IntList, no_ints()), with_default("dtype", AttrKind::DType, DType::f32)};
    if (std::string_view(name) == "_full") d.attrs.push_back(required("value", AttrKind::Float));
    d.ignored_attrs = {"ctx"};
    // Legacy graphs (e.g. an RNN's begin state, shape=(2, 0, 200)) write 0 for "decided by
    // the consumer", and () for an unknown shape. The output stays unknown then; type
    // inference lets the consumer fill it in (ir/type_inference.cpp).
    d.infer = [](InferContext& ctx) {
      const auto& shape = ctx.attrs.get_ints("shape");
      for (int64_t e : shape)
        if (e < 0) fail("shape={} has a negative extent", format_mxnet_attr(shape));
      if (shape.empty() || std::find(shape.begin(), shape.end(), 0) != shape.end()) return;
      ctx.outputs[0] = TensorType{ctx.attrs.get_dtype("dtype"), shape};
    };
    r.add(std::move(d));
  }
}

// ---- AMP casts ---------------------------------------------------------------------------

// The common type of amp_multicast: the widest AMP float type among the inputs (f32 if any
// is f32), or with cast_narrow the narrowest. f16 and bf16 are equally narrow, so a choice
// between only those two is ambiguous and rejected.
DType multicast_target(const InferContext& ctx, bool narrow) {
  bool f32 = false, f16 = false, bf16 = false;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const DType t = ctx.in(i).dtype;
    if (!is_float(t)) fail("input {} is {}; amp_multicast takes float inputs only", i, dtype_name(t));
    f32 = f32 || t == DType::f32;
    f16 = f16 || t == DType::f16;
    bf16 = bf16 || t == DType::bf16;
  }
  const bool both_low = f16 && bf16;
  if (narrow ? both_low : (both_low && !f32))
    fail("inputs mix f16 and bf16, so amp_multicast{} has no single {} type", narrow ? " cast_narrow=True" : "",
         narrow ? "narrowest" : "widest");
  if (narrow) return f16 ? DType::f16 : bf16 ? DType::bf16 : DType::f32;
  return f32 ? DType::f32 : f16 ? DType::f16 : bf16 ? DType::bf16 : DType::f32;
}

void register_amp_multicast(OpRegistry& r) {
  // No scalar recipe: its outputs have their own inputs' shapes, unlike an elementwise op.
  // Output i is input i rounded to the common type; the planner treats each pair as a cast.
  OpDef d = make_op("amp_multicast", OpKind::data_movement, AmpClass::neutral, true);
  d.attrs = {required("num_outputs", AttrKind::Int), with_default("cast_narrow", AttrKind::Bool, false)};
  d.num_inputs = count_from("num_outputs");
  d.num_outputs = count_from("num_outputs");
  d.is_multicast = true;
  d.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::anywhere, "", /*every_input=*/true,
                                     /*output_per_input=*/true};
  d.infer = [](InferContext& ctx) {
    const DType target = multicast_target(ctx, ctx.attrs.get_bool("cast_narrow"));
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      // As MXNet: f64 is no AMP type and passes through unchanged.
      const DType t = ctx.in(i).dtype == DType::f64 ? DType::f64 : target;
      ctx.outputs[i] = TensorType{t, ctx.in(i).shape};
    }
  };
  d.gradient = cast_back_gradient;
  r.add(std::move(d));
}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  register_views(r);
  register_permutes(r);
  register_joins_and_splits(r);
  register_slices(r);
  register_broadcasts(r);
  register_reductions(r);
  register_sources(r);
  register_amp_multicast(r);
}

}  // namespace ampfuse::ir
