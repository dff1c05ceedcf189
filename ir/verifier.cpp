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

// What the checks learn of each node as they go, for the nodes after it: its op (null for
// a variable) and how many outputs it has. References point backwards only, so a node's
// entry is filled before any reference to it is checked.
struct Seen {
  std::vector<const OpDef*> def;
  std::vector<int> outputs;
};

// `what()` names the reference (formatted only for an error); it refers to output v.index
// of node v.node; `limit` is the first node it may not refer to (the referring node itself,
// or all nodes for a graph output).
template <class What>
void check_ref(const Graph& g, const Seen& seen, ValueRef v, size_t limit, const What& what) {
  if (v.node < 0 || static_cast<size_t>(v.node) >= limit) {
    if (v.node >= 0 && static_cast<size_t>(v.node) < g.nodes.size())
      fail("{} refers to {}, which does not come before it (a cycle or a misordered graph)", what(),
           node_label(g, v.node));
    fail("{} refers to node {}, which does not exist (the graph has {})", what(), v.node, plural(g.nodes.size(), "node"));
  }
  const int outs = seen.outputs[v.node];
  if (v.index < 0 || v.index >= outs)
    fail("{} refers to output {} of {}, which has {}", what(), v.index, node_label(g, v.node), plural(outs, "output"));
}

// The attributes must already be complete and of the declared kinds: what complete_attrs
// would add or widen is missing here, and code reading the node would see it missing.
void check_attrs(const OpDef& def, const Attrs& attrs) {
  if (attrs_complete(def, attrs)) return;  // the usual case, without copying the attributes
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

void check_op(const Graph& g, Seen& seen, size_t i) {
  const Node& n = g.nodes[i];
  const OpDef& def = OpRegistry::global().get(n.op);
  seen.def[i] = &def;
  check_attrs(def, n.attrs);
  const int ins = def.input_count(n.attrs);
  if (static_cast<int>(n.inputs.size()) != ins)
    fail("has {}, {} expects {}", plural(n.inputs.size(), "input"), n.op, ins);
  for (size_t k = 0; k < n.inputs.size(); ++k)
    check_ref(g, seen, n.inputs[k], i, [k] { return fmt::format("input {}", k); });
  const int outs = def.output_count(n.attrs);
  seen.outputs[i] = outs;
  if (!n.outputs.empty() && static_cast<int>(n.outputs.size()) != outs)
    fail("has {} but {} produces {}", plural(n.outputs.size(), "output type"), n.op, plural(outs, "output"));
}

// Whether every op's inference, given the types its inputs have in `g`, leaves those types
// as they are and gives exactly the types its outputs have, each of them a valid size. Then
// inference from the variables' types alone (check_types) gives g's types: node by node in
// order, each op sees the same input types and so infers the same outputs. Nothing is
// formatted or copied but the types, so the verifier can run after every pass.
bool types_match_inference(const Graph& g, const Seen& seen) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.is_var()) continue;
    const OpDef& def = *seen.def[i];  // check_op accepted it
    InferContext c{n.attrs, {}, {}};
    c.inputs.reserve(n.inputs.size());
    for (ValueRef in : n.inputs) c.inputs.emplace_back(g.nodes[in.node].outputs.at(in.index));
    c.outputs.resize(def.output_count(n.attrs));
    if (c.outputs.size() != n.outputs.size()) return false;
    try {
      def.infer(c);
    } catch (const Error&) {
      return false;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (!c.inputs[k] || *c.inputs[k] != g.nodes[n.inputs[k].node].outputs[n.inputs[k].index]) return false;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (!c.outputs[k] || *c.outputs[k] != n.outputs[k]) return false;
      try {
        num_elements(n.outputs[k].shape);
      } catch (const Error&) {
        return false;
      }
    }
  }
  return true;
}

// Types are all or nothing: a graph before inference has none on its ops, one after has
// them everywhere, and then they must be what inference gives from the variables' types.
void check_types(const Graph& g, const Seen& seen) {
  bool typed = false;
  for (const Node& n : g.nodes) typed = typed || (!n.is_var() && !n.outputs.empty());
  if (!typed) return;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].outputs.empty())
      fail("{}: has no type, but other nodes have (types come from infer_types, for all nodes at once)",
           node_label(g, i));
  // The usual case, checked in place. Any disagreement is then told exactly as inference
  // from scratch tells it (a value a consumer refines, an inference that throws).
  if (types_match_inference(g, seen)) return;
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
  Seen seen{std::vector<const OpDef*>(g.nodes.size(), nullptr), std::vector<int>(g.nodes.size(), 1)};
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    with_lazy_context([&] { return node_label(g, i); }, [&] {
      if (g.nodes[i].is_var()) check_var(g, i, var_names);
      else check_op(g, seen, i);
    });
  }
  for (size_t k = 0; k < g.outputs.size(); ++k)
    check_ref(g, seen, g.outputs[k], g.nodes.size(), [k] { return fmt::format("graph output {}", k); });
  check_types(g, seen);
}

}  // namespace ampfuse::ir
