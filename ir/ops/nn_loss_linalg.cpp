// Loss heads (LinearRegressionOutput, LogisticRegressionOutput, MAERegressionOutput,
// MakeLoss) and linear algebra (_linalg_gemm2, _linalg_gemm): schemas, type inference and,
// for the loss heads, the scalar recipe of their forward pass.
//
// A loss head's forward is elementwise: identity, or sigmoid for LogisticRegressionOutput.
// Their labels and gradient settings only matter to training (a later issue), so the
// label is accepted and ignored, and the heads fuse like any elementwise op. MXNet's AMP
// lists put all of them (and both gemms) in fp32.
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

OpDef regression_output_def(const char* name, bool logistic) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::elementwise;
  d.fusable = true;
  d.inputs = {{"data"}, {"label"}};  // label input
  d.ignored_attrs = {"grad_scale"};
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
  d.ignored_attrs = {"grad_scale", "valid_thresh", "normalization"};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    ctx.outputs[0] = *data;
  };
  d.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.input(0)}; };
  d.channels_last = ChannelsLastRule{};  // channels anywhere: the identity
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
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
  if (!with_c) d.gradient = [](GradContext& c) { return matmul_gradient(c, "_linalg_gemm2", {"alpha"}); };
  return d;
}

}  // namespace

void register_loss_linalg_ops(OpRegistry& r) {
  r.add(regression_output_def("LinearRegressionOutput", false));
  r.add(regression_output_def("LogisticRegressionOutput", true));
  r.add(regression_output_def("MAERegressionOutput", false));
  r.add(make_loss_def());
  r.add(linalg_gemm_def("_linalg_gemm2", false));
  r.add(linalg_gemm_def("_linalg_gemm", true));
}

}  // namespace ampfuse::ir::nn
