// _fused_conv and _fused_fc: a Convolution or FullyConnected with its epilogue, what
// engine/passes/epilogue_fusion.h makes of `act(op(x, w, b) + residual)` so that oneDNN applies
// the add and the activation as post-ops while the result is still in registers, instead of
// a fused kernel reading the op's output back from memory. Semantics (the reference
// kernels'): the product and bias in f32 (the compute type), plus the residual widened to
// f32, then the activation (act_type "leaky": LeakyReLU's, x > 0 ? x : slope * x; "relu":
// relu's, which keeps NaN, while oneDNN's relu post-op turns NaN into 0, so that the pass
// makes it only when asked: ExecutorOptions::relu_post_ops), rounded once to the output
// dtype. Against the graph it replaces, which rounds the op's output before the add, that
// differs by rounding only in bf16/f16 and not at all in f32. Inputs: data, weight, bias (unless no_bias), residual
// (with with_residual: the output's type exactly). Inference only: no gradient.
#include "ir/ops/nn_ops.h"

#include <algorithm>

namespace ampfuse::ir::nn {

OpDef with_epilogue(OpDef base, std::string name) {
  OpDef d = std::move(base);
  d.name = std::move(name);
  d.aliases.clear();
  d.inputs = {{"data"}, {"weight", SlotRole::param}, {"bias", SlotRole::param, true}, {"residual", SlotRole::data, true}};
  d.alt_inputs = {{"data"}, {"weight", SlotRole::param}, {"residual", SlotRole::data, true}};
  d.alt_inputs_apply = [](const Attrs& a) { return a.get_bool("no_bias"); };
  d.num_inputs = [](const Attrs& a) { return (a.get_bool("no_bias") ? 2 : 3) + (a.get_bool("with_residual") ? 1 : 0); };
  d.attrs.push_back(optional("with_residual", AttrKind::Bool, false));
  d.attrs.push_back(one_of("act_type", "none", {"none", "relu", "leaky"}));
  d.attrs.push_back(optional("slope", AttrKind::Float, 0.25));
  d.ignored_attrs.clear();
  d.infer = [op_infer = d.infer](InferContext& ctx) {
    if (!ctx.attrs.get_bool("with_residual")) return op_infer(ctx);
    // The op's own rule over its own inputs (the residual would pass for a bias).
    InferContext op{ctx.attrs, {ctx.inputs.begin(), ctx.inputs.end() - 1}, ctx.outputs, ctx.outputs_from_consumers};
    op_infer(op);
    std::copy(op.inputs.begin(), op.inputs.end(), ctx.inputs.begin());
    ctx.outputs = op.outputs;
    if (!ctx.outputs[0]) return;
    std::optional<TensorType>& residual = ctx.inputs.back();
    if (residual && *residual != *ctx.outputs[0])
      fail("the residual {} differs from the output {}", type_str(*residual), type_str(*ctx.outputs[0]));
    residual = ctx.outputs[0];
  };
  d.amp_fp16 = d.amp_bf16 = AmpClass::neutral;
  d.channels_last.reset();
  d.gradient = nullptr;
  return d;
}

}  // namespace ampfuse::ir::nn
