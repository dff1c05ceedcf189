// softmax, log_softmax, softmin, SoftmaxActivation and SoftmaxOutput: schemas, type
// inference and gradient rules.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

// The gradient of a softmax along `axis` (log_softmax with `log`, softmin with `negate`)
// is one `_backward_softmax` of the output and its gradient (ir/ops/nn_loss_backward.cpp
// says why one op rather than sum and broadcast ops): the output is what MXNet's
// backward reads too, so x need not be kept.
InputGrads softmax_gradient(GradContext& c, int64_t axis, double temperature, bool log, bool negate) {
  InputGrads grads(c.num_inputs());
  if (!c.wants(0) || !c.out_grad_opt(0)) return grads;
  Attrs a;
  a.set("axis", axis);
  a.set("temperature", temperature);
  a.set("log", log);
  a.set("negate", negate);
  a.set("dtype", c.input_type(0).dtype);
  grads[0] = c.emit_typed("_backward_softmax", {*c.out_grad_opt(0), c.output(0)}, std::move(a));
  return grads;
}

// softmin is softmax of the negated data (MXNet's softmax with negate=true), with
// softmax's attributes.
OpDef softmax_def(const char* name) {
  OpDef d;
  d.name = name;
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {"length"}};
  d.num_inputs = [](const Attrs& a) { return a.get_bool("use_length") ? 2 : 1; };
  d.attrs = {optional("axis", AttrKind::Int, int64_t{-1}), none_by_default("temperature", AttrKind::Float),
             none_by_default("dtype", AttrKind::DType), optional("use_length", AttrKind::Bool, false)};
  d.infer = [](InferContext& ctx) {
    if (ctx.attrs.get_bool("use_length")) fail("use_length=True is not supported");
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    normalize_axis(ctx.attrs.get_int("axis"), data->shape.size());
    if (!ctx.attrs.is_none("temperature") && ctx.attrs.get_float("temperature") == 0)
      fail("temperature=0 divides by zero");
    const DType out = ctx.attrs.get_opt_dtype("dtype").value_or(data->dtype);
    if (!is_float(out)) fail("dtype={} must be a float type", dtype_name(out));
    ctx.outputs[0] = TensorType{out, data->shape};
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  const bool log = std::string_view(name) == "log_softmax", negate = std::string_view(name) == "softmin";
  d.gradient = [log, negate](GradContext& c) {
    const Attrs& a = c.attrs();
    return softmax_gradient(c, a.get_int("axis"), a.is_none("temperature") ? 1.0 : a.get_float("temperature"), log,
                            negate);
  };
  return d;
}

// The legacy SoftmaxActivation: softmax over the last axis (mode=instance: MXNet reads the
// data as rows of its last axis, whatever the rank) or over axis 1 (mode=channel, data
// (N, C, ...) of rank 3 or more, as MXNet requires).
OpDef softmax_activation_def() {
  OpDef d;
  d.name = "SoftmaxActivation";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}};
  d.attrs = {one_of("mode", "instance", {"instance", "channel"})};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    if (ctx.attrs.get_string("mode") == "channel" && data->shape.size() < 3)
      fail("mode=channel needs data of rank 3 or more (N, C, ...), not {}", shape_str(data->shape));
    ctx.outputs[0] = *data;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.gradient = [](GradContext& c) {
    return softmax_gradient(c, c.attrs().get_string("mode") == "channel" ? 1 : -1, 1.0, false, false);
  };
  return d;
}

// SoftmaxOutput is a loss head: its gradient is MXNet 1.9.1's implicit one (softmax_output-
// inl.h), (softmax - one_hot(label)) * grad_scale normalized, whatever gradient reaches its
// output; the label gets none. A label of the data's shape holds probabilities:
// (out - label) * grad_scale, unnormalized, as MXNet. The class-label form is one
// `_backward_SoftmaxOutput` (ir/ops/nn_loss_backward.cpp), whose kernel says how each
// attribute counts. out_grad=True multiplies that, normalized, elementwise by the gradient
// arriving at the output, as MXNet does in every form; MXNet then requires one, so such an
// output is no loss head: as a graph output it gets a head gradient like any other
// (engine/passes/autodiff.cpp).
InputGrads softmax_output_gradient(GradContext& c) {
  InputGrads grads(c.num_inputs());
  if (!c.wants(0)) return grads;
  const Attrs a = c.attrs();
  const std::optional<ValueRef> head = a.get_bool("out_grad") ? c.out_grad_opt(0) : std::nullopt;
  if (a.get_bool("out_grad") && !head)
    fail("out_grad=True multiplies by the gradient arriving at the output, and none arrives");
  const auto times_head = [&](ValueRef grad) { return head ? c.emit("elemwise_mul", {grad, *head}) : grad; };
  const TensorType out = c.type(c.output(0));
  if (c.input_type(1).shape == out.shape) {
    const ValueRef diff = c.emit("elemwise_sub", {c.output(0), c.cast(c.input(1), out.dtype)});
    Attrs scale;
    scale.set("scalar", static_cast<double>(static_cast<float>(a.get_float("grad_scale"))));
    grads[0] = times_head(c.emit_typed("_mul_scalar", {diff}, std::move(scale)));
    return grads;
  }
  Attrs b;
  for (const char* k : {"grad_scale", "ignore_label", "use_ignore", "multi_output", "preserve_shape", "normalization",
                        "smooth_alpha"})
    b.set(k, a.get(k));
  grads[0] = times_head(c.emit_typed("_backward_SoftmaxOutput", {c.output(0), c.input(1)}, std::move(b)));
  return grads;
}

// The label only matters to the gradient: inference accepts any label and, when the
// label variable has no type yet, gives it MXNet's default shape so the graph completes.
OpDef softmax_output_def() {
  OpDef d;
  d.name = "SoftmaxOutput";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {.name = "label", .index = true}};
  d.attrs = {optional("multi_output", AttrKind::Bool, false), optional("preserve_shape", AttrKind::Bool, false),
             optional("grad_scale", AttrKind::Float, 1.0), optional("ignore_label", AttrKind::Float, -1.0),
             optional("use_ignore", AttrKind::Bool, false), one_of("normalization", "null", {"null", "batch", "valid"}),
             optional("out_grad", AttrKind::Bool, false), optional("smooth_alpha", AttrKind::Float, 0.0)};
  d.infer = [](InferContext& ctx) {
    const TensorType* data = known_input(ctx, 0);
    if (!data) return;
    require_float(*data, "the data");
    const TensorType in = *data;
    const bool multi = ctx.attrs.get_bool("multi_output");
    if (in.shape.size() < (multi ? 3u : 1u))
      fail("the data {} has too few axes{}", shape_str(in.shape), multi ? " for multi_output (N, C, ...)" : "");
    if (!ctx.inputs[1]) {
      Shape label(in.shape.begin(), in.shape.end() - 1);  // one class index per softmax row
      if (multi) label = {in.shape[0], num_elements(Shape(in.shape.begin() + 2, in.shape.end()))};
      ctx.inputs[1] = TensorType{in.dtype, label};
    }
    ctx.outputs[0] = in;
  };
  d.amp_bf16 = d.amp_fp16 = AmpClass::fp32;
  d.loss_head = true;
  d.gradient = softmax_output_gradient;
  return d;
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  r.add(softmax_def("softmax"));
  r.add(softmax_def("log_softmax"));
  r.add(softmax_def("softmin"));
  r.add(softmax_activation_def());
  r.add(softmax_output_def());
}

}  // namespace ampfuse::ir::nn
