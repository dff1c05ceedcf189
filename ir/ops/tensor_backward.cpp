// Backward ops of the tensor and indexing ops (see ir/ops/tensor_backward.h). Each takes the
// gradient of the forward op's output (input 0, "grad") and the forward op's index input
// where it has one, and gives the gradient of the forward op's data input: the forward
// input's shape is an attribute, `shape`, and the dtype is the gradient's.
//
//   _backward_slice(grad) {shape, begin, step}   zeros, grad at begin + step * i per dim
//   _backward_Pad(grad) {mode, pad_width}         every padded element added to the input
//                                                 element it copies (edge, reflect)
//   _backward_take(grad, indices) {axis, mode, shape}    rows added at their index
//   _backward_pick(grad, index) {axis, keepdims, mode, shape}  zeros, grad at the index
//   _backward_gather_nd(grad, indices) {shape}    slices added at their index (MXNet's
//                                                 _backward_gather_nd: repeated indices add)
//   _backward_BilinearResize2D(grad) {shape, align_corners}  each element added to its four
//                                                 neighbours with the forward weights
//
// Not fusable (a write into zeros, or a scatter, is no AccessMap of a load), kind compute,
// AMP neutral: they run in the type of the gradient they get.
#include "ir/ops/tensor_backward.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/index_shapes.h"

namespace ampfuse::ir {

namespace {

OpDef backward_op(std::string name, std::vector<InputSlot> inputs) {
  OpDef d;
  d.name = std::move(name);
  d.kind = OpKind::compute;
  d.amp_fp16 = d.amp_bf16 = AmpClass::neutral;
  d.inputs = std::move(inputs);
  return d;
}

AttrSpec required(std::string name, AttrKind kind) { return {std::move(name), kind, std::nullopt, {}}; }
AttrSpec with_default(std::string name, AttrKind kind, AttrValue v) { return {std::move(name), kind, std::move(v), {}}; }

// The forward input's shape, attribute `shape`: each extent at least 0.
Shape forward_shape(const Attrs& a) {
  const auto& s = a.get_ints("shape");
  for (int64_t e : s)
    if (e < 0) fail("attribute 'shape'={} has a negative extent", format_mxnet_attr(s));
  return Shape(s.begin(), s.end());
}

// Index inputs are positions: any dtype, never a float AMP would round.
InputSlot index_slot(std::string name) {
  InputSlot s{std::move(name)};
  s.index = true;
  return s;
}

// The gradient must have the shape the forward op gives an input of `shape`.
void require_grad_shape(const Shape& grad, const Shape& want, const Shape& in) {
  if (grad != want)
    fail("input 0 (grad) has shape {} but the forward op's output for an input of shape {} is {}", shape_str(grad),
         shape_str(in), shape_str(want));
}

void register_backward_slice(OpRegistry& r) {
  OpDef d = backward_op("_backward_slice", {{"grad"}});
  d.attrs = {required("shape", AttrKind::IntList), required("begin", AttrKind::IntList),
             required("step", AttrKind::IntList)};
  d.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const Shape in = forward_shape(ctx.attrs);
    const auto& begin = ctx.attrs.get_ints("begin");
    const auto& step = ctx.attrs.get_ints("step");
    if (grad.shape.size() != in.size() || begin.size() != in.size() || step.size() != in.size())
      fail("input 0 (grad) {}, begin={} and step={} need one entry per dim of shape={}", shape_str(grad.shape),
           format_mxnet_attr(begin), format_mxnet_attr(step), format_mxnet_attr(ctx.attrs.get("shape")));
    for (size_t d = 0; d < in.size(); ++d) {
      if (grad.shape[d] == 0) continue;
      const int64_t last = begin[d] + step[d] * (grad.shape[d] - 1);
      if (step[d] == 0 || begin[d] < 0 || begin[d] >= in[d] || last < 0 || last >= in[d])
        fail("the window of dim {} (begin {}, step {}, {} elements) is not inside shape={}", d, begin[d], step[d],
             grad.shape[d], shape_str(in));
    }
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(d));
}

void register_backward_pad(OpRegistry& r) {
  OpDef d = backward_op("_backward_Pad", {{"grad"}});
  d.attrs = {{"mode", AttrKind::String, std::nullopt, {"constant", "edge", "reflect"}},
             required("pad_width", AttrKind::IntList)};
  d.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const auto& pw = ctx.attrs.get_ints("pad_width");
    if (pw.size() != 2 * grad.shape.size())
      fail("attribute 'pad_width'={} needs 2 entries per dim of input 0 (grad) {}", format_mxnet_attr(pw),
           shape_str(grad.shape));
    Shape in = grad.shape;
    for (size_t k = 0; k < in.size(); ++k) in[k] -= pw[2 * k] + pw[2 * k + 1];
    for (int64_t e : in)
      if (e < 0) fail("input 0 (grad) {} is smaller than pad_width={}", shape_str(grad.shape), format_mxnet_attr(pw));
    require_grad_shape(grad.shape, pad_plan(in, ctx.attrs).out, in);
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(d));
}

