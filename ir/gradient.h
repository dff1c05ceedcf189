// Gradient rules: how an op declares its gradient, once, in the registry (OpDef::gradient).
//
// A rule is a vector-Jacobian product written as graph nodes: given the forward node, its
// inputs and outputs as values of the graph being built, and the gradient arriving at each
// output, it appends nodes and returns the gradient of each input (nullopt where an input
// has none: integer indices, labels, shapes, or an input the output does not depend on).
// Because the rule emits ordinary ops, backward graphs go through the same passes, fusion
// planner and kernels as forward ones.
//
// Ops with a scalar recipe and no rule of their own get one derived from the recipe
// (elementwise_gradient below). The pass that walks a graph backwards and calls the rules
// is engine/passes/autodiff.h.
#pragma once

#include "ir/graph.h"

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampfuse::ir {

struct OpDef;

class GradContext {
 public:
  // `g` is the graph being built: it already holds the forward node (index `node`, types
  // inferred); appended nodes get their types at once. `counter` numbers appended nodes
  // across every context of one backward graph, so their names are unique.
  GradContext(Graph& g, int32_t node, std::vector<std::optional<ValueRef>> out_grads, int& counter,
              std::vector<bool> wanted = {});

  // The forward node. emit() appends to the graph and may move its nodes: copy what a
  // rule keeps across an emit instead of holding this reference.
  const Node& node() const { return g_.nodes[node_]; }
  const Attrs& attrs() const { return node().attrs; }
  ValueRef input(size_t i) const { return node().inputs.at(i); }
  ValueRef output(size_t k) const { return {node_, static_cast<int32_t>(k)}; }
  size_t num_inputs() const { return node().inputs.size(); }
  size_t num_outputs() const { return node().outputs.size(); }
  // Copies, not references into the graph (see node()).
  TensorType type(ValueRef v) const { return g_.type(v); }
  TensorType input_type(size_t i) const { return type(input(i)); }

  // Whether anyone needs input i's gradient (a rule may skip the others; they are dropped
  // as dead code anyway).
  bool wants(size_t i) const { return wanted_.empty() || wanted_.at(i); }

  // The gradient arriving at output k, or nullopt when nothing downstream needs it.
  const std::optional<ValueRef>& out_grad_opt(size_t k) const { return out_grads_.at(k); }
  // The gradient at output k, zeros of its type when none arrives.
  ValueRef out_grad(size_t k);

  // Appends op `op` (canonical name or alias) reading `inputs`, attributes in MXNet's
  // string spelling, and returns its outputs (types inferred). Nodes are named
  // "<forward node>_backward<n>", n counting every node the backward graph appended.
  std::vector<ValueRef> emit_multi(const std::string& op, std::vector<ValueRef> inputs,
                                   const std::map<std::string, std::string>& attrs = {});
  ValueRef emit(const std::string& op, std::vector<ValueRef> inputs, const std::map<std::string, std::string>& attrs = {}) {
    return emit_multi(op, std::move(inputs), attrs).at(0);
  }
  // As emit, with typed attributes (defaults filled in).
  ValueRef emit_typed(const std::string& op, std::vector<ValueRef> inputs, Attrs attrs);

  // Helpers rules share.
  ValueRef cast(ValueRef v, DType t);               // v itself when already of dtype t (a Cast:
                                                    // amp_cast leaves f64 as it is)
  ValueRef sum_to_shape(ValueRef v, const Shape& s);  // sums the axes v was broadcast along
  ValueRef reshape(ValueRef v, const Shape& s);      // v itself when already of shape s
  ValueRef zeros_like(ValueRef v);  // zeros of v's type (_zeros cannot say a 0 extent)

 private:
  Graph& g_;
  int32_t node_;
  std::vector<std::optional<ValueRef>> out_grads_;
  int& counter_;
  std::vector<bool> wanted_;
};

// Input gradients, one per input of the node.
using InputGrads = std::vector<std::optional<ValueRef>>;
using GradFn = std::function<InputGrads(GradContext&)>;

// The rule every op with a scalar recipe and no rule of its own gets: input i's gradient
// is `_backward_elementwise(inputs..., grad, fwd_op, wrt=i)`, whose recipe is the forward
// recipe's derivative (ir/scalar_derivative.h) times the gradient, summed back to input i's
// shape where the op broadcast it. Integer and bool inputs get none, nor do inputs the
// recipe's derivative is zero for (floor, compares). Single-output recipes only.
InputGrads elementwise_gradient(GradContext& c);

// The forward op and attributes a `_backward_elementwise` node differentiates.
const OpDef& backward_elementwise_forward(const Attrs& a, Attrs* forward_attrs);

}  // namespace ampfuse::ir
