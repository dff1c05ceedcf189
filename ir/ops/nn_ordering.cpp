// Reductions beyond sum/mean/max (norm, nansum, nanprod, the index-returning argmax,
// argmin, argmax_channel) and the sorting ops (topk, sort, argsort): schemas, type
// inference and gradients. The kernels are in runtime/reference/ordering_kernels.cpp.
//
// Gradients: indices (argmax, argmin, argmax_channel, argsort, topk's indices and mask)
// get none, as MXNet's MakeZeroGradNodes; topk's and sort's values send each element's
// gradient back to where it came from, `_backward_topk(data, dy)` / `_backward_sort(data,
// dy)` under the forward's attributes, whose kernels order each row again (the same order,
// ties included) and scatter; nansum and nanprod have sum's and prod's gradients, zero at
// the NaN elements (MXNet's nansum_grad and nanprod_grad).
//
// AMP classes from MXNet 1.9.1's lists, per target: norm, nansum, nanprod, topk and
// argsort are fp32 for both; argmax, argmin, argmax_channel and sort are neutral for fp16
// (FP16_FP32_FUNCS) and fp32 for bf16 (MXNet's bf16 list has them in FP32_FUNCS).
#include "ir/error.h"
#include "ir/gradient.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_ordering.h"
#include "ir/ops/nn_params.h"
#include "ir/ops/op_helpers.h"
#include "ir/ops/tensor_shapes.h"

#include <charconv>
#include <optional>

namespace ampfuse::ir::nn {

namespace {

// topk, sort and argsort default to axis -1 but also take None, which the attribute
// schema cannot express for an Int (None is only allowed as a default there), so their
// axis is a String attribute read here; argmax's is an Int defaulting to None.
std::optional<int64_t> axis_attr(const Attrs& attrs) {
  const AttrValue& v = attrs.get("axis");
  if (std::holds_alternative<std::monostate>(v)) return std::nullopt;
  if (const auto* i = std::get_if<int64_t>(&v)) return *i;
  const std::string& text = std::get<std::string>(v);
  if (text == "None") return std::nullopt;
  int64_t axis = 0;
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), axis);
  if (err != std::errc() || end != text.data() + text.size())
    fail("axis='{}' is neither an integer nor None", text);
  return axis;
}

}  // namespace

AxisRows axis_rows(const Shape& in, const Attrs& attrs) {
  AxisRows r;
  const std::optional<int64_t> axis = axis_attr(attrs);
  if (!axis) {
    r.n = num_elements(in);
    return r;
  }
  r.axis = normalize_axis(*axis, in.size());
  for (int64_t d = 0; d < r.axis; ++d) r.outer *= in[d];
  r.n = in[r.axis];
  for (size_t d = static_cast<size_t>(r.axis) + 1; d < in.size(); ++d) r.inner *= in[d];
  return r;
}

Shape arg_reduce_shape(const Shape& in, const Attrs& attrs) {
  const bool keepdims = attrs.get_bool("keepdims");
  if (attrs.is_none("axis")) return keepdims ? Shape(in.size(), 1) : Shape{1};
  const auto axis = static_cast<size_t>(normalize_axis(attrs.get_int("axis"), in.size()));
  Shape out = in;
  if (keepdims) out[axis] = 1;
  else out.erase(out.begin() + static_cast<int64_t>(axis));
  if (out.empty()) out = {1};  // MXNet 1.x has no 0-d arrays
  return out;
}

SortPlan sort_plan(const Shape& in, const Attrs& attrs, bool is_topk) {
  SortPlan p;
  p.rows = axis_rows(in, attrs);
  p.k = p.rows.n;
  if (is_topk) {
    const int64_t k = attrs.get_int("k");
    if (k > p.rows.n)
      fail("k={} is more than the {} elements {}", k, p.rows.n,
           p.rows.axis < 0 ? std::string("of the flattened data") : fmt::format("along axis {}", p.rows.axis));
    if (k > 0) p.k = k;  // k <= 0 keeps them all, as MXNet does
  }
  if (p.rows.axis < 0) {
    p.out = {p.k};
  } else {
    p.out = in;
    p.out[p.rows.axis] = p.k;
  }
  return p;
}

namespace {

const TensorType* known_data(const InferContext& ctx) {
  const TensorType* data = known_input(ctx, 0);
  if (data && data->dtype == DType::boolean) fail("the data must be a number tensor, not {}", type_str(*data));
  return data;
}

// argmax, argmin: the index of the first maximum (minimum) along `axis`, or of the
// flattened data for axis=None; a NaN counts as larger (smaller) than any number, so the
// first NaN wins. MXNet returns the index in the data's dtype.
OpDef arg_reduce_def(const char* name, AmpClass bf16_class) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::reduction;
  d.inputs = {{"data"}};
  d.attrs = {none_by_default("axis", AttrKind::Int), optional("keepdims", AttrKind::Bool, false)};
  d.infer = [name](InferContext& ctx) {
    const TensorType* data = known_data(ctx);
    if (!data) return;
    if (axis_rows(data->shape, ctx.attrs).n == 0)
      fail("{} of the data {} has no element to pick along the axis", name, shape_str(data->shape));
    ctx.outputs[0] = TensorType{data->dtype, arg_reduce_shape(data->shape, ctx.attrs)};
  };
  d.amp_fp16 = AmpClass::neutral;
  d.amp_bf16 = bf16_class;
  d.gradient = no_gradient;  // an index does not move with the data (MXNet: MakeZeroGradNodes)
  return d;
}

