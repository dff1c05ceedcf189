// The backward ops of softmax, the SoftmaxOutput loss head and the normalizations (LRN
// included), which the gradient rules in nn_softmax.cpp, nn_norm.cpp and nn_zoo_norm.cpp
// emit. Their math is in runtime/reference/loss_backward_kernels.cpp.
//
// Each reduces along rows (a sum over the softmax axis, the statistics of a normalized
// group), which the fusion planner does not fuse, so written with forward ops (sum with
// keepdims, then broadcast arithmetic) each would be several kernels with the full-size
// intermediates (dy * y, x - mean...) in memory between them. One op reads its inputs
// once per pass, accumulates in f32 (f64 for f64) and rounds each output once.
// All are compute ops, not fusable, AMP neutral (they run in the type the forward ran in)
// and have no MXNet aliases: graphs from MXNet never hold them.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

#include <functional>

namespace ampfuse::ir::nn {

namespace {

OpDef backward_op(std::string name, std::vector<InputSlot> inputs, std::vector<AttrSpec> attrs) {
  OpDef d;
  d.name = std::move(name);
  d.kind = OpKind::compute;
  d.inputs = std::move(inputs);
  d.attrs = std::move(attrs);
  d.amp_bf16 = d.amp_fp16 = AmpClass::neutral;
  return d;
}

// The gradient arriving at an output must have that output's shape.
void require_same_shape(const InferContext& ctx, size_t grad, size_t value) {
  const TensorType &g = ctx.in(grad), &v = ctx.in(value);
  require_float(g, "the output gradient");
  if (g.shape != v.shape)
    fail("the output gradient has shape {} but the value it differentiates has {}", shape_str(g.shape),
         shape_str(v.shape));
}

// dx of softmax (y = softmax(x / t) along axis; negate: of -x, softmin) or log_softmax:
//   softmax:     dx = y * (dy - sum(dy * y)) / t
//   log_softmax: dx = (dy - exp(y) * sum(dy)) / t
// negated for softmin. Inputs: dy, y. `dtype` is x's (softmax's output dtype may differ).
OpDef backward_softmax_def() {
  OpDef d = backward_op("_backward_softmax", {{"ograd"}, {"output"}},
                        {required("axis", AttrKind::Int), optional("temperature", AttrKind::Float, 1.0),
                         optional("log", AttrKind::Bool, false), optional("negate", AttrKind::Bool, false),
                         required("dtype", AttrKind::DType)});
  d.infer = [](InferContext& ctx) {
    require_same_shape(ctx, 0, 1);
    const TensorType y = ctx.in(1);
    normalize_axis(ctx.attrs.get_int("axis"), y.shape.size());
    ctx.outputs[0] = TensorType{ctx.attrs.get_dtype("dtype"), y.shape};
  };
  return d;
}

// SoftmaxOutput's implicit gradient from its output and label (MXNet 1.9.1's
// softmax_output-inl.h Backward; the forward's attributes, see nn_softmax.cpp).
// The label holds one class per softmax row: rows of the last axis (preserve_shape),
// positions (n, spatial...) of axis 1 (multi_output), or the first axis.
OpDef backward_softmax_output_def() {
  OpDef d = backward_op("_backward_SoftmaxOutput", {{"output"}, {.name = "label", .index = true}},
                        {optional("grad_scale", AttrKind::Float, 1.0), optional("ignore_label", AttrKind::Float, -1.0),
                         optional("use_ignore", AttrKind::Bool, false), optional("multi_output", AttrKind::Bool, false),
                         optional("preserve_shape", AttrKind::Bool, false),
                         one_of("normalization", "null", {"null", "batch", "valid"}),
                         optional("smooth_alpha", AttrKind::Float, 0.0)});
  d.infer = [](InferContext& ctx) {
    const TensorType out = ctx.in(0), label = ctx.in(1);
    require_float(out, "the output");
    const Shape& s = out.shape;
    const bool multi = ctx.attrs.get_bool("multi_output");
    if (s.empty() || (multi && s.size() < 2)) fail("the output {} has too few axes", shape_str(s));
    // MXNet reads one label per row (multi_output: per (n, position)); more labels than
    // rows are read as far as the rows go (non-multi data of rank 3 and more).
    Shape row_axes = {s[0]};  // the axes that index softmax rows
    if (multi) row_axes.insert(row_axes.end(), s.begin() + 2, s.end());
    if (!multi && ctx.attrs.get_bool("preserve_shape")) row_axes.assign(s.begin(), s.end() - 1);
    const int64_t rows = num_elements(row_axes);
    const int64_t labels = num_elements(label.shape);
    if (multi ? labels != rows : labels < rows)
      fail("the label {} has {} elements but the output {} has {} softmax rows", shape_str(label.shape), labels,
           shape_str(s), rows);
    ctx.outputs[0] = out;
  };
  return d;
}

// Inputs dy, x, gamma; outputs dx, dgamma, dbeta, typed like x, gamma and gamma (the rule
// casts dbeta to beta's dtype). The statistics are recomputed from x, as MXNet's backward
// does. `scales` gives gamma's extent for data of a shape (and checks the shape): LayerNorm
// groups along `axis`, gamma per position on it; InstanceNorm groups (n, c), gamma per
// channel; GroupNorm groups (n, group), gamma per group.
OpDef norm_backward_def(std::string name, std::vector<AttrSpec> attrs,
                        std::function<int64_t(const Attrs&, const Shape&)> scales) {
  OpDef d = backward_op(std::move(name), {{"ograd"}, {"data"}, {"gamma"}}, std::move(attrs));
  d.num_outputs = [](const Attrs&) { return 3; };
  d.infer = [scales](InferContext& ctx) {
    require_same_shape(ctx, 0, 1);
    const TensorType x = ctx.in(1), gamma = ctx.in(2);
    require_float(gamma, "gamma");
    const int64_t want = scales(ctx.attrs, x.shape);
    if (gamma.shape != Shape{want})
      fail("gamma has shape {} but the data {} needs [{}]", shape_str(gamma.shape), shape_str(x.shape), want);
    ctx.outputs[0] = x;
    ctx.outputs[1] = ctx.outputs[2] = gamma;
  };
  return d;
}

int64_t layer_norm_scales(const Attrs& a, const Shape& s) {
  return s.at(static_cast<size_t>(normalize_axis(a.get_int("axis"), s.size())));
}

int64_t instance_norm_scales(const Attrs&, const Shape& s) {
  if (s.size() < 3) fail("the data {} needs rank 3 or more (N, C, spatial...)", shape_str(s));
  return s[1];
}

int64_t group_norm_scales(const Attrs& a, const Shape& s) {
  const int64_t groups = a.get_int("num_groups");
  if (s.size() < 2 || groups < 1 || s[1] % groups != 0)
    fail("num_groups={} does not divide the channels of the data {}", groups, shape_str(s));
  return groups;
}

// dx of L2Normalization, y = x / n with n = sqrt(sum(x^2) + eps) per group:
//   dx = (dy - y * sum(dy * y)) / n. Inputs dy, x.
OpDef backward_l2_normalization_def() {
  OpDef d = backward_op("_backward_L2Normalization", {{"ograd"}, {"data"}},
                        {epsilon(1e-10),
                         one_of("mode", "instance", {"instance", "channel", "spatial"})});
  d.infer = [](InferContext& ctx) {
    require_same_shape(ctx, 0, 1);
    ctx.outputs[0] = ctx.in(1);
  };
  return d;
}

// dx of LRN, y = x * s^-beta with s = knorm + alpha / nsize * (sum of x^2 over the channel
// window), MXNet 1.9.1's LRNBackward (nn/lrn-inl.h): with the window symmetric, channel c's
// window holds i exactly when i's holds c, so
//   dx_i = dy_i * s_i^-beta - 2 beta alpha / nsize * x_i * sum over i's window of
//          dy_c * x_c * s_c^(-beta - 1). Inputs dy, x (N, C, H, W).
OpDef backward_lrn_def() {
  OpDef d = backward_op("_backward_LRN", {{"ograd"}, {"data"}},
                        {required("nsize", AttrKind::Int), optional("alpha", AttrKind::Float, 1e-4),
                         optional("beta", AttrKind::Float, 0.75), optional("knorm", AttrKind::Float, 2.0)});
  d.infer = [](InferContext& ctx) {
    require_same_shape(ctx, 0, 1);
    if (ctx.in(1).shape.size() != 4) fail("the data {} must have rank 4 (N, C, H, W)", shape_str(ctx.in(1).shape));
    if (ctx.attrs.get_int("nsize") < 1) fail("nsize={} must be at least 1", ctx.attrs.get_int("nsize"));
    ctx.outputs[0] = ctx.in(1);
  };
  return d;
}

}  // namespace

InputGrads normalization_gradient(GradContext& c, const std::string& backward_op,
                                  const std::vector<std::string>& copied) {
  InputGrads grads(c.num_inputs());
  for (size_t k = 1; k < c.num_outputs(); ++k)
    if (c.out_grad_opt(k))
      fail("output_mean_var=True: the mean and standard deviation outputs have no gradient here; differentiate "
           "output 0 alone");
  if (!c.out_grad_opt(0)) return grads;
  Attrs a;
  for (const std::string& k : copied) a.set(k, c.attrs().get(k));
  const DType beta_dtype = c.input_type(2).dtype;
  const ValueRef dx = c.emit_typed(backward_op, {*c.out_grad_opt(0), c.input(0), c.input(1)}, std::move(a));
  grads[0] = dx;
  grads[1] = ValueRef{dx.node, 1};
  grads[2] = c.cast(ValueRef{dx.node, 2}, beta_dtype);
  return grads;
}

void register_loss_backward_ops(OpRegistry& r) {
  r.add(backward_softmax_def());
  r.add(backward_softmax_output_def());
  r.add(norm_backward_def("_backward_LayerNorm",
                          {optional("axis", AttrKind::Int, int64_t{-1}), epsilon(1e-5)},
                          layer_norm_scales));
  r.add(norm_backward_def("_backward_InstanceNorm", {epsilon(1e-3)}, instance_norm_scales));
  r.add(norm_backward_def("_backward_GroupNorm",
                          {optional("num_groups", AttrKind::Int, int64_t{1}), epsilon(1e-5)},
                          group_norm_scales));
  r.add(backward_l2_normalization_def());
  r.add(backward_lrn_def());
}

}  // namespace ampfuse::ir::nn
