// softmax, log_softmax, softmin, SoftmaxActivation and SoftmaxOutput: schemas and type
// inference.
#include "ir/error.h"
#include "ir/ops/nn_ops.h"
#include "ir/ops/nn_params.h"

namespace ampfuse::ir::nn {

namespace {

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
  return d;
}

// The label only matters to the gradient: inference accepts any label and, when the
// label variable has no type yet, gives it MXNet's default shape so the graph completes.
OpDef softmax_output_def() {
  OpDef d;
  d.name = "SoftmaxOutput";
  d.kind = OpKind::compute;
  d.inputs = {{"data"}, {.name = "label", .index = true}};
  d.attrs = {optional("multi_output", AttrKind::Bool, false), optional("preserve_shape", AttrKind::Bool, false)};
  d.ignored_attrs = {"grad_scale", "ignore_label", "use_ignore", "normalization", "out_grad", "smooth_alpha"};
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
