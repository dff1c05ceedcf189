// Loss heads (LinearRegressionOutput, LogisticRegressionOutput, MAERegressionOutput,
// MakeLoss) and linear algebra (_linalg_gemm2, _linalg_gemm): schemas, type inference and,
// for the loss heads, the scalar recipe of their forward pass and their gradient.
//
// A loss head's forward is elementwise: identity, or sigmoid for LogisticRegressionOutput,
// and the heads fuse like any elementwise op. As graph outputs they supply their own
// gradient (OpDef::loss_head), MXNet 1.9.1's implicit one, ignoring any head gradient;
// their labels get none. The gradients are written with elementwise and reduction ops, so
// they fuse too. MXNet's AMP lists put all of them (and both gemms) in fp32.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/op_helpers.h"

namespace ampfuse::ir::nn {

namespace {

using Val = ScalarBuilder::Val;

// 1 / (1 + exp(-x)), written as the sigmoid op's recipe (ir/ops/elementwise.cpp) is, so
// that the two give the same bits.
Val sigmoid(ScalarBuilder& b, Val x) {
  const Val one = b.constant(1);
  return b.div(one, b.add(one, b.unary(ScalarOp::exp, b.unary(ScalarOp::neg, x))));
}

// A scale MXNet computes from its float parameters, in float arithmetic, before
// converting it to the data's type: the value a scalar op gets to match it.
double float_scale(double grad_scale, int64_t divisor) {
  return static_cast<double>(static_cast<float>(grad_scale) / static_cast<float>(divisor));
}

ValueRef scaled(GradContext& c, ValueRef v, double scale) {
  Attrs a;
  a.set("scalar", scale);
  return c.emit_typed("_mul_scalar", {v}, std::move(a));
}

// MXNet 1.9.1's regression_output-inl.h RegressionBackward: grad = BackwardOp(out, label)
// * grad_scale / num_output, num_output = label.Size() / label.shape[0] (integer division),
// the scale computed in float. BackwardOp is out - label (linear, logistic: out is the
// sigmoid already) or, for MAE, minus_sign: out - label > 0 ? 1 : -1, so a tie gives -1.
InputGrads regression_gradient(GradContext& c, bool mae) {
  InputGrads grads(c.num_inputs());
  if (!c.wants(0)) return grads;
  const TensorType out = c.type(c.output(0)), label_type = c.input_type(1);
  const double grad_scale = c.attrs().get_float("grad_scale");
  const int64_t num_output =
      label_type.shape.empty() ? 1 : num_elements(Shape(label_type.shape.begin() + 1, label_type.shape.end()));
  const ValueRef label = c.reshape(c.cast(c.input(1), out.dtype), out.shape);
  ValueRef diff;
  if (mae) {
    // out > label is out - label > 0 for every pair of floats (a difference of two
    // unequal floats is never zero, NaN compares false both ways).
    const ValueRef above = c.emit("_greater", {c.output(0), label});
    Attrs one;
    one.set("scalar", 1.0);
    diff = c.emit_typed("_minus_scalar", {scaled(c, above, 2.0)}, std::move(one));
  } else {
    diff = c.emit("elemwise_sub", {c.output(0), label});
  }
  grads[0] = scaled(c, diff, float_scale(grad_scale, num_output));
  return grads;
}

// MXNet 1.9.1's make_loss-inl.h Backward, a constant gradient: grad_scale (null),
// grad_scale / rows (batch; rows: every axis but the last, MXNet's FlatTo2D), or
// grad_scale / max(1, number of elements > valid_thresh) (valid), the division in the
// data's type. make_loss, an alias here, has MXNet's gradient ones_like: the defaults.
InputGrads make_loss_gradient(GradContext& c) {
  InputGrads grads(c.num_inputs());
  const TensorType data = c.input_type(0);
  if (!c.wants(0) || !is_float(data.dtype)) return grads;
  const Attrs a = c.attrs();
  const std::string& normalization = a.get_string("normalization");
  if (normalization == "valid") {
    Attrs thresh, at_least_one, over;
    thresh.set("scalar", static_cast<double>(static_cast<float>(a.get_float("valid_thresh"))));
    at_least_one.set("scalar", 1.0);
    over.set("scalar", static_cast<double>(static_cast<float>(a.get_float("grad_scale"))));
    Attrs all;
    all.set("keepdims", true);
    const ValueRef valid = c.emit_typed("_greater_scalar", {c.input(0)}, std::move(thresh));
    const ValueRef count = c.emit_typed("_maximum_scalar", {c.emit_typed("sum", {valid}, std::move(all))},
                                        std::move(at_least_one));
    // Spread by multiplying ones, which fuses (broadcast_like does not; broadcast_to reads a
    // zero extent as "keep the input's").
    const ValueRef per_element = c.emit_typed("_rdiv_scalar", {count}, std::move(over));
    grads[0] = c.emit("broadcast_mul", {c.emit("ones_like", {c.input(0)}), per_element});
    return grads;
  }
  const int64_t rows = data.shape.empty() ? 1 : num_elements(Shape(data.shape.begin(), data.shape.end() - 1));
  const double value = normalization == "batch" ? float_scale(a.get_float("grad_scale"), rows)
                                                : static_cast<double>(static_cast<float>(a.get_float("grad_scale")));
  // ones_like, not _full: _full reads a zero extent as "decided by the consumer".
  grads[0] = scaled(c, c.emit("ones_like", {c.input(0)}), value);
  return grads;
}

// The label's shape as MXNet's regression outputs check it: the data's, or (N,) for data
// (N, 1) when the label has no shape yet; a given label needs the data's first extent and
// element count.
void infer_regression_label(InferContext& ctx, const TensorType& data) {
  auto& label = ctx.inputs[1];
  if (!label) {
    const bool column = data.shape.size() == 2 && data.shape[1] == 1;
    label = TensorType{data.dtype, column ? Shape{data.shape[0]} : data.shape};
    return;
  }
  if (label->shape.empty() || data.shape.empty() || label->shape[0] != data.shape[0] ||
      num_elements(label->shape) != num_elements(data.shape))
    fail("input 1 (label) has shape {} but the data has {}: the label needs the same first extent and element count",
         shape_str(label->shape), shape_str(data.shape));
}

OpDef regression_output_def(const char* name, bool logistic, bool mae) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::elementwise;
  d.fusable = true;
  d.inputs = {{"data"}, {"label"}};  // label input
  d.attrs = {optional("grad_scale", AttrKind::Float, 1.0)};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    infer_regression_label(ctx, in);
    ctx.outputs[0] = in;
  };
  // The label may be (N,) against (N, 1) data: viewed with the output's shape (same count).
  d.broadcast_view = [](const Attrs&, size_t i, const Shape& in, const Shape& out) { return i == 0 ? in : out; };
  if (logistic)
    d.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {sigmoid(b, b.input(0))}; };
  else
    d.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.input(0)}; };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.loss_head = true;
  d.gradient = [mae](GradContext& c) { return regression_gradient(c, mae); };
  return d;
}

