// FullyConnected, dot, batch_dot and Embedding: schemas and type inference.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"

namespace ampfuse::ir::nn {

namespace {

Shape slice(const Shape& s, size_t begin, size_t end) { return Shape(s.begin() + begin, s.begin() + end); }

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
  return d;
}

}  // namespace

void register_dense_ops(OpRegistry& r) {
  r.add(fully_connected_def());
  r.add(dot_def());
  r.add(batch_dot_def());
  r.add(embedding_def());
}

}  // namespace ampfuse::ir::nn
