// FullyConnected, dot, batch_dot and Embedding: schemas, type inference and gradient rules.
// The gradients of the matrix products are matrix products again (dot with transpose
// flags), so the executor runs them on oneDNN like the forward pass; Embedding's weight
// gradient is _backward_Embedding (ir/ops/nn_backward.cpp).
#include "ir/error.h"
#include "ir/ops/nn_ops.h"

namespace ampfuse::ir::nn {

namespace {

Shape slice(const Shape& s, size_t begin, size_t end) { return Shape(s.begin() + begin, s.begin() + end); }

const char* bool_attr(bool b) { return b ? "True" : "False"; }

// x (rows, features) -> y (rows, hidden) = x W^T + b: dx = dy W, dW = dy^T x, db = the sum
// of dy's rows (in the bias's dtype, which may be wider than the data's).
InputGrads fully_connected_gradient(GradContext& c) {
  const TensorType data = c.input_type(0), weight = c.input_type(1);
  const bool has_bias = c.num_inputs() > 2;
  const DType bias_dtype = has_bias ? c.input_type(2).dtype : data.dtype;
  InputGrads grads(c.num_inputs());
  if (!c.out_grad_opt(0)) return grads;
  const int64_t hidden = weight.shape[0], features = weight.shape[1];
  const int64_t rows = features == 0 ? 0 : num_elements(data.shape) / features;
  const ValueRef dy = c.reshape(*c.out_grad_opt(0), {rows, hidden});
  if (c.wants(0)) grads[0] = c.reshape(c.emit("dot", {dy, c.input(1)}), data.shape);
  if (c.wants(1))
    grads[1] = c.emit("dot", {dy, c.reshape(c.input(0), {rows, features})}, {{"transpose_a", "True"}});
  if (has_bias && c.wants(2)) grads[2] = c.emit("sum", {c.cast(dy, bias_dtype)}, {{"axis", "0"}});
  return grads;
}

// The weight gets the head gradient's rows added at the rows the indices read; the
// indices get no gradient.
InputGrads embedding_gradient(GradContext& c) {
  InputGrads grads(2);
  if (c.out_grad_opt(0) && c.wants(1))
    grads[1] = c.emit_typed("_backward_Embedding", {c.input(0), *c.out_grad_opt(0)}, c.attrs());
  return grads;
}

OpDef fully_connected_def() {
  OpDef d;
  d.name = "FullyConnected";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"weight", SlotRole::param}, {"bias", SlotRole::param, true}};
  d.num_inputs = [](const Attrs& a) { return a.get_bool("no_bias") ? 2 : 3; };
  d.attrs = {required("num_hidden", AttrKind::Int), optional("no_bias", AttrKind::Bool, false),
             optional("flatten", AttrKind::Bool, true)};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    const int64_t hidden = ctx.attrs.get_int("num_hidden");
    if (hidden < 1) fail("num_hidden={} must be positive", hidden);
    const bool flatten = ctx.attrs.get_bool("flatten");
    if (in.shape.size() < (flatten ? 2u : 1u))
      fail("the data must have rank {} or more with flatten={}, not {}", flatten ? 2 : 1, flatten, shape_str(in.shape));
    // flatten=True: (N, ...) is read as (N, features); False: the last axis is the features.
    const int64_t features = flatten ? num_elements(slice(in.shape, 1, in.shape.size())) : in.shape.back();
    Shape out = flatten ? Shape{in.shape[0]} : slice(in.shape, 0, in.shape.size() - 1);
    out.push_back(hidden);
    fill_input(ctx, 1, "weight", {in.dtype, {hidden, features}});
    // A bias may stay wider than the data (f32 with bf16 data, as oneDNN and cuDNN take it).
    if (ctx.inputs.size() > 2) fill_float_input(ctx, 2, "bias", {in.dtype, {hidden}});
    ctx.outputs[0] = TensorType{in.dtype, out};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::lowp;
  d.gradient = fully_connected_gradient;
  return d;
}

// Both operands of a matrix product share one float dtype.
bool matmul_operands(const InferContext& ctx, TensorType& lhs, TensorType& rhs) {
  const TensorType* l = known_input(ctx, 0);
  const TensorType* r = known_input(ctx, 1);
  if (!l || !r) return false;
  require_float(*l, "lhs");
  require_float(*r, "rhs");
  if (l->dtype != r->dtype) fail("lhs is {} but rhs is {}: both operands need one dtype", type_str(*l), type_str(*r));
  lhs = *l;
  rhs = *r;
  return true;
}