// argmax_channel: argmax along axis 1, the axis dropped.
OpDef argmax_channel_def() {
  OpDef d;
  d.name = "argmax_channel";
  d.kind = OpKind::reduction;
  d.inputs = {{"data"}};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_data(ctx);
    if (!data) return;
    if (data->shape.size() < 2 || data->shape[1] == 0)
      fail("the data {} needs a non-empty channel axis (axis 1)", shape_str(data->shape));
    Shape out = data->shape;
    out.erase(out.begin() + 1);
    ctx.outputs[0] = TensorType{data->dtype, out};
  };
  d.amp_fp16 = AmpClass::neutral;
  d.amp_bf16 = AmpClass::fp32;
  d.gradient = no_gradient;
  return d;
}

// norm's gradient as MXNet 1.9.1 computes it: ord=2, g * x / y (NaN where the norm is 0:
// MXNet divides too); ord=1, g * sign(x) (0 at 0). g and y, the output's gradient and value,
// are seen with the reduced dims kept and cast from out_dtype to the data's dtype.
InputGrads norm_gradient(GradContext& c) {
  const TensorType in = c.input_type(0);
  Attrs plan_attrs = c.attrs();
  plan_attrs.set("exclude", false);
  const Shape kept = reduce_plan(in.shape, plan_attrs).kept;
  const bool l1 = c.attrs().get_int("ord") == 1;
  const ValueRef x = c.input(0);
  const ValueRef grad = c.cast(c.reshape(c.out_grad(0), kept), in.dtype);
  const ValueRef factor =
      l1 ? c.emit("sign", {x}) : c.emit("broadcast_div", {x, c.cast(c.reshape(c.output(0), kept), in.dtype)});
  return {c.emit("broadcast_mul", {factor, grad})};
}

