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

// Puts the step variable first (so every reader comes after it, as a graph's order
// demands) and makes the rewritten Dropouts read it.
void add_step_input(ir::Graph& g, const std::string& name, const std::vector<int32_t>& dropouts) {
  ir::Node var;
  var.op = ir::kVarOp;
  var.name = name;
  var.role = ir::VarRole::input;
  var.outputs = {ir::TensorType{ir::DType::f32, {}}};
  g.nodes.insert(g.nodes.begin(), std::move(var));
  for (ir::Node& n : g.nodes)
    for (ir::ValueRef& in : n.inputs) ++in.node;
  for (ir::ValueRef& out : g.outputs) ++out.node;
  for (int32_t d : dropouts) g.nodes[d + 1].inputs.push_back({0, 0});
}

bool has_input_types(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes)
    if (n.is_var() && n.role == ir::VarRole::input && n.outputs.empty()) return false;
  return true;
}

}  // namespace

int to_training_mode(ir::Graph& g, const TrainingOptions& options) {
  const ir::OpRegistry& reg = ir::OpRegistry::global();
  // Checked before anything changes, so a refused graph is left as it was.
  if (!options.step_input.empty() && g.find_var(options.step_input))
    fail("cannot add the dropout step input '{}': a variable of that name exists", options.step_input);
  std::vector<ir::ValueRef> moving_outputs;
  int rewritten = 0;
  uint64_t dropouts = 0;
  std::vector<int32_t> dropout_nodes;
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
      dropout_nodes.push_back(i);
      ++rewritten;
    }
  }
  g.outputs.insert(g.outputs.end(), moving_outputs.begin(), moving_outputs.end());
  if (!options.step_input.empty() && !dropout_nodes.empty()) {
    for (int32_t d : dropout_nodes) g.nodes[d].attrs.set("step_stride", static_cast<int64_t>(dropout_nodes.size()));
    add_step_input(g, options.step_input, dropout_nodes);
  }
  if (rewritten > 0 && has_input_types(g)) ir::infer_types(g);
  return rewritten;
}

}  // namespace ampfuse::engine