std::vector<AttrSpec> transpose_attrs() {
  return {optional("transpose_a", AttrKind::Bool, false), optional("transpose_b", AttrKind::Bool, false)};
}

// MXNet's dot: lhs is read as a matrix (all leading axes, last axis), or with transpose_a
// as (first axis, all trailing axes) transposed; rhs as (first axis, trailing axes), or
// with transpose_b as (leading axes, last axis) transposed. The product keeps the axes
// not contracted, lhs's then rhs's; two vectors give shape (1,).
Shape dot_shape(const Shape& l, const Shape& r, bool ta, bool tb) {
  if (l.size() == 1 && r.size() == 1) {
    if (ta || tb) fail("dot cannot transpose 1-D operands");
    if (l[0] != r[0]) fail("dot of vectors of length {} and {}", l[0], r[0]);
    return {1};
  }
  if (l.empty() || r.empty()) fail("dot needs operands of rank 1 or more");
  const int64_t lk = ta ? l.front() : l.back();
  const int64_t rk = tb ? r.back() : r.front();
  if (lk != rk)
    fail("dot contracts lhs {} (transpose_a={}) with rhs {} (transpose_b={}): {} != {}", shape_str(l), ta, shape_str(r),
         tb, lk, rk);
  Shape out = ta ? slice(l, 1, l.size()) : slice(l, 0, l.size() - 1);
  const Shape rest = tb ? slice(r, 0, r.size() - 1) : slice(r, 1, r.size());
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// dot and batch_dot: widest for both targets, as MXNet 1.9.1's lists have them
// (WIDEST_TYPE_CASTS): they run low where both operands already are (attention's products of
// FullyConnected outputs) and in f32 otherwise. A user who wants them low whatever their
// operands moves them with --lp16-ops.
void set_matmul_amp(OpDef& d) { d.amp_bf16 = d.amp_fp16 = AmpClass::widest; }

OpDef dot_def() {
  OpDef d;
  d.name = "dot";
  d.kind = OpKind::compute;
  d.inputs = {{"lhs"}, {"rhs"}};
  d.attrs = transpose_attrs();
  d.ignored_attrs = {"forward_stype"};
  d.infer = [](InferContext& ctx) {
    TensorType l, r;
    if (!matmul_operands(ctx, l, r)) return;
    ctx.outputs[0] = TensorType{
        l.dtype, dot_shape(l.shape, r.shape, ctx.attrs.get_bool("transpose_a"), ctx.attrs.get_bool("transpose_b"))};
  };
  set_matmul_amp(d);
  d.gradient = [](GradContext& c) { return matmul_gradient(c, "dot"); };
  return d;
}

OpDef batch_dot_def() {
  OpDef d;
  d.name = "batch_dot";
  d.kind = OpKind::compute;
  d.inputs = {{"lhs"}, {"rhs"}};
  d.attrs = transpose_attrs();
  d.ignored_attrs = {"forward_stype"};
  d.infer = [](InferContext& ctx) {
    TensorType l, r;
    if (!matmul_operands(ctx, l, r)) return;
    const size_t n = l.shape.size();
    if (n < 3 || r.shape.size() != n)
      fail("batch_dot needs operands of one rank, 3 or more: lhs {} rhs {}", shape_str(l.shape), shape_str(r.shape));
    if (slice(l.shape, 0, n - 2) != slice(r.shape, 0, n - 2))
      fail("batch_dot: the batch axes of lhs {} and rhs {} differ", shape_str(l.shape), shape_str(r.shape));
    const bool ta = ctx.attrs.get_bool("transpose_a"), tb = ctx.attrs.get_bool("transpose_b");
    const int64_t m = ta ? l.shape[n - 1] : l.shape[n - 2], lk = ta ? l.shape[n - 2] : l.shape[n - 1];
    const int64_t rk = tb ? r.shape[n - 1] : r.shape[n - 2], cols = tb ? r.shape[n - 2] : r.shape[n - 1];
    if (lk != rk)
      fail("batch_dot contracts {} columns of lhs {} with {} rows of rhs {}", lk, shape_str(l.shape), rk,
           shape_str(r.shape));
    Shape out = slice(l.shape, 0, n - 2);
    out.push_back(m);
    out.push_back(cols);
    ctx.outputs[0] = TensorType{l.dtype, out};
  };
  set_matmul_amp(d);
  d.gradient = [](GradContext& c) { return matmul_gradient(c, "batch_dot"); };
  return d;
}

OpDef embedding_def() {
  OpDef d;
  d.name = "Embedding";
  d.kind = OpKind::compute;
  d.inputs = {{.name = "data", .index = true}, {"weight", SlotRole::param}};
  d.attrs = {required("input_dim", AttrKind::Int), required("output_dim", AttrKind::Int),
             optional("dtype", AttrKind::DType, DType::f32)};
  d.ignored_attrs = {"sparse_grad"};
  d.table_index = TableIndex{0, "input_dim"};
  d.infer = [](InferContext& ctx) {
    const TensorType* indices = known_input(ctx, 0);
    if (!indices) return;
    const Shape in_shape = indices->shape;
    const int64_t rows = ctx.attrs.get_int("input_dim"), cols = ctx.attrs.get_int("output_dim");
    if (rows < 1 || cols < 1) fail("input_dim={} and output_dim={} must be positive", rows, cols);
    // A weight AMP already narrowed decides the output type (Embedding is neutral);
    // otherwise the dtype attribute does, as in MXNet.
    const TensorType* weight = known_input(ctx, 1);
    const DType dtype = weight ? weight->dtype : ctx.attrs.get_dtype("dtype");
    if (!is_float(dtype)) fail("Embedding weights must be float, not {}", dtype_name(dtype));
    fill_input(ctx, 1, "weight", {dtype, {rows, cols}});
    Shape out = in_shape;
    out.push_back(cols);
    ctx.outputs[0] = TensorType{dtype, out};
  };
  // MXNet 1.9.1: neutral in the fp16 list, FP32_FUNCS in the bf16 one.
  d.amp_fp16 = AmpClass::neutral;
  d.amp_bf16 = AmpClass::fp32;
  d.gradient = embedding_gradient;
  return d;
}

}  // namespace

