#include "ir/builder.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

namespace ampfuse::ir {

ValueRef GraphBuilder::var(const std::string& name, VarRole role, std::optional<TensorType> type) {
  if (!var_names_.insert(name).second) fail("variable '{}' is defined twice", name);
  Node n;
  n.op = kVarOp;
  n.name = name;
  n.role = role;
  if (type) n.outputs.push_back(*type);
  return {g_.add(std::move(n)), 0};
}

ValueRef GraphBuilder::input(const std::string& name, TensorType type) { return var(name, VarRole::input, type); }
ValueRef GraphBuilder::param(const std::string& name, std::optional<TensorType> type) {
  return var(name, VarRole::param, type);
}
ValueRef GraphBuilder::aux(const std::string& name, std::optional<TensorType> type) {
  return var(name, VarRole::aux, type);
}

std::vector<ValueRef> GraphBuilder::op_multi(const std::string& op, std::vector<ValueRef> inputs,
                                             std::map<std::string, std::string> attrs, std::string name) {
  const OpDef& def = OpRegistry::global().resolve(op);
  if (name.empty()) name = fmt::format("{}{}", op, name_counts_[op]++);
  Node n;
  n.op = def.name;  // canonical: an alias (`cast`) ends here
  n.name = name;
  n.inputs = std::move(inputs);
  n.attrs = with_context(fmt::format("node '{}' ({})", name, op), [&] { return parse_attrs(def, attrs); });
  const int expected = def.input_count(n.attrs);
  if (static_cast<int>(n.inputs.size()) != expected)
    fail("node '{}' ({}): {} inputs given, {} expected", name, op, n.inputs.size(), expected);
  const int outs = def.output_count(n.attrs);
  const int32_t id = g_.add(std::move(n));
  std::vector<ValueRef> refs;
  for (int k = 0; k < outs; ++k) refs.push_back({id, k});
  return refs;
}

ValueRef GraphBuilder::op(const std::string& op, std::vector<ValueRef> inputs,
                          std::map<std::string, std::string> attrs, std::string name) {
  return op_multi(op, std::move(inputs), std::move(attrs), std::move(name)).at(0);
}

Graph GraphBuilder::finish(bool infer) {
  Graph g = std::move(g_);
  g_ = Graph{};
  name_counts_.clear();
  var_names_.clear();
  if (infer) infer_types(g);
  return g;
}

}  // namespace ampfuse::ir