// MakeLoss (and MXNet's newer make_loss, an alias here): the identity in the forward pass.
OpDef make_loss_def() {
  OpDef d;
  d.name = "MakeLoss";
  d.aliases = {"make_loss"};
  d.kind = OpKind::elementwise;
  d.fusable = true;
  d.inputs = {{"data"}};
  d.attrs = {optional("grad_scale", AttrKind::Float, 1.0), optional("valid_thresh", AttrKind::Float, 0.0),
             one_of("normalization", "null", {"null", "batch", "valid"})};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    ctx.outputs[0] = *data;
  };
  d.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.input(0)}; };
  d.channels_last = ChannelsLastRule{};  // channels anywhere: the identity
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.loss_head = true;
  d.gradient = make_loss_gradient;
  return d;
}

// _linalg_gemm2: out = alpha * op(A) * op(B) per matrix of a batch (..., M, K) x (..., K, N);
// _linalg_gemm adds beta * C, C of the output's shape. op transposes the last two axes when
// transpose_a / transpose_b says so. Batch extents must be equal (no broadcasting), as in
// MXNet. MXNet's `axis` moves the matrix rows elsewhere; only its default -2 is supported.
OpDef linalg_gemm_def(const char* name, bool with_c) {
  OpDef d;
  d.name = name;
  d.aliases = {std::string(name).substr(1)};  // linalg_gemm2, MXNet's public spelling
  d.kind = OpKind::compute;
  d.inputs = {{"A"}, {"B"}};
  if (with_c) d.inputs.push_back({"C"});
  d.attrs = {optional("transpose_a", AttrKind::Bool, false), optional("transpose_b", AttrKind::Bool, false),
             optional("alpha", AttrKind::Float, 1.0), optional("axis", AttrKind::Int, int64_t{-2})};
  if (with_c) d.attrs.push_back(optional("beta", AttrKind::Float, 1.0));
  d.infer = [with_c](InferContext& ctx) {
    if (ctx.attrs.get_int("axis") != -2)
      fail("axis={} is not supported: the matrices must be the last two axes (axis=-2)", ctx.attrs.get_int("axis"));
    const TensorType& a = ctx.in(0);
    const TensorType& b = ctx.in(1);
    require_float(a, "input 0 (A)");
    const DType dtype = require_same_dtype(ctx, {{"A"}, {"B"}, {"C"}}, with_c ? std::vector<size_t>{0, 1, 2}
                                                                                : std::vector<size_t>{0, 1});
    const size_t rank = a.shape.size();
    if (rank < 2 || b.shape.size() != rank)
      fail("A {} and B {} must have one rank, 2 or more", shape_str(a.shape), shape_str(b.shape));
    if (!std::equal(a.shape.begin(), a.shape.end() - 2, b.shape.begin()))
      fail("A {} and B {} must have the same batch extents (all but the last two axes)", shape_str(a.shape),
           shape_str(b.shape));
    const bool ta = ctx.attrs.get_bool("transpose_a"), tb = ctx.attrs.get_bool("transpose_b");
    const int64_t m = a.shape[rank - (ta ? 1 : 2)], k = a.shape[rank - (ta ? 2 : 1)];
    const int64_t kb = b.shape[rank - (tb ? 1 : 2)], n = b.shape[rank - (tb ? 2 : 1)];
    if (k != kb)
      fail("op(A) of A {} has {} columns but op(B) of B {} has {} rows (transpose_a={}, transpose_b={})",
           shape_str(a.shape), k, shape_str(b.shape), kb, ta, tb);
    Shape out = a.shape;
    out[rank - 2] = m;
    out[rank - 1] = n;
    if (with_c && ctx.in(2).shape != out)
      fail("input 2 (C) has shape {} but the product has {}", shape_str(ctx.in(2).shape), shape_str(out));
    ctx.outputs[0] = TensorType{dtype, out};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  // alpha op(A) op(B) [+ beta C]: the products' gradients as _linalg_gemm2's, C's beta dy.
  d.gradient = [with_c](GradContext& c) {
    InputGrads grads = matmul_gradient(c, "_linalg_gemm2", {"alpha"});
    if (!with_c) return grads;
    grads.resize(3);
    if (c.wants(2) && c.out_grad_opt(0))
      grads[2] = c.emit("_mul_scalar", {*c.out_grad_opt(0)}, {{"scalar", format_mxnet_attr(c.attrs().get("beta"))}});
    return grads;
  };
  return d;
}

}  // namespace

void register_loss_linalg_ops(OpRegistry& r) {
  r.add(regression_output_def("LinearRegressionOutput", false, false));
  r.add(regression_output_def("LogisticRegressionOutput", true, false));
  r.add(regression_output_def("MAERegressionOutput", false, true));
  r.add(make_loss_def());
  r.add(linalg_gemm_def("_linalg_gemm2", false));
  r.add(linalg_gemm_def("_linalg_gemm", true));
}

}  // namespace ampfuse::ir::nn
