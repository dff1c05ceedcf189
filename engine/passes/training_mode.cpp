#include "engine/passes/training_mode.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/type_inference.h"

namespace ampfuse::engine {

namespace {

ir::Attrs batch_norm_train_attrs(const ir::Attrs& bn) {
  ir::Attrs a;
  for (const char* name : {"eps", "momentum", "fix_gamma", "axis"})
    if (bn.has(name)) a.set(name, bn.get(name));
  return a;
}

// Readers of output `from` of node `n` read output `to` instead.
void redirect(ir::Graph& g, int32_t n, int32_t from, int32_t to) {
  const auto move = [&](ir::ValueRef& v) {
    if (v == ir::ValueRef{n, from}) v.index = to;
  };
  for (ir::Node& node : g.nodes)
    for (ir::ValueRef& in : node.inputs) move(in);
  for (ir::ValueRef& out : g.outputs) move(out);
}

bool has_input_types(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes)
    if (n.is_var() && n.role == ir::VarRole::input && n.outputs.empty()) return false;
  return true;
}

}  // namespace

int to_training_mode(ir::Graph& g, const TrainingOptions& options) {
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  std::vector<ir::ValueRef> moving_outputs;
  int rewritten = 0;
  uint64_t dropouts = 0;
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    ir::Node& n = g.nodes[i];
    if (n.op == "BatchNorm" && !n.attrs.get_bool("use_global_stats")) {
      const bool mean_var_outputs = n.attrs.get_bool("output_mean_var");
      n.op = "_BatchNorm_train";
      n.attrs = ir::complete_attrs(reg.get(n.op), batch_norm_train_attrs(n.attrs));
      n.outputs.clear();
      if (mean_var_outputs) {
        redirect(g, i, 2, 4);  // MXNet's training "var" output is the inverse std
        redirect(g, i, 1, 3);
      }
      moving_outputs.push_back({i, 1});
      moving_outputs.push_back({i, 2});
      ++rewritten;
    } else if (n.op == "Dropout" && n.attrs.get_float("p") > 0) {
      ir::Attrs a;
      a.set("p", n.attrs.get_float("p"));
      a.set("axes", n.attrs.get_ints("axes"));
      a.set("seed", static_cast<int64_t>(options.seed));
      a.set("offset", static_cast<int64_t>(options.offset + dropouts++));
      n.op = "_Dropout_train";
      n.attrs = ir::complete_attrs(reg.get(n.op), std::move(a));
      n.outputs.clear();
      ++rewritten;
    }
  }
  g.outputs.insert(g.outputs.end(), moving_outputs.begin(), moving_outputs.end());
  if (rewritten > 0 && has_input_types(g)) ir::infer_types(g);
  return rewritten;
}

}  // namespace ampfuse::engine