// norm: the L1 (ord=1) or L2 (ord=2) norm over `axis` (every axis when None), in the
// data's dtype unless out_dtype says otherwise.
OpDef norm_def() {
  OpDef d;
  d.name = "norm";
  d.kind = OpKind::reduction;
  d.inputs = {{"data"}};
  d.attrs = {optional("ord", AttrKind::Int, int64_t{2}), none_by_default("axis", AttrKind::IntList),
             none_by_default("out_dtype", AttrKind::DType), optional("keepdims", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    const int64_t ord = ctx.attrs.get_int("ord");
    if (ord != 1 && ord != 2) fail("ord={} is not supported: norm computes ord=1 or ord=2", ord);
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const DType out = ctx.attrs.get_opt_dtype("out_dtype").value_or(data->dtype);
    if (!is_float(out)) fail("out_dtype={} is not supported: norm returns a float type", dtype_name(out));
    Attrs plan_attrs = ctx.attrs;
    plan_attrs.set("exclude", false);
    ctx.outputs[0] = TensorType{out, reduce_plan(data->shape, plan_attrs).out};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = norm_gradient;
  return d;
}

// nansum, nanprod: sum and prod with every NaN taken as 0 (1); sum's attributes.
OpDef nan_fold_def(const char* name) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::reduction;
  d.inputs = {{"data"}};
  d.attrs = {none_by_default("axis", AttrKind::IntList), optional("keepdims", AttrKind::Bool, false),
             optional("exclude", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    ctx.outputs[0] = TensorType{data->dtype, reduce_plan(data->shape, ctx.attrs).out};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  const bool prod = std::string(name) == "nanprod";
  d.gradient = [prod](GradContext& c) -> InputGrads {
    const TensorType in = c.input_type(0);
    const Shape kept = reduce_plan(in.shape, c.attrs()).kept;
    const ValueRef x = c.input(0);
    Attrs to_input;
    to_input.set("shape", std::vector<int64_t>(in.shape.begin(), in.shape.end()));
    ValueRef grad = c.emit_typed("broadcast_to", {c.reshape(c.out_grad(0), kept)}, std::move(to_input));
    if (prod) grad = c.emit("elemwise_mul", {c.emit("broadcast_div", {c.reshape(c.output(0), kept), x}), grad});
    // x == x is false at NaN only; where() keeps prod's NaN quotient out of the result.
    return {c.emit("where", {c.emit("_equal", {x, x}), grad, c.zeros_like(x)})};
  };
  return d;
}

AttrSpec index_dtype_attr() { return optional("dtype", AttrKind::DType, DType::f32); }

void require_index_dtype(const Attrs& a) {
  const DType t = a.get_dtype("dtype");
  if (t == DType::boolean || t == DType::i8 || t == DType::bf16)
    fail("dtype={} cannot hold the indices: use float16, float32, float64, uint8, int32 or int64", dtype_name(t));
}

// topk: the k largest (is_ascend: smallest) elements along `axis` (the flattened data for
// None), as MXNet's CPU kernel orders them, ties included (ordering_kernels.cpp).
// ret_typ: indices (in `dtype`), value, both (value then indices) or mask (the data's
// shape and dtype, 1 at the selected elements).
OpDef topk_def() {
  OpDef d;
  d.name = "topk";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.num_outputs = [](const Attrs& a) { return a.get_string("ret_typ") == "both" ? 2 : 1; };
  d.attrs = {optional("axis", AttrKind::String, std::string("-1")), optional("k", AttrKind::Int, int64_t{1}),
             one_of("ret_typ", "indices", {"value", "indices", "mask", "both"}),
             optional("is_ascend", AttrKind::Bool, false), index_dtype_attr()};
  d.infer = [](InferContext& ctx) {
    require_index_dtype(ctx.attrs);
    const TensorType* data = known_data(ctx);
    if (!data) return;
    const SortPlan plan = sort_plan(data->shape, ctx.attrs, true);
    const std::string& ret = ctx.attrs.get_string("ret_typ");
    if (ret == "mask") {
      ctx.outputs[0] = *data;
      return;
    }
    const TensorType indices{ctx.attrs.get_dtype("dtype"), plan.out};
    ctx.outputs[0] = ret == "indices" ? indices : TensorType{data->dtype, plan.out};
    if (ret == "both") ctx.outputs[1] = indices;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) -> InputGrads {
    const std::string ret = c.attrs().get_string("ret_typ");
    if ((ret != "value" && ret != "both") || !c.out_grad_opt(0)) return {std::nullopt};
    return {c.emit_typed("_backward_topk", {c.input(0), *c.out_grad_opt(0)}, c.attrs())};
  };
  return d;
}

// sort (values) and argsort (indices in `dtype`) along `axis`, ascending unless is_ascend
// is False: topk with every element kept.
OpDef sort_def(const char* name, bool indices) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {optional("axis", AttrKind::String, std::string("-1")), optional("is_ascend", AttrKind::Bool, true)};
  if (indices) d.attrs.push_back(index_dtype_attr());
  d.infer = [indices](InferContext& ctx) {
    if (indices) require_index_dtype(ctx.attrs);
    const TensorType* data = known_data(ctx);
    if (!data) return;
    const SortPlan plan = sort_plan(data->shape, ctx.attrs, false);
    ctx.outputs[0] = TensorType{indices ? ctx.attrs.get_dtype("dtype") : data->dtype, plan.out};
  };
  d.amp_bf16 = AmpClass::fp32;
  d.amp_fp16 = indices ? AmpClass::fp32 : AmpClass::neutral;
  if (indices) d.gradient = no_gradient;
  else
    d.gradient = [](GradContext& c) -> InputGrads {
      return {c.emit_typed("_backward_sort", {c.input(0), c.out_grad(0)}, c.attrs())};
    };
  return d;
}

// _backward_topk / _backward_sort (data, dy): dy's elements at the positions the forward
// took them from, zeros elsewhere; dy has the forward's value output type.
OpDef ordering_backward_def(const OpDef& forward) {
  OpDef d;
  d.name = "_backward_" + forward.name;
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"out_grad"}};
  d.attrs = forward.attrs;
  const bool is_topk = forward.name == "topk";
  d.infer = [is_topk](InferContext& ctx) {
    const TensorType data = ctx.in(0);
    require_float(data, "the data");
    const TensorType want{data.dtype, sort_plan(data.shape, ctx.attrs, is_topk).out};
    if (ctx.in(1) != want)
      fail("input 1 (out_grad) is {} but the forward's values are {}", type_str(ctx.in(1)), type_str(want));
    ctx.outputs[0] = data;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  return d;
}

}  // namespace

void register_ordering_ops(OpRegistry& r) {
  r.add(arg_reduce_def("argmax", AmpClass::fp32));
  r.add(arg_reduce_def("argmin", AmpClass::fp32));
  r.add(argmax_channel_def());
  r.add(norm_def());
  r.add(nan_fold_def("nansum"));
  r.add(nan_fold_def("nanprod"));
  r.add(topk_def());
  r.add(sort_def("sort", false));
  r.add(sort_def("argsort", true));
  r.add(ordering_backward_def(r.get("topk")));
  r.add(ordering_backward_def(r.get("sort")));
}

}  // namespace ampfuse::ir::nn