// With Y = op_a(A) op_b(B) and head gradient G: dA = G op_b(B)^T, or op_b(B) G^T when A is
// stored transposed; dB = op_a(A)^T G, or G^T op_a(A) when B is stored transposed. Each is
// one product with transpose flags, no explicit transpose.
InputGrads matmul_gradient(GradContext& c, const std::string& op, const std::vector<std::string>& extra) {
  const Attrs attrs = c.attrs();
  const bool ta = attrs.get_bool("transpose_a"), tb = attrs.get_bool("transpose_b");
  const Shape a_shape = c.input_type(0).shape, b_shape = c.input_type(1).shape;
  InputGrads grads(2);
  if (!c.out_grad_opt(0)) return grads;
  Shape a_view = a_shape, b_view = b_shape, y_view = c.type(c.output(0)).shape;
  if (op == "dot") {  // the matrices dot reads (see dot_shape); vectors are 1-row / 1-column
    const auto ext = [](const Shape& s, size_t b, size_t e) { return num_elements(slice(s, b, e)); };
    const size_t la = a_shape.size(), lb = b_shape.size();
    a_view = ta ? Shape{a_shape.front(), ext(a_shape, 1, la)} : Shape{ext(a_shape, 0, la - 1), a_shape.back()};
    b_view = tb ? Shape{ext(b_shape, 0, lb - 1), b_shape.back()} : Shape{b_shape.front(), ext(b_shape, 1, lb)};
    y_view = {a_view[ta ? 1 : 0], b_view[tb ? 0 : 1]};
  }
  std::map<std::string, std::string> base;
  for (const std::string& name : extra) base[name] = format_mxnet_attr(attrs.get(name));
  const auto product = [&](ValueRef lhs, ValueRef rhs, bool t_lhs, bool t_rhs) {
    std::map<std::string, std::string> a = base;
    a["transpose_a"] = bool_attr(t_lhs);
    a["transpose_b"] = bool_attr(t_rhs);
    return c.emit(op, {lhs, rhs}, a);
  };
  const ValueRef a = c.reshape(c.input(0), a_view), b = c.reshape(c.input(1), b_view);
  const ValueRef g = c.reshape(*c.out_grad_opt(0), y_view);
  if (c.wants(0)) grads[0] = c.reshape(ta ? product(b, g, tb, true) : product(g, b, false, !tb), a_shape);
  if (c.wants(1)) grads[1] = c.reshape(tb ? product(g, a, true, ta) : product(a, g, !ta, false), b_shape);
  return grads;
}

void register_dense_ops(OpRegistry& r) {
  r.add(fully_connected_def());
  r.add(with_epilogue(fully_connected_def(), "_fused_fc"));
  r.add(dot_def());
  r.add(batch_dot_def());
  r.add(embedding_def());
}

}  // namespace ampfuse::ir::nn
