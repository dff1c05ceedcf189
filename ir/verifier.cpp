#include "ir/verifier.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

#include <map>

namespace ampfuse::ir {

namespace {

std::string node_label(const Graph& g, size_t i) {
  const Node& n = g.nodes[i];
  return fmt::format("node {} '{}' ({})", i, n.name, n.op);
}

std::string plural(size_t n, std::string_view word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

// How many outputs node i has: 1 for a variable, else what its op says for its attributes.
// Valid only for nodes check_node() has accepted.
int output_count(const Graph& g, size_t i) {
  const Node& n = g.nodes[i];
  return n.is_var() ? 1 : OpRegistry::global().get(n.op).output_count(n.attrs);
}

// `what` refers to output v.index of node v.node; `limit` is the first node it may not
// refer to (the referring node itself, or all nodes for a graph output).
void check_ref(const Graph& g, ValueRef v, size_t limit, const std::string& what) {
  if (v.node < 0 || static_cast<size_t>(v.node) >= limit) {
    if (v.node >= 0 && static_cast<size_t>(v.node) < g.nodes.size())
      fail("{} refers to {}, which does not come before it (a cycle or a misordered graph)", what,
           node_label(g, v.node));
    fail("{} refers to node {}, which does not exist (the graph has {})", what, v.node, plural(g.nodes.size(), "node"));
  }
  const int outs = output_count(g, v.node);
  if (v.index < 0 || v.index >= outs)
    fail("{} refers to output {} of {}, which has {}", what, v.index, node_label(g, v.node), plural(outs, "output"));
}

// The attributes must already be complete and of the declared kinds: what complete_attrs
// would add or widen is missing here, and code reading the node would see it missing.
void check_attrs(const OpDef& def, const Attrs& attrs) {
  const Attrs completed = complete_attrs(def, attrs);
  for (const auto& [name, value] : completed.values()) {
    if (!attrs.has(name)) fail("attribute '{}' is missing (its default is {})", name, format_ir_attr(value));
    if (attrs.get(name).index() != value.index())
      fail("attribute '{}' holds {} where {} declares a {}", name, format_ir_attr(attrs.get(name)), def.name,
           attr_kind_name(def.find_attr(name)->kind));
  }
}

void check_var(const Graph& g, size_t i, std::map<std::string, size_t>& var_names) {
  const Node& n = g.nodes[i];
  if (!n.inputs.empty()) fail("variable has {}", plural(n.inputs.size(), "input"));
  if (!n.attrs.values().empty())
    fail("variable has attributes ({} ...); variables keep extra strings as hints", n.attrs.values().begin()->first);
  if (n.outputs.size() > 1) fail("variable has {}", plural(n.outputs.size(), "type"));
  auto [it, inserted] = var_names.emplace(n.name, i);
  if (!inserted) fail("variable name '{}' is used by {} too", n.name, node_label(g, it->second));
}

void check_op(const Graph& g, size_t i) {
  const Node& n = g.nodes[i];
  const OpDef& def = OpRegistry::global().get(n.op);
  check_attrs(def, n.attrs);
  const int ins = def.input_count(n.attrs);
  if (static_cast<int>(n.inputs.size()) != ins)
    fail("has {}, {} expects {}", plural(n.inputs.size(), "input"), n.op, ins);
  for (size_t k = 0; k < n.inputs.size(); ++k) check_ref(g, n.inputs[k], i, fmt::format("input {}", k));
  const int outs = def.output_count(n.attrs);
  if (!n.outputs.empty() && static_cast<int>(n.outputs.size()) != outs)
    fail("has {} but {} produces {}", plural(n.outputs.size(), "output type"), n.op, plural(outs, "output"));
}

// Types are all or nothing: a graph before inference has none on its ops, one after has
// them everywhere, and then they must be what inference gives from the variables' types.
void check_types(const Graph& g) {
  bool typed = false;
  for (const Node& n : g.nodes) typed = typed || (!n.is_var() && !n.outputs.empty());
  if (!typed) return;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].outputs.empty())
      fail("{}: has no type, but other nodes have (types come from infer_types, for all nodes at once)",
           node_label(g, i));
  Graph fresh = g;
  for (Node& n : fresh.nodes)
    if (!n.is_var()) n.outputs.clear();
  with_context("type inference from the variables' types", [&] { infer_types(fresh); });
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const auto& have = g.nodes[i].outputs;
    const auto& want = fresh.nodes[i].outputs;
    for (size_t k = 0; k < have.size(); ++k)
      if (have[k] != want[k])
        fail("{}: output {} is {}, but inference gives {}", node_label(g, i), k, type_str(have[k]), type_str(want[k]));
  }
}

}  // namespace

void verify(const Graph& g) {
  std::map<std::string, size_t> var_names;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    with_context(node_label(g, i), [&] {
      if (g.nodes[i].is_var()) check_var(g, i, var_names);
      else check_op(g, i);
    });
  }
  for (size_t k = 0; k < g.outputs.size(); ++k)
    check_ref(g, g.outputs[k], g.nodes.size(), fmt::format("graph output {}", k));
  check_types(g);
}

}  // namespace ampfuse::ir
