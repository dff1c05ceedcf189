// BatchNorm and LayerNorm: schemas, type inference and (LayerNorm) the gradient rule.
#include "ir/error.h"
#include "ir/ops/nn_norm.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

// invstd = 1 / sqrt(var + eps). MXNet divides in f64 and rounds once; for a correctly
// rounded division of f32 operands that is the same (f64 has more than 2 * 24 + 2 bits).
ScalarBuilder::Val batch_norm_invstd(ScalarBuilder& b, ScalarBuilder::Val var, const Attrs& a) {
  return b.div(b.constant(1.0), b.unary(ScalarOp::sqrt, b.add(var, b.constant(a.get_float("eps")))));
}

OpDef batch_norm_def() {
  OpDef d;
  d.name = "BatchNorm";
  // At inference BatchNorm is a per-channel affine map, so its recipe lets the planner fold
  // it into the loop of the ops around it (no pass over memory of its own). MXNet's order
  // of operations, in the compute type (f32, f64 for f64 data):
  //   invstd = 1 / sqrt(var + eps)                  (batch_norm_invstd)
  //   y = ((x - mean) * invstd) * gamma + beta      (gamma = 1 with fix_gamma)
  // The per-channel inputs are viewed as [1,C,1,...] along `axis` (broadcast_view). With
  // output_mean_var the statistics are outputs of another shape, so the node is not fused:
  // its reference kernel (runtime/reference/norm_kernels.cpp) evaluates this recipe for y
  // and batch_norm_invstd_program for the statistic.
  d.kind = OpKind::compute;
  d.fusable = true;
  d.inputs = {{"data"},
              {"gamma", SlotRole::param},
              {"beta", SlotRole::param},
              {"moving_mean", SlotRole::aux},
              {"moving_var", SlotRole::aux}};
  d.num_outputs = [](const Attrs& a) { return a.get_bool("output_mean_var") ? 3 : 1; };
  // momentum only matters in training: the moving statistics' update (engine/passes/training_mode.h).
  d.attrs = {epsilon(1e-3), optional("momentum", AttrKind::Float, 0.9),
             optional("fix_gamma", AttrKind::Bool, true), optional("use_global_stats", AttrKind::Bool, false),
             optional("output_mean_var", AttrKind::Bool, false), optional("axis", AttrKind::Int, int64_t{1})};
  d.ignored_attrs = {"cudnn_off", "min_calib_range", "max_calib_range"};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const std::optional<TensorType> stats = infer_batch_norm_inputs(ctx);
    if (!stats) return;
    ctx.outputs[0] = *ctx.inputs[0];
    // The extra outputs are the statistics used: the moving mean and, as MXNet computes
    // it, the inverse standard deviation 1/sqrt(moving_var + eps).
    for (size_t k = 1; k < ctx.outputs.size(); ++k) ctx.outputs[k] = *stats;
  };
  d.recipe_applies = [](const Attrs& a) { return !a.get_bool("output_mean_var"); };
  d.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<ScalarBuilder::Val> {
    const ScalarBuilder::Val x = b.input(0), mean = b.input(3), var = b.input(4);
    const ScalarBuilder::Val invstd = batch_norm_invstd(b, var, a);
    const ScalarBuilder::Val normed = b.mul(b.sub(x, mean), invstd);
    const ScalarBuilder::Val scaled = a.get_bool("fix_gamma") ? normed : b.mul(normed, b.input(1));
    return {b.add(scaled, b.input(2))};
  };
  d.broadcast_view = [](const Attrs& a, size_t i, const Shape& in, const Shape& out) -> Shape {
    if (i == 0) return in;
    const auto axis = static_cast<size_t>(normalize_axis(a.get_int("axis"), out.size()));
    Shape view(out.size(), 1);
    view[axis] = in.at(0);
    return view;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  d.keep_fp32_inputs_bf16 = d.keep_fp32_inputs_fp16 = {1, 2, 3, 4};
  d.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::axis_attr, "axis"};
  return d;
}

