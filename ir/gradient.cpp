#include "ir/gradient.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/op_helpers.h"
#include "ir/scalar_derivative.h"

#include <fmt/format.h>

namespace ampfuse::ir {

namespace {

// Types one appended node from its (typed) inputs.
void infer_appended(Graph& g, int32_t id) {
  Node& n = g.nodes[id];
  const OpDef& def = OpRegistry::global().get(n.op);
  InferContext ctx{n.attrs, {}, {}};
  for (ValueRef in : n.inputs) ctx.inputs.push_back(g.type(in));
  ctx.outputs.resize(def.output_count(n.attrs));
  with_context(fmt::format("gradient node '{}' ({})", n.name, n.op), [&] { def.infer(ctx); });
  n.outputs.clear();
  for (auto& t : ctx.outputs) {
    if (!t) fail("gradient node '{}' ({}): output type could not be inferred", n.name, n.op);
    n.outputs.push_back(*t);
  }
}

constexpr const char* kBackwardElementwise = "_backward_elementwise";

}  // namespace

GradContext::GradContext(Graph& g, int32_t node, std::vector<std::optional<ValueRef>> out_grads, int& counter,
                         std::vector<bool> wanted)
    : g_(g), node_(node), out_grads_(std::move(out_grads)), counter_(counter), wanted_(std::move(wanted)) {}

ValueRef GradContext::out_grad(size_t k) {
  if (out_grads_.at(k)) return *out_grads_[k];
  return zeros_like(output(k));
}

ValueRef GradContext::emit_typed(const std::string& op, std::vector<ValueRef> inputs, Attrs attrs) {
  const OpDef& def = OpRegistry::global().resolve(op);
  Node n;
  n.op = def.name;
  n.name = fmt::format("{}_backward{}", node().name, counter_++);
  n.attrs = with_context(fmt::format("gradient of node '{}'", node().name), [&] { return complete_attrs(def, std::move(attrs)); });
  n.inputs = std::move(inputs);
  if (static_cast<int>(n.inputs.size()) != def.input_count(n.attrs))
    fail("gradient of node '{}': {} takes {} inputs, {} given", node().name, def.name, def.input_count(n.attrs), n.inputs.size());
  const int32_t id = g_.add(std::move(n));
  infer_appended(g_, id);
  return {id, 0};
}

std::vector<ValueRef> GradContext::emit_multi(const std::string& op, std::vector<ValueRef> inputs,
                                              const std::map<std::string, std::string>& attrs) {
  const OpDef& def = OpRegistry::global().resolve(op);
  Attrs typed = with_context(fmt::format("gradient of node '{}' ({})", node().name, op), [&] { return parse_attrs(def, attrs); });
  const ValueRef first = emit_typed(def.name, std::move(inputs), std::move(typed));
  std::vector<ValueRef> outs;
  for (size_t k = 0; k < g_.nodes[first.node].outputs.size(); ++k) outs.push_back({first.node, static_cast<int32_t>(k)});
  return outs;
}

ValueRef GradContext::cast(ValueRef v, DType t) {
  if (type(v).dtype == t) return v;
  Attrs a;
  a.set("dtype", t);
  return emit_typed("Cast", {v}, std::move(a));
}

ValueRef GradContext::reshape(ValueRef v, const Shape& s) {
  if (type(v).shape == s) return v;
  Attrs a;
  a.set("shape", std::vector<int64_t>(s.begin(), s.end()));
  return emit_typed("Reshape", {v}, std::move(a));
}

ValueRef GradContext::sum_to_shape(ValueRef v, const Shape& s) {
  const Shape from = type(v).shape;
  if (from == s) return v;
  if (!broadcasts_to(s, from))
    fail("gradient of node '{}': shape {} does not broadcast to {}", node().name, shape_str(s), shape_str(from));
  const size_t lead = from.size() - s.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < from.size(); ++i)
    if (i < lead || (s[i - lead] == 1 && from[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  ValueRef summed = v;
  if (!axes.empty()) {
    Attrs a;
    a.set("axis", axes);
    a.set("keepdims", true);
    summed = emit_typed("sum", {v}, std::move(a));
  }
  return reshape(summed, s);
}

ValueRef GradContext::zeros_like(ValueRef v) { return emit_typed("zeros_like", {v}, Attrs{}); }

const OpDef& backward_elementwise_forward(const Attrs& a, Attrs* forward_attrs) {
  const OpDef& fwd = OpRegistry::global().get(a.get_string("fwd_op"));
  if (forward_attrs) {
    std::map<std::string, std::string> raw;
    for (const auto& [k, v] : a.values())
      if (k != "fwd_op" && k != "wrt") raw[k] = std::get<std::string>(v);
    *forward_attrs = parse_attrs(fwd, raw);
  }
  return fwd;
}

InputGrads elementwise_gradient(GradContext& c) {
  const Node n = c.node();  // a copy: emitting nodes may move the graph's nodes
  const OpDef& def = OpRegistry::global().get(n.op);
  if (!def.has_recipe(n.attrs)) fail("{} has no gradient with these attributes", n.op);
  if (c.num_outputs() != 1) fail("{} has {} outputs: a derived gradient needs one", n.op, c.num_outputs());
  InputGrads grads(c.num_inputs());
  if (!c.out_grad_opt(0)) return grads;
  // Which inputs the derivative is not zero for, decided on the recipe itself.
  const int num = static_cast<int>(c.num_inputs());
  std::map<std::string, std::string> attrs;
  for (const auto& [k, v] : n.attrs.values()) attrs[k] = format_mxnet_attr(v);
  attrs["fwd_op"] = n.op;
  for (int i = 0; i < num; ++i) {
    const TensorType in = c.input_type(static_cast<size_t>(i));
    if (!is_float(in.dtype) || !c.wants(static_cast<size_t>(i))) continue;
    ScalarBuilder probe(num);
    const auto results = def.recipe(probe, n.attrs);
    if (!scalar_tangent(probe, 0, results.at(0), i)) continue;
    attrs["wrt"] = std::to_string(i);
    std::vector<ValueRef> ins;
    for (int j = 0; j < num; ++j) ins.push_back(c.input(static_cast<size_t>(j)));
    ins.push_back(*c.out_grad_opt(0));
    const ValueRef d = c.emit(kBackwardElementwise, std::move(ins), attrs);
    // Undo broadcasting: sum over the axes input i was broadcast along, in its view shape.
    const Shape view = broadcast_view_of(def, n.attrs, static_cast<size_t>(i), in.shape, c.type(c.output(0)).shape);
    grads[static_cast<size_t>(i)] = c.reshape(c.sum_to_shape(d, view), in.shape);
  }
  return grads;
}

// `_backward_elementwise`: the derived gradient's op. Inputs: the forward op's inputs, then
// the gradient of its output; attributes: fwd_op, wrt (the input differentiated) and the
// forward op's attributes as strings. Output: that input's dtype, the output's shape.
void register_gradient_ops(OpRegistry& r) {
  OpDef d = elementwise_op(kBackwardElementwise, {{"args"}}, {AmpClass::neutral, AmpClass::neutral});
  d.attrs = {{"fwd_op", AttrKind::String, std::nullopt, {}}, {"wrt", AttrKind::Int, std::nullopt, {}}};
  d.open_attrs = true;
  d.channels_last.reset();
  d.num_inputs = [](const Attrs& a) {
    Attrs fa;
    const OpDef& fwd = backward_elementwise_forward(a, &fa);
    return fwd.input_count(fa) + 1;
  };
  d.infer = [](InferContext& ctx) {
    const int64_t wrt = ctx.attrs.get_int("wrt");
    const size_t n = ctx.inputs.size();
    if (wrt < 0 || static_cast<size_t>(wrt) + 1 >= n) fail("wrt={} is not an input of the forward op", wrt);
    for (size_t i = 0; i < n; ++i) ctx.in(i);
    // The forward inputs broadcast (in the forward op's views) to the output, whose shape
    // the out-gradient has; inference catches a graph where they do not, before a kernel
    // or the interpreter meets it (found by the differential fuzzer, which draws this op).
    Attrs fa;
    const OpDef& fwd = backward_elementwise_forward(ctx.attrs, &fa);
    const Shape& out = ctx.in(n - 1).shape;
    for (size_t i = 0; i + 1 < n; ++i)
      if (!broadcasts_to(broadcast_view_of(fwd, fa, i, ctx.in(i).shape, out), out))
        fail("input {} has shape {}, which does not broadcast to the out-gradient's shape {}", i,
             shape_str(ctx.in(i).shape), shape_str(out));
    ctx.outputs[0] = TensorType{ctx.in(static_cast<size_t>(wrt)).dtype, out};
  };
  d.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<ScalarBuilder::Val> {
    Attrs fa;
    const OpDef& fwd = backward_elementwise_forward(a, &fa);
    const int grad_input = b.num_inputs() - 1;
    const auto results = fwd.recipe(b, fa);
    const auto t = scalar_tangent(b, 0, results.at(0), static_cast<int>(a.get_int("wrt")));
    if (!t) return {b.constant(0)};
    return {b.mul(b.input(grad_input), *t)};
  };
  d.broadcast_view = [](const Attrs& a, size_t i, const Shape& in, const Shape& out) {
    Attrs fa;
    const OpDef& fwd = backward_elementwise_forward(a, &fa);
    if (static_cast<int>(i) >= fwd.input_count(fa)) return in;
    return broadcast_view_of(fwd, fa, i, in, out);
  };
  r.add(std::move(d));
}

}  // namespace ampfuse::ir
