// _Dropout_train: Dropout in training (MXNet is_train=True, or mode='always'), its schema,
// type inference and gradient. engine/passes/training_mode.h puts it in place of Dropout.
//
// Element i is kept when the counter-based generator's uniform number for its mask index
// is below 1 - p (ir/philox.h: Philox-4x32-10 keyed by `seed`, counter (index, `offset`)),
// and a kept element is scaled by 1 / (1 - p) as MXNet does:
//   y = x * mask,  mask = keep ? 1 / (1 - p) : 0
// The scale is MXNet's 1.0f / (1.0f - p) in f32 whatever the data's dtype (its mask is a
// float tensor); the product is computed in the compute type (f32, f64 for f64 data) and
// rounded once. With `axes` (variational dropout) the mask has extent 1 along those axes
// and is shared along them: the mask index is the element's index in that smaller shape.
// p = 1 drops everything (y = x * 0) where MXNet's 0 * (1/0) would give NaN.
//
// The mask is a function of (seed, offset, index) alone, so it is never stored: the
// gradient is the same op with the same attributes applied to the output's gradient
// (dx = dy * mask), which recomputes it.
//
// The step: with `step_stride` > 0 the op reads a second input, `step`, an f32 scalar of
// shape () holding a step count s, and the counter offset is offset + s * step_stride
// (ir::philox_step_offset) instead of `offset`. The step is a value, not an attribute, so
// a trainer compiles its step once and draws fresh masks by binding s = 0, 1, 2...: with
// step_stride = the number of Dropout nodes sharing a seed (engine/passes/training_mode.h)
// no two (node, step) pairs share a counter offset. At s = 0 the mask is the one of the
// attribute form with the same offset; at step s, the one with offset + s * step_stride.
// The gradient reads the same step, so the backward recomputes the forward's mask.
//
// Without `axes` the op is its scalar recipe (philox_bits24, ir/scalar_program.h: the
// element index is the row-major index in the output's shape) and fuses with its
// neighbours, forward and backward; the interpreter evaluates the same recipe. With `axes`
// the mask index is no row-major index of the output, so such a node runs the reference
// kernel (runtime/reference/dropout_train_kernels.cpp) as an external op.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"
#include "ir/philox.h"

#include <set>

namespace ampfuse::ir::nn {

namespace {

OpDef dropout_train_def() {
  OpDef d;
  d.name = "_Dropout_train";
  d.kind = OpKind::compute;
  // The step holds an integer: AMP must never round it to lp16 (f16 holds integers exactly
  // only up to 2048).
  d.inputs = {{"data"}, {.name = "step", .optional = true, .index = true}};
  d.num_inputs = [](const Attrs& a) { return a.get_int("step_stride") > 0 ? 2 : 1; };
  d.attrs = {optional("p", AttrKind::Float, 0.5), optional("axes", AttrKind::IntList, std::vector<int64_t>{}),
             optional("seed", AttrKind::Int, int64_t{0}), optional("offset", AttrKind::Int, int64_t{0}),
             optional("step_stride", AttrKind::Int, int64_t{0})};
  d.infer = [](InferContext& ctx) {
    const double p = ctx.attrs.get_float("p");
    if (!(p >= 0 && p <= 1)) fail("attribute 'p' must be in [0, 1], not {}", p);
    const TensorType& in = ctx.in(0);
    require_float(in, "the data");
    std::set<int64_t> seen;
    for (int64_t a : ctx.attrs.get_ints("axes"))
      if (!seen.insert(normalize_axis(a, in.shape.size(), "axes")).second)
        fail("attribute 'axes' names axis {} twice", a);
    if (const int64_t stride = ctx.attrs.get_int("step_stride"); stride < 0)
      fail("attribute 'step_stride' must be >= 0, not {}", stride);
    if (ctx.inputs.size() > 1) {
      const TensorType& step = ctx.in(1);
      if (step.dtype != DType::f32 || !step.shape.empty())
        fail("the step must be an f32 scalar of shape (), not {}", type_str(step));
    }
    ctx.outputs[0] = in;
  };
  d.fusable = true;
  d.recipe_applies = [](const Attrs& a) { return a.get_ints("axes").empty(); };
  d.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<ScalarBuilder::Val> {
    const double p = a.get_float("p");
    // MXNet's f32 scale; p = 1 keeps nothing, so its scale (1/0) is never used.
    const double scale = p < 1 ? 1.0f / (1.0f - static_cast<float>(p)) : 0.0;
    const auto seed = static_cast<uint64_t>(a.get_int("seed")), offset = static_cast<uint64_t>(a.get_int("offset"));
    const int64_t stride = a.get_int("step_stride");
    const auto bits = stride > 0 ? b.philox_bits24_at(b.input(1), seed, offset, static_cast<uint64_t>(stride))
                                 : b.philox_bits24(seed, offset);
    const auto keep = b.binary(ScalarOp::lt, bits, b.constant(dropout_keep_threshold(p)));  // integers below 2^25: exact
    return {b.mul(b.input(0), b.select(keep, b.constant(scale), b.constant(0)))};
  };
  // As Dropout, though AMP conversion runs before the training rewrite and meets Dropout.
  d.amp_fp16 = AmpClass::neutral;
  d.amp_bf16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) -> InputGrads {
    const Attrs attrs = c.attrs();
    if (c.num_inputs() == 1) return {c.emit_typed("_Dropout_train", {c.out_grad(0)}, attrs)};
    // The same step, so the same mask; the step itself has no gradient.
    const ValueRef step = c.input(1);
    return {c.emit_typed("_Dropout_train", {c.out_grad(0), step}, attrs), std::nullopt};
  };
  return d;
}

}  // namespace

void register_dropout_train_ops(OpRegistry& r) { r.add(dropout_train_def()); }

}  // namespace ampfuse::ir::nn