// MXNet 1.9.1's _contrib_SyncBatchNorm (GluonCV's *_syncbn models): at inference a BatchNorm
// over axis 1 with the moving statistics, the statistics synchronised across devices only
// in training. Its own order of operations (sync_batch_norm-inl.h), which differs from
// BatchNorm's in the last bit: with sd = sqrt(var + eps),
//   y = x * (gamma / sd) + (beta - (mean * gamma) / sd)        (gamma = 1 with fix_gamma)
// ndev and key only name the devices to synchronise. output_mean_var is refused: it
// reports training-time batch statistics.
OpDef sync_batch_norm_def() {
  OpDef d = batch_norm_def();
  d.name = "_contrib_SyncBatchNorm";
  d.num_outputs = nullptr;
  d.attrs = {epsilon(1e-3), optional("fix_gamma", AttrKind::Bool, true),
             optional("use_global_stats", AttrKind::Bool, false), optional("output_mean_var", AttrKind::Bool, false),
             optional("ndev", AttrKind::Int, int64_t{1}), optional("key", AttrKind::String, std::string{})};
  d.ignored_attrs = {"momentum"};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    if (ctx.attrs.get_bool("output_mean_var"))
      fail("output_mean_var=True (training-time batch statistics) is not supported");
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    if (in.shape.size() < 2) fail("the data {} needs a channel axis (axis 1)", shape_str(in.shape));
    const TensorType stats{in.dtype == DType::f64 ? DType::f64 : DType::f32, {in.shape[1]}};
    static constexpr const char* kNames[] = {"", "gamma", "beta", "moving_mean", "moving_var"};
    for (size_t i = 1; i < 5; ++i) fill_float_input(ctx, i, kNames[i], stats);
    ctx.outputs[0] = in;
  };
  d.recipe_applies = nullptr;
  d.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<ScalarBuilder::Val> {
    const ScalarBuilder::Val x = b.input(0), mean = b.input(3), var = b.input(4);
    const ScalarBuilder::Val gamma = a.get_bool("fix_gamma") ? b.constant(1) : b.input(1);
    const ScalarBuilder::Val sd = b.unary(ScalarOp::sqrt, b.add(var, b.constant(a.get_float("eps"))));
    return {b.add(b.mul(x, b.div(gamma, sd)), b.sub(b.input(2), b.div(b.mul(mean, gamma), sd)))};
  };
  d.broadcast_view = [](const Attrs&, size_t i, const Shape& in, const Shape& out) -> Shape {
    if (i == 0) return in;
    Shape view(out.size(), 1);
    view.at(1) = in.at(0);
    return view;
  };
  // MXNet 1.9.1: FP32_FUNCS in both lists (BatchNorm itself is neutral).
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.keep_fp32_inputs_bf16.clear();  // all of it runs in f32
  d.keep_fp32_inputs_fp16.clear();
  d.channels_last.reset();
  return d;
}

OpDef layer_norm_def() {
  OpDef d;
  d.name = "LayerNorm";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"gamma", SlotRole::param}, {"beta", SlotRole::param}};
  d.num_outputs = [](const Attrs& a) { return a.get_bool("output_mean_var") ? 3 : 1; };
  d.attrs = {optional("axis", AttrKind::Int, int64_t{-1}), epsilon(1e-5),
             optional("output_mean_var", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    const int64_t axis = normalize_axis(ctx.attrs.get_int("axis"), in.shape.size());
    fill_float_input(ctx, 1, "gamma", {in.dtype, {in.shape[axis]}});
    fill_float_input(ctx, 2, "beta", {in.dtype, {in.shape[axis]}});
    ctx.outputs[0] = in;
    // Mean and standard deviation sqrt(var + eps), with the normalized axis kept as 1.
    Shape reduced = in.shape;
    reduced[axis] = 1;
    for (size_t k = 1; k < ctx.outputs.size(); ++k) ctx.outputs[k] = TensorType{in.dtype, reduced};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) { return normalization_gradient(c, "_backward_LayerNorm", {"axis", "eps"}); };
  return d;
}

}  // namespace

std::optional<TensorType> infer_batch_norm_inputs(InferContext& ctx) {
  const TensorType* data = known_input(ctx, 0);
  if (!data) return std::nullopt;
  require_float(*data, "the data");
  const TensorType in = *data;
  const int64_t axis = normalize_axis(ctx.attrs.get_int("axis"), in.shape.size());
  // MXNet keeps the statistics of f16 data in f32 (its AccReal); so does AMP for bf16.
  const TensorType stats{in.dtype == DType::f64 ? DType::f64 : DType::f32, {in.shape[axis]}};
  static constexpr const char* kNames[] = {"", "gamma", "beta", "moving_mean", "moving_var"};
  for (size_t i = 1; i < 5; ++i) fill_float_input(ctx, i, kNames[i], stats);
  return stats;
}

ScalarProgram batch_norm_invstd_program(const Attrs& a) {
  ScalarBuilder b(4);  // gamma, beta, moving_mean, moving_var
  return b.finish({batch_norm_invstd(b, b.input(3), a)});
}

void register_norm_ops(OpRegistry& r) {
  r.add(batch_norm_def());
  r.add(sync_batch_norm_def());
  r.add(layer_norm_def());
}

}  // namespace ampfuse::ir::nn
