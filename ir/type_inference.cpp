#include "ir/type_inference.h"

#include "ir/error.h"
#include "ir/op_registry.h"

namespace ampfuse::ir {

namespace {

std::string node_label(const Graph& g, int32_t i) {
  const Node& n = g.nodes[i];
  return fmt::format("node {} '{}' ({})", i, n.name, n.op);
}

std::optional<TensorType> known_type(const Graph& g, ValueRef v) {
  const Node& p = g.nodes[v.node];
  if (static_cast<size_t>(v.index) < p.outputs.size()) return p.outputs[v.index];
  return std::nullopt;
}

// A consumer's inference filled in an unknown input: write it back to the producer.
// Only values nobody determined yet can be set this way (variables without a type, and
// ops whose inference left an output unknown, such as _zeros with a 0 extent).
void refine_producer(Graph& g, ValueRef v, const TensorType& t, int32_t consumer) {
  Node& p = g.nodes[v.node];
  if (static_cast<size_t>(v.index) < p.outputs.size()) {
    if (p.outputs[v.index] != t)
      fail("{} needs input '{}' to be {}, but it is {}", node_label(g, consumer), p.name, type_str(t),
           type_str(p.outputs[v.index]));
    return;
  }
  if (p.outputs.size() != static_cast<size_t>(v.index)) fail("{}: outputs inferred out of order", node_label(g, v.node));
  p.outputs.push_back(t);
}

}  // namespace

void infer_types(Graph& g) {
  const OpRegistry& reg = OpRegistry::global();
  // Ops that left outputs unknown on the first sweep get another once consumers have
  // refined their inputs. Two sweeps settle every case the registry produces; a third
  // catches values that stay unknown.
  for (int sweep = 0; sweep < 3; ++sweep) {
    bool missing = false;
    for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
      Node& n = g.nodes[i];
      if (n.is_var()) {
        if (n.outputs.empty()) missing = true;
        continue;
      }
      // Labels are formatted only for an error: this runs for every node of every graph.
      const auto label = [&] { return node_label(g, i); };
      const OpDef& def = with_lazy_context(label, [&]() -> const OpDef& { return reg.get(n.op); });
      InferContext ctx{n.attrs, {}, {}};
      ctx.inputs.reserve(n.inputs.size());
      for (ValueRef in : n.inputs) {
        if (in.node < 0 || in.node >= i) fail("{}: input refers to node {}, which does not come before it", node_label(g, i), in.node);
        ctx.inputs.push_back(known_type(g, in));
      }
      ctx.outputs.resize(def.output_count(n.attrs));
      if (n.outputs.size() == ctx.outputs.size()) ctx.outputs_from_consumers = n.outputs;
      with_lazy_context(label, [&] { def.infer(ctx); });
      for (size_t k = 0; k < n.inputs.size(); ++k)
        if (ctx.inputs[k]) with_lazy_context(label, [&] { refine_producer(g, n.inputs[k], *ctx.inputs[k], i); });
      std::vector<TensorType> outs;
      for (size_t k = 0; k < ctx.outputs.size(); ++k) {
        if (!ctx.outputs[k]) {
          missing = true;
          break;
        }
        outs.push_back(*ctx.outputs[k]);
      }
      Node& node = g.nodes[i];  // refine_producer does not reallocate, but keep it obvious
      if (outs.size() == ctx.outputs.size()) {
        if (!node.outputs.empty() && node.outputs != outs)
          fail("{}: inferred {} now but {} before", node_label(g, i), type_str(outs[0]), type_str(node.outputs[0]));
        node.outputs = std::move(outs);
      }
    }
    if (!missing) break;
  }
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const Node& n = g.nodes[i];
    // A tensor holds at most 2^63 - 1 elements (sizes are int64 everywhere): a graph with a
    // larger value is refused here, by info as by run, not later by whatever allocates it.
    for (const TensorType& t : n.outputs) with_lazy_context([&] { return node_label(g, i); }, [&] { num_elements(t.shape); });
    if (n.outputs.empty()) {
      if (n.is_var())
        fail("{}: the shape of variable '{}' is unknown: give it (--shape {}=...) or use it where it can be inferred",
             node_label(g, i), n.name, n.name);
      fail("{}: output types could not be inferred", node_label(g, i));
    }
  }
}

}  // namespace ampfuse::ir
