#include "engine/passes/autodiff.h"

#include "engine/passes/dce.h"
#include "engine/passes/typed_graph.h"
#include "ir/error.h"
#include "ir/gradient.h"
#include "ir/op_registry.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace ampfuse::engine {

namespace {

using ir::ValueRef;

std::string node_label(const ir::Graph& g, int32_t i) {
  return fmt::format("node {} '{}' ({})", i, g.nodes[i].name, g.nodes[i].op);
}

// The variables to differentiate, in graph order (or in the order opts.wrt names them).
std::vector<int32_t> differentiated_vars(const ir::Graph& g, const BackwardOptions& opts) {
  std::vector<int32_t> vars;
  if (opts.wrt.empty()) {
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
      const ir::Node& n = g.nodes[i];
      if (!n.is_var() || !ir::is_float(n.outputs.at(0).dtype)) continue;
      if (n.role == ir::VarRole::param || (opts.with_inputs && n.role == ir::VarRole::input)) vars.push_back(i);
    }
    if (vars.empty()) fail("the graph has no float {} to differentiate", opts.with_inputs ? "param or input" : "param");
    return vars;
  }
  for (const std::string& name : opts.wrt) {
    const std::optional<int32_t> v = g.find_var(name);
    if (!v) fail("cannot differentiate with respect to '{}': the graph has no variable of that name", name);
    if (!ir::is_float(g.nodes[*v].outputs.at(0).dtype))
      fail("cannot differentiate with respect to '{}': it holds {}, not floats", name,
           ir::dtype_name(g.nodes[*v].outputs[0].dtype));
    vars.push_back(*v);
  }
  return vars;
}

// The sum of a value's gradient contributions, accumulated in f32 (f64 stays f64) and
// returned in the value's dtype.
ValueRef accumulate(ir::GradContext& c, const std::vector<ValueRef>& parts, const ir::TensorType& t) {
  if (parts.size() == 1) return parts[0];
  const ir::DType acc = t.dtype == ir::DType::f64 ? ir::DType::f64 : ir::DType::f32;
  std::vector<ValueRef> wide;
  for (ValueRef p : parts) wide.push_back(c.cast(p, acc));
  const ValueRef sum = c.emit("add_n", wide, {{"num_args", std::to_string(wide.size())}});
  return c.cast(sum, t.dtype);
}

// `grad` times the loss scale, in f32 for lp16 gradients (a power-of-two scale is exact in
// f32; f16 could not even hold the default 2^16), rounded once to grad's dtype.
ValueRef scaled(ir::GradContext& c, ValueRef grad, ValueRef scale) {
  const ir::DType t = c.type(grad).dtype;
  const ir::DType wide = t == ir::DType::f64 ? ir::DType::f64 : ir::DType::f32;
  return c.cast(c.emit("broadcast_mul", {c.cast(grad, wide), c.cast(scale, wide)}), t);
}

// The loss-scale input variable (BackwardOptions::loss_scale).
ValueRef add_loss_scale(ir::Graph& g, const std::string& name) {
  if (g.find_var(name)) fail("cannot add the loss scale input '{}': a variable of that name exists", name);
  ir::Node var;
  var.op = ir::kVarOp;
  var.name = name;
  var.role = ir::VarRole::input;
  var.outputs = {ir::TensorType{ir::DType::f32, {}}};
  return {g.add(std::move(var)), 0};
}

}  // namespace

