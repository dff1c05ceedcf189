// InstanceNorm, GroupNorm, L2Normalization and LRN: schemas, type inference and gradient
// rules, each one backward op of ir/ops/nn_loss_backward.cpp. Their
// math is in runtime/reference/zoo_norm_kernels.cpp; like LayerNorm they reduce, so they
// are external (compute) ops and run in f32 for low-precision data (the kernels load into
// f32 and round once; MXNet's AMP lists put them in fp32 anyway, LRN bf16 excepted).
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

#include <initializer_list>
#include <string>

namespace ampfuse::ir::nn {

namespace {

// The data of a normalization: known, floating point, of rank at least `min_rank`.
const TensorType* norm_data(const InferContext& ctx, size_t min_rank, std::string_view why) {
  const TensorType* data = known_input(ctx, 0);
  if (!data) return nullptr;
  require_float(*data, "the data");
  if (data->shape.size() < min_rank)
    fail("the data {} has rank {}; {} needs rank {} or more", shape_str(data->shape), data->shape.size(), why,
         min_rank);
  return data;
}

// The gradient of a one-input normalization: its backward op of (dy, x), with the
// forward node's attributes `copied`.
InputGrads data_gradient(GradContext& c, const std::string& backward_op, std::initializer_list<const char*> copied) {
  InputGrads grads(c.num_inputs());
  if (!c.wants(0) || !c.out_grad_opt(0)) return grads;
  Attrs a;
  for (const char* k : copied) a.set(k, c.attrs().get(k));
  grads[0] = c.emit_typed(backward_op, {*c.out_grad_opt(0), c.input(0)}, std::move(a));
  return grads;
}

// y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c], mean and (biased) var over the
// spatial axes of each (n, c).
OpDef instance_norm_def() {
  OpDef d;
  d.name = "InstanceNorm";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"gamma", SlotRole::param}, {"beta", SlotRole::param}};
  d.attrs = {epsilon(1e-3)};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const TensorType* data = norm_data(ctx, 3, "InstanceNorm (N, C, spatial...)");
    if (!data) return;
    const TensorType in = *data;
    fill_float_input(ctx, 1, "gamma", {in.dtype, {in.shape[1]}});
    fill_float_input(ctx, 2, "beta", {in.dtype, {in.shape[1]}});
    ctx.outputs[0] = in;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) { return normalization_gradient(c, "_backward_InstanceNorm", {"eps"}); };
  return d;
}

// MXNet 1.9.1's GroupNorm: the channels split into num_groups groups; each (n, group)
// is normalized over its channels and spatial positions, then scaled by gamma[group] and
// shifted by beta[group] (gamma and beta have one entry per group, not per channel).
// output_mean_var adds the mean and sqrt(var + eps) of each (n, group), shape (N, groups).
OpDef group_norm_def() {
  OpDef d;
  d.name = "GroupNorm";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"gamma", SlotRole::param}, {"beta", SlotRole::param}};
  d.num_outputs = [](const Attrs& a) { return a.get_bool("output_mean_var") ? 3 : 1; };
  d.attrs = {optional("num_groups", AttrKind::Int, int64_t{1}), epsilon(1e-5),
             optional("output_mean_var", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const int64_t groups = ctx.attrs.get_int("num_groups");
    if (groups < 1) fail("num_groups={} must be at least 1", groups);
    const TensorType* data = norm_data(ctx, 2, "GroupNorm (N, C, ...)");
    if (!data) return;
    const TensorType in = *data;
    if (in.shape[1] % groups != 0)
      fail("num_groups={} does not divide the {} channels of the data {}", groups, in.shape[1], shape_str(in.shape));
    fill_float_input(ctx, 1, "gamma", {in.dtype, {groups}});
    fill_float_input(ctx, 2, "beta", {in.dtype, {groups}});
    ctx.outputs[0] = in;
    for (size_t k = 1; k < ctx.outputs.size(); ++k) ctx.outputs[k] = TensorType{in.dtype, {in.shape[0], groups}};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) {
    return normalization_gradient(c, "_backward_GroupNorm", {"num_groups", "eps"});
  };
  return d;
}

// y = x / sqrt(sum(x^2) + eps), the sum over every axis but the first (instance), over
// axis 1 (channel) or over the axes after the second (spatial).
OpDef l2_normalization_def() {
  OpDef d;
  d.name = "L2Normalization";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {epsilon(1e-10), one_of("mode", "instance", {"instance", "channel", "spatial"})};
  d.infer = [](InferContext& ctx) {
    check_epsilon(ctx.attrs);
    const std::string& mode = ctx.attrs.get_string("mode");
    const size_t min_rank = mode == "spatial" ? 3 : mode == "channel" ? 2 : 1;
    const TensorType* data = norm_data(ctx, min_rank, fmt::format("mode={}", mode));
    if (!data) return;
    ctx.outputs[0] = *data;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) { return data_gradient(c, "_backward_L2Normalization", {"eps", "mode"}); };
  return d;
}

// Local response normalization across channels (MXNet's LRN, 4-D NCHW data):
//   y = x * (knorm + alpha / nsize * sum of x^2 over channels c - h .. c + h)^-beta,
// h = (nsize - 1) / 2, the window clipped at the edges. An even nsize thus sums nsize - 1
// channels but still divides alpha by nsize, as MXNet 1.9.1 does.
OpDef lrn_def() {
  OpDef d;
  d.name = "LRN";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {required("nsize", AttrKind::Int), optional("alpha", AttrKind::Float, 1e-4),
             optional("beta", AttrKind::Float, 0.75), optional("knorm", AttrKind::Float, 2.0)};
  d.infer = [](InferContext& ctx) {
    if (ctx.attrs.get_int("nsize") < 1) fail("nsize={} must be at least 1", ctx.attrs.get_int("nsize"));
    const TensorType* data = norm_data(ctx, 4, "LRN (N, C, H, W)");
    if (!data) return;
    if (data->shape.size() != 4) fail("the data {} must have rank 4 (N, C, H, W)", shape_str(data->shape));
    ctx.outputs[0] = *data;
  };
  d.gradient = [](GradContext& c) {
    return data_gradient(c, "_backward_LRN", {"nsize", "alpha", "beta", "knorm"});
  };
  d.amp_fp16 = AmpClass::fp32;
  d.amp_bf16 = AmpClass::neutral;  // MXNet's BF16_FP32_FUNCS: runs in bf16 or f32
  return d;
}

}  // namespace

void register_zoo_norm_ops(OpRegistry& r) {
  r.add(instance_norm_def());
  r.add(group_norm_def());
  r.add(l2_normalization_def());
  r.add(lrn_def());
}

}  // namespace ampfuse::ir::nn
