// The reference interpreter's driver: binds variables, dispatches each node to its scalar
// recipe or reference kernel, and drops every intermediate tensor after its last reader so
// that whole models run in the memory of their widest cut, not of all their activations.
#include "runtime/interpreter.h"

#include "ir/error.h"
#include "ir/op_registry.h"
#include "runtime/reference/reference_kernels.h"

#include <fmt/format.h>

#include <cstring>

namespace ampfuse::runtime {

namespace {

std::string node_label(const ir::Graph& g, int32_t i) {
  const ir::Node& n = g.nodes[i];
  return fmt::format("node {} '{}' ({})", i, n.name, n.op);
}

std::vector<Tensor> run_kernel(const ir::Node& n, const std::vector<Tensor>& inputs) {
  const ReferenceKernel* kernel = find_reference_kernel(n.op);
  if (!kernel) fail("op '{}' has no reference kernel", n.op);
  std::vector<Tensor> outputs;
  for (const TensorType& t : n.outputs) outputs.emplace_back(t);
  (*kernel)(n, inputs, outputs);
  // A kernel may hand back a view of an input instead of filling the buffer it was given;
  // either way the result must have the type inference promised to the consumers.
  for (size_t k = 0; k < outputs.size(); ++k)
    if (outputs[k].type() != n.outputs[k])
      fail("the reference kernel produced {} for output {} but {} was inferred", ir::type_str(outputs[k].type()), k,
           ir::type_str(n.outputs[k]));
  return outputs;
}

std::vector<Tensor> run_op(const ir::Node& n, const std::vector<std::vector<Tensor>>& values) {
  std::vector<Tensor> inputs;
  inputs.reserve(n.inputs.size());
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const ir::ValueRef in = n.inputs[k];
    if (in.index < 0 || static_cast<size_t>(in.index) >= values[in.node].size())
      fail("input {} refers to output {} of node {}, which has {}", k, in.index, in.node, values[in.node].size());
    const Tensor& t = values[in.node][in.index];
    // Freed values are only those whose every reader has run, so an empty one here
    // means the use counts and the node order disagree.
    if (t.empty_storage()) fail("input {} (node {}, output {}) is not available", k, in.node, in.index);
    inputs.push_back(t);
  }
  return run_node(n, inputs);
}

}  // namespace

std::vector<Tensor> eval_recipe(const ir::Node& n, std::span<const Tensor> inputs,
                                std::span<const TensorType> out_types) {
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  if (!def.recipe) fail("{} has no scalar recipe", n.op);
  ir::ScalarBuilder b(static_cast<int>(inputs.size()));
  const std::vector<ir::ScalarBuilder::Val> results = def.recipe(b, n.attrs);
  if (results.size() != out_types.size())
    fail("the scalar recipe of {} gives {} results for {} outputs", n.op, results.size(), out_types.size());
  const ir::ScalarProgram program = b.finish(results);
  // Inputs that broadcast other than numpy-style (PReLU's per-channel gamma) are viewed
  // in the op's own alignment first; eval_scalar_program only knows numpy rules.
  std::vector<Tensor> viewed;
  viewed.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Shape view = def.broadcast_view ? def.broadcast_view(n.attrs, i, inputs[i].shape(), out_types[0].shape)
                                          : inputs[i].shape();
    viewed.push_back(view == inputs[i].shape() ? inputs[i] : inputs[i].reshaped(view));
  }
  std::vector<const Tensor*> in;
  for (const Tensor& t : viewed) in.push_back(&t);
  return eval_scalar_program(program, in, std::vector<TensorType>(out_types.begin(), out_types.end()));
}

std::vector<Tensor> run_node(const ir::Node& n, const std::vector<Tensor>& inputs) {
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  if (n.outputs.empty()) fail("output types are not inferred (run type inference first)");
  return def.has_recipe(n.attrs) ? eval_recipe(n, inputs, n.outputs) : run_kernel(n, inputs);
}

void run_node_into(const ir::Node& n, std::span<const Tensor> inputs, std::span<Tensor> outputs) {
  if (outputs.size() != n.outputs.size())
    fail("{} outputs given for {}", outputs.size(), n.outputs.size());
  const ir::OpDef& def = ir::OpRegistry::global().get(n.op);
  std::vector<Tensor> results;
  if (def.has_recipe(n.attrs)) {
    results = eval_recipe(n, inputs, n.outputs);
  } else {
    const ReferenceKernel* kernel = find_reference_kernel(n.op);
    if (!kernel) fail("op '{}' has no reference kernel", n.op);
    results.assign(outputs.begin(), outputs.end());
    (*kernel)(n, inputs, results);
  }
  // Whatever did not land in the given buffers (a recipe's fresh tensors, a kernel's view
  // of an input) is copied there.
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (results[k].type() != n.outputs[k])
      fail("the reference kernel produced {} for output {} but {} was inferred", ir::type_str(results[k].type()), k,
           ir::type_str(n.outputs[k]));
    if (results[k].raw() != outputs[k].raw()) std::memcpy(outputs[k].raw(), results[k].raw(), outputs[k].bytes());
  }
}

const Tensor& bound_variable(const ir::Node& n, const Bindings& vars) {
  auto it = vars.find(n.name);
  if (it == vars.end()) fail("variable '{}' is not bound", n.name);
  if (n.outputs.empty()) fail("variable '{}' has no type (run type inference first)", n.name);
  const Tensor& t = it->second;
  if (t.empty_storage()) fail("variable '{}' is bound to a tensor without storage", n.name);
  if (!t.is_contiguous())
    fail("variable '{}' is bound to a non-contiguous tensor (strides {}); bind its contiguous()", n.name,
         ir::shape_str(t.strides()));
  if (t.type() != n.outputs[0])
    fail("variable '{}' is bound to {} but the graph needs {}", n.name, ir::type_str(t.type()),
         ir::type_str(n.outputs[0]));
  return t;
}

std::vector<Tensor> interpret(const ir::Graph& g, const Bindings& vars) {
  std::map<ir::ValueRef, int> remaining = ir::use_counts(g);
  std::vector<std::vector<Tensor>> values(g.nodes.size());
  for (int32_t i = 0; i < static_cast<int32_t>(g.nodes.size()); ++i) {
    const ir::Node& n = g.nodes[i];
    for (const ir::ValueRef in : n.inputs)
      if (in.node < 0 || in.node >= i) fail("{}: input refers to node {}, which does not come before it", node_label(g, i), in.node);
    if (n.is_var()) {
      values[i] = {bound_variable(n, vars)};
    } else {
      values[i] = with_context(node_label(g, i), [&] { return run_op(n, values); });
    }
    for (size_t k = 0; k < values[i].size(); ++k)
      if (remaining[{i, static_cast<int32_t>(k)}] == 0) values[i][k] = Tensor{};
    for (const ir::ValueRef in : n.inputs)
      if (--remaining[in] == 0) values[in.node][in.index] = Tensor{};
  }
  std::vector<Tensor> outputs;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const ir::ValueRef out = g.outputs[k];
    if (out.node < 0 || static_cast<size_t>(out.node) >= g.nodes.size() ||
        static_cast<size_t>(out.index) >= values[out.node].size())
      fail("graph output {} refers to a value that does not exist", k);
    outputs.push_back(values[out.node][out.index]);
  }
  return outputs;
}

}  // namespace ampfuse::runtime
