#include "ir/graph.h"

#include "ir/error.h"

#include <algorithm>

namespace ampfuse::ir {

std::string_view var_role_name(VarRole r) {
  switch (r) {
    case VarRole::input: return "input";
    case VarRole::param: return "param";
    case VarRole::aux: return "aux";
  }
  return "?";
}

const TensorType& Graph::type(ValueRef v) const {
  const Node& n = nodes.at(v.node);
  if (v.index < 0 || static_cast<size_t>(v.index) >= n.outputs.size())
    fail("node '{}' ({}): output {} has no type (run type inference first)", n.name, n.op, v.index);
  return n.outputs[v.index];
}

int32_t Graph::add(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<int32_t>(nodes.size() - 1);
}

std::optional<int32_t> Graph::find_var(const std::string& name) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].is_var() && nodes[i].name == name) return static_cast<int32_t>(i);
  return std::nullopt;
}

std::string Graph::output_name(size_t i) const {
  const ValueRef v = outputs.at(i);
  const Node& n = nodes.at(v.node);
  if (n.is_var()) return n.name;
  if (n.outputs.size() > 1) return fmt::format("{}_output{}", n.name, v.index);
  return n.name + "_output";
}

std::map<ValueRef, int> use_counts(const Graph& g) {
  std::map<ValueRef, int> uses;
  for (const Node& n : g.nodes)
    for (ValueRef in : n.inputs) ++uses[in];
  for (ValueRef out : g.outputs) ++uses[out];
  return uses;
}

std::vector<bool> computed_from_params(const Graph& g) {
  std::vector<bool> from_params(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    from_params[i] = n.is_var() ? n.role != VarRole::input
                                : !n.inputs.empty() && std::all_of(n.inputs.begin(), n.inputs.end(),
                                                                   [&](ValueRef v) { return from_params[v.node]; });
  }
  return from_params;
}

}  // namespace ampfuse::ir