BackwardGraph build_backward(ir::Graph forward, const BackwardOptions& opts) {
  infer_if_untyped(forward);
  BackwardGraph out;
  ir::Graph& g = out.graph;
  g = std::move(forward);
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  const int32_t num_forward = static_cast<int32_t>(g.nodes.size());
  const std::vector<int32_t> vars = differentiated_vars(g, opts);

  // Nodes a differentiated variable reaches: only they need gradients.
  std::vector<bool> reached(g.nodes.size(), false);
  for (int32_t v : vars) reached[v] = true;
  for (int32_t i = 0; i < num_forward; ++i)
    for (ValueRef in : g.nodes[i].inputs)
      if (reached[in.node]) reached[i] = true;

  std::map<ValueRef, std::vector<ValueRef>> contributions;
  std::set<int32_t> loss_outputs;
  int counter = 0;
  std::optional<ValueRef> loss_scale;
  if (!opts.loss_scale.empty()) {
    loss_scale = add_loss_scale(g, opts.loss_scale);
  }
  const std::vector<ValueRef> heads(g.outputs.begin(),
                                    g.outputs.begin() + static_cast<std::ptrdiff_t>(std::min(g.outputs.size(), opts.heads.value_or(g.outputs.size()))));
  for (size_t k = 0; k < heads.size(); ++k) {
    const ir::Node& n = g.nodes[heads[k].node];
    if (!reached[heads[k].node]) continue;
    // SoftmaxOutput(out_grad=True) multiplies by the gradient reaching it (MXNet), so it
    // takes a head gradient as any output does.
    const bool takes_head_grad = n.op == "SoftmaxOutput" && n.attrs.get_bool("out_grad");
    if (!n.is_var() && reg.get(n.op).loss_head && !takes_head_grad) {
      loss_outputs.insert(heads[k].node);
      continue;
    }
    ir::Node var;
    var.op = ir::kVarOp;
    var.name = g.output_name(k) + "_head_grad";
    if (g.find_var(var.name)) fail("cannot add head gradient '{}': a variable of that name exists", var.name);
    var.role = ir::VarRole::input;
    var.outputs = {g.type(heads[k])};
    if (!ir::is_float(var.outputs[0].dtype)) continue;
    out.head_grads.push_back(var.name);
    const ValueRef head_grad{g.add(std::move(var)), 0};
    if (loss_scale) {
      ir::GradContext ctx(g, heads[k].node, {}, counter);
      contributions[heads[k]].push_back(scaled(ctx, head_grad, *loss_scale));
    } else {
      contributions[heads[k]].push_back(head_grad);
    }
  }

  for (int32_t i = num_forward - 1; i >= 0; --i) {
    if (!reached[i] || g.nodes[i].is_var()) continue;
    const size_t num_outputs = g.nodes[i].outputs.size();
    const std::string label = node_label(g, i);
    // The gradient of each output: the sum of what its readers gave it.
    std::vector<std::optional<ValueRef>> out_grads(num_outputs);
    bool any = loss_outputs.count(i) != 0;
    {
      ir::GradContext sums(g, i, {}, counter);
      for (size_t k = 0; k < num_outputs; ++k) {
        auto it = contributions.find({i, static_cast<int32_t>(k)});
        if (it == contributions.end()) continue;
        out_grads[k] = accumulate(sums, it->second, g.nodes[i].outputs[k]);
        any = true;
      }
    }
    if (!any) continue;
    const ir::OpDef& def = reg.get(g.nodes[i].op);
    std::vector<bool> wanted;
    for (ValueRef in : g.nodes[i].inputs) wanted.push_back(reached[in.node]);
    ir::GradContext ctx(g, i, out_grads, counter, wanted);
    ir::InputGrads grads;
    if (def.gradient)
      grads = with_context(fmt::format("gradient of {}", label), [&] { return def.gradient(ctx); });
    else if (def.has_recipe(g.nodes[i].attrs))
      grads = with_context(fmt::format("gradient of {}", label), [&] { return ir::elementwise_gradient(ctx); });
    else
      fail("{}: {} has no gradient rule yet, so the graph cannot be differentiated through it", label, def.name);
    const std::vector<ValueRef> inputs = g.nodes[i].inputs;
    if (grads.size() != inputs.size())
      fail("gradient of {}: the rule gave {} gradients for {} inputs", label, grads.size(), inputs.size());
    if (loss_scale && loss_outputs.count(i))
      for (size_t j = 0; j < inputs.size(); ++j)
        if (grads[j] && reached[inputs[j].node]) grads[j] = scaled(ctx, *grads[j], *loss_scale);
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!grads[j] || !reached[inputs[j].node]) continue;
      if (g.type(*grads[j]) != g.type(inputs[j]))
        fail("gradient of {}: input {} is {} but its gradient is {}", label, j, ir::type_str(g.type(inputs[j])),
             ir::type_str(g.type(*grads[j])));
      contributions[inputs[j]].push_back(*grads[j]);
    }
  }

  out.num_forward_outputs = g.outputs.size();
  for (int32_t v : vars) {
    const ir::TensorType t = g.nodes[v].outputs.at(0);
    ir::GradContext ctx(g, v, {}, counter);
    auto it = contributions.find({v, 0});
    g.outputs.push_back(it == contributions.end() ? ctx.zeros_like({v, 0}) : accumulate(ctx, it->second, t));
    out.gradient_of.push_back(g.nodes[v].name);
  }
  dce(g);  // gradients a rule made for inputs nobody differentiates
  return out;
}

}  // namespace ampfuse::engine
