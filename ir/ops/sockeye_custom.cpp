// Sockeye 1.18's custom ops (sockeye/transformer.py, sockeye/encoder.py): schemas and
// type inference. Their values are computed by runtime/reference/sockeye_kernels.cpp.
//
// All three produce float32 whatever their input, as Sockeye's infer_type declares, and
// none has a gradient (constants and a mask of lengths; Sockeye's backward assigns none).
#include "ir/custom_ops.h"
#include "ir/error.h"

namespace ampfuse::ir {

namespace {

int64_t positive(const Attrs& a, const std::string& name) {
  const int64_t v = a.get_int(name);
  if (v < 1) fail("{}={} must be positive", name, v);
  return v;
}

CustomOpDef positional_encodings() {
  CustomOpDef d;
  d.zero_gradient = true;
  d.op_type = "positional_encodings";
  d.attrs = {{"length", AttrKind::Int, std::nullopt, {}}, {"depth", AttrKind::Int, std::nullopt, {}}};
  d.infer = [](const Attrs& a, InferContext& ctx) {
    const int64_t length = positive(a, "length");
    const int64_t depth = positive(a, "depth");
    // The first half of each row holds sines, the second cosines of the same frequencies.
    if (depth % 2 != 0) fail("positional_encodings needs an even depth, not {}", depth);
    ctx.outputs[0] = TensorType{DType::f32, {1, length, depth}};
  };
  return d;
}

CustomOpDef auto_regressive_bias() {
  CustomOpDef d;
  d.zero_gradient = true;
  d.op_type = "auto_regressive_bias";
  d.attrs = {{"length", AttrKind::Int, std::nullopt, {}}};
  d.infer = [](const Attrs& a, InferContext& ctx) {
    const int64_t length = positive(a, "length");
    ctx.outputs[0] = TensorType{DType::f32, {1, length, length}};
  };
  return d;
}

CustomOpDef variable_length_bias() {
  CustomOpDef d;
  d.zero_gradient = true;
  d.op_type = "variable_length_bias";
  d.attrs = {{"max_length", AttrKind::Int, std::nullopt, {}}};
  d.inputs = {"data"};
  d.infer = [](const Attrs& a, InferContext& ctx) {
    const int64_t max_length = positive(a, "max_length");
    if (!ctx.inputs[0]) return;
    const TensorType& lengths = *ctx.inputs[0];
    if (lengths.shape.size() != 1)
      fail("variable_length_bias takes sequence lengths of shape (batch,), not {}", shape_str(lengths.shape));
    if (lengths.dtype == DType::boolean) fail("variable_length_bias needs numeric lengths, not bool");
    ctx.outputs[0] = TensorType{DType::f32, {lengths.shape[0], max_length}};
  };
  return d;
}

}  // namespace

void register_sockeye_custom_ops(CustomOpRegistry& r) {
  r.add(positional_encodings());
  r.add(auto_regressive_bias());
  r.add(variable_length_bias());
}

}  // namespace ampfuse::ir
