// _BatchNorm_train: BatchNorm in training (MXNet is_train=True), its schema, type inference
// and gradient. engine/passes/training_mode.h puts it in place of BatchNorm.
#include "ir/error.h"
#include "ir/ops/nn_norm.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

// The gradient of the normalized output, as MXNet 1.9.1's CPU BatchNormBackwardImpl
// computes it (batch_norm.cc), per channel, with M elements per channel:
//   sum_g = sum(dy),  dotp = sum(dy * (x - mean))
//   dx    = ((dy - sum_g / M) - (x - mean) * (dotp * invstd^2 / M)) * (invstd * gamma)
//   dgamma = dotp * invstd  (0 with fix_gamma, as MXNet writes),  dbeta = sum_g
// written with existing ops (casts, broadcast_*, sum over every axis but `axis`): the
// planner fuses the elementwise chains and the reductions read dy and x once, and no new
// kernel has to be written for each backend. The statistics are the forward node's batch
// mean and invstd outputs (3 and 4), so nothing is recomputed. It is computed in the
// statistics' type (f32, f64 for f64 data) and dx rounded once to the data's dtype.
// Only y's gradient flows back, as in MXNet, whose backward reads only that one: the
// moving statistics (outputs 1 and 2) are aux states, written back but never
// differentiated, and the batch mean and invstd (3 and 4, output_mean_var's) pass none.
InputGrads batch_norm_train_gradient(GradContext& c) {
  const Attrs attrs = c.attrs();
  const TensorType data = c.input_type(0);
  const TensorType stats = c.type(c.output(3));
  const auto axis = normalize_axis(attrs.get_int("axis"), data.shape.size());
  const bool fix_gamma = attrs.get_bool("fix_gamma");
  Shape per_channel_view(data.shape.size(), 1);
  per_channel_view[static_cast<size_t>(axis)] = data.shape[static_cast<size_t>(axis)];
  const double items_per_channel = static_cast<double>(num_elements(data.shape) / num_elements(stats.shape));
  const ValueRef gamma_in = c.input(1);

  const auto per_channel_sum = [&](ValueRef v) {
    Attrs a;
    a.set("axis", std::vector<int64_t>{axis});
    a.set("exclude", true);
    a.set("keepdims", true);
    return c.emit_typed("sum", {v}, std::move(a));
  };
  const auto div_by_items = [&](ValueRef v) {
    return c.emit("_div_scalar", {v}, {{"scalar", fmt::format("{}", items_per_channel)}});
  };
  const ValueRef dy = c.cast(c.out_grad(0), stats.dtype);
  const ValueRef x = c.cast(c.input(0), stats.dtype);
  const ValueRef mean = c.reshape(c.output(3), per_channel_view);
  const ValueRef invstd = c.reshape(c.output(4), per_channel_view);
  const ValueRef centered = c.emit("broadcast_sub", {x, mean});
  const ValueRef sum_g = per_channel_sum(dy);
  const ValueRef dotp = per_channel_sum(c.emit("elemwise_mul", {dy, centered}));

  InputGrads grads(5);
  if (c.wants(0)) {
    const ValueRef k = div_by_items(c.emit("elemwise_mul", {c.emit("elemwise_mul", {dotp, invstd}), invstd}));
    const ValueRef gamma = fix_gamma ? ValueRef{} : c.cast(c.reshape(gamma_in, per_channel_view), stats.dtype);
    const ValueRef iw = fix_gamma ? invstd : c.emit("elemwise_mul", {invstd, gamma});
    const ValueRef shifted = c.emit("broadcast_sub", {dy, div_by_items(sum_g)});
    const ValueRef projected = c.emit("broadcast_sub", {shifted, c.emit("broadcast_mul", {centered, k})});
    grads[0] = c.cast(c.emit("broadcast_mul", {projected, iw}), data.dtype);
  }
  const Shape channels = stats.shape;
  if (c.wants(1)) {
    const DType gamma_dtype = c.input_type(1).dtype;
    grads[1] = fix_gamma ? c.zeros_like(c.input(1))
                         : c.cast(c.reshape(c.emit("elemwise_mul", {dotp, invstd}), channels), gamma_dtype);
  }
  if (c.wants(2)) grads[2] = c.cast(c.reshape(sum_g, channels), c.input_type(2).dtype);
  return grads;
}

OpDef batch_norm_train_def() {
  OpDef d;
  d.name = "_BatchNorm_train";
  // MXNet 1.9.1's training forward (batch_norm.cc, BatchNormForwardImpl and the moving
  // update in BatchNormBackwardImpl), in the statistics' type, M items per channel (every
  // axis but `axis`):
  //   mean = sum(x) / M;  var = sum((x - mean)^2) / M          (biased, as MXNet's CPU kernel)
  //   invstd = 1 / sqrt(var + eps)                            (0 when var = eps = 0)
  //   y = ((x - mean) * invstd) * gamma + beta                 (gamma = 1 with fix_gamma)
  //   new_moving_mean = moving_mean * momentum + mean * (1 - momentum)
  //   new_moving_var  = moving_var * momentum + (1 / invstd^2 - eps) * (1 - momentum)
  // MXNet recovers the variance of the update from invstd (INVSTD_TO_VARIANCE), so does the
  // kernel (runtime/reference/norm_train_kernels.cpp), for MXNet's last bit. Outputs: y,
  // new_moving_mean, new_moving_var, then the batch mean and invstd the gradient reads
  // (what MXNet's output_mean_var reports in training).
  d.kind = OpKind::compute;
  d.inputs = {{"data"},
              {"gamma", SlotRole::param},
              {"beta", SlotRole::param},
              {"moving_mean", SlotRole::aux},
              {"moving_var", SlotRole::aux}};
  d.num_outputs = [](const Attrs&) { return 5; };
  d.attrs = {epsilon(1e-3), optional("momentum", AttrKind::Float, 0.9),
             optional("fix_gamma", AttrKind::Bool, true), optional("axis", AttrKind::Int, int64_t{1})};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const std::optional<TensorType> stats = infer_batch_norm_inputs(ctx);
    if (!stats) return;
    ctx.outputs[0] = *ctx.inputs[0];
    for (size_t k = 1; k < 5; ++k) ctx.outputs[k] = *stats;
  };
  // AMP conversion runs before the training rewrite and classes BatchNorm by MXNet's lists
  // (keeping the statistics in f32); this op then reads what AMP gave BatchNorm.
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  d.gradient = batch_norm_train_gradient;
  return d;
}

}  // namespace

void register_norm_train_ops(OpRegistry& r) { r.add(batch_norm_train_def()); }

}  // namespace ampfuse::ir::nn