void register_backward_gathers(OpRegistry& r) {
  OpDef take = backward_op("_backward_take", {{"grad"}, index_slot("indices")});
  take.attrs = {required("shape", AttrKind::IntList), with_default("axis", AttrKind::Int, int64_t{0}),
                {"mode", AttrKind::String, AttrValue{std::string("clip")}, {"clip", "raise", "wrap"}}};
  take.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const Shape in = forward_shape(ctx.attrs);
    require_grad_shape(grad.shape, take_shape(in, ctx.in(1).shape, ctx.attrs), in);
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(take));

  OpDef pick = backward_op("_backward_pick", {{"grad"}, index_slot("index")});
  pick.attrs = {required("shape", AttrKind::IntList), with_default("axis", AttrKind::Int, int64_t{-1}),
                with_default("keepdims", AttrKind::Bool, false),
                {"mode", AttrKind::String, AttrValue{std::string("clip")}, {"clip", "wrap"}}};
  pick.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const Shape in = forward_shape(ctx.attrs);
    require_grad_shape(grad.shape, pick_shape(in, ctx.in(1).shape, ctx.attrs), in);
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(pick));

  OpDef gather = backward_op("_backward_gather_nd", {{"grad"}, index_slot("indices")});
  gather.attrs = {required("shape", AttrKind::IntList)};
  gather.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const Shape in = forward_shape(ctx.attrs);
    require_grad_shape(grad.shape, gather_nd_shape(in, ctx.in(1).shape), in);
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(gather));
}

void register_backward_bilinear_resize(OpRegistry& r) {
  OpDef d = backward_op("_backward_BilinearResize2D", {{"grad"}});
  d.attrs = {required("shape", AttrKind::IntList), with_default("align_corners", AttrKind::Bool, true)};
  d.infer = [](InferContext& ctx) {
    const TensorType& grad = ctx.in(0);
    const Shape in = forward_shape(ctx.attrs);
    if (in.size() != 4 || grad.shape.size() != 4 || grad.shape[0] != in[0] || grad.shape[1] != in[1])
      fail("input 0 (grad) has shape {} but resizing an input of shape {} (NCHW) keeps N and C", shape_str(grad.shape),
           shape_str(in));
    ctx.outputs[0] = TensorType{grad.dtype, in};
  };
  r.add(std::move(d));
}

}  // namespace

ValueRef slice_backward(GradContext& c, ValueRef grad, const Shape& in, const std::vector<SliceDim>& window) {
  bool whole = true;
  for (size_t d = 0; d < window.size(); ++d)
    whole = whole && window[d].begin == 0 && window[d].step == 1 && window[d].size == in[d];
  if (whole) return grad;
  std::vector<int64_t> begin, step;
  for (const SliceDim& d : window) begin.push_back(d.begin), step.push_back(d.step);
  Attrs a;
  a.set("shape", std::vector<int64_t>(in.begin(), in.end()));
  a.set("begin", std::move(begin));
  a.set("step", std::move(step));
  return c.emit_typed("_backward_slice", {grad}, std::move(a));
}

ValueRef slice_along(GradContext& c, ValueRef v, int64_t axis, int64_t begin, int64_t end) {
  Attrs a;
  a.set("axis", axis);
  a.set("begin", begin);
  a.set("end", end);
  return c.emit_typed("slice_axis", {v}, std::move(a));
}

InputGrads self_inverse_gradient(GradContext& c) {
  const std::string op = c.node().op;
  const Attrs a = c.attrs();
  return data_gradient(c, c.emit_typed(op, {c.out_grad(0)}, a));
}

InputGrads data_gradient(GradContext& c, ValueRef grad) {
  InputGrads grads(c.num_inputs());
  grads[0] = grad;
  return grads;
}

void register_tensor_backward_ops(OpRegistry& r) {
  register_backward_slice(r);
  register_backward_pad(r);
  register_backward_gathers(r);
  register_backward_bilinear_resize(r);
}

}  // namespace ampfuse::ir
