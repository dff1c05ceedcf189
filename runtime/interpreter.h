// The reference interpreter: runs any graph op by op and defines what graphs mean.
//
// Elementwise ops evaluate their registry recipe (ir/scalar_program.h) in the compute
// type (f32, f64 for f64 and integer data) and round once when storing each output to
// its dtype. Other ops run the plain-loop kernels in runtime/reference/ (f32 accumulation
// for low-precision inputs). Slow is fine, wrong is not.
#pragma once

#include "ir/graph.h"
#include "ir/scalar_program.h"
#include "runtime/tensor.h"

#include <map>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime {

// Values for the graph's variables, by variable name.
using Bindings = std::map<std::string, Tensor>;

// Runs `g` (types inferred) and returns its outputs in order. Every variable must be
// bound with a tensor of exactly its type; throws ampfuse::Error naming the variable or the
// node that failed.
std::vector<Tensor> interpret(const ir::Graph& g, const Bindings& vars);

// The tensor bound to variable node `n` (types inferred); throws ampfuse::Error naming the
// variable when it is unbound, has no storage, has another type or is not contiguous.
// Every executor's check.
const Tensor& bound_variable(const ir::Node& n, const Bindings& vars);

// Runs one op node (types inferred) on its input tensors: the recipe for elementwise ops,
// the reference kernel otherwise. What interpret() does per node; the executor's fallback
// for external ops. A result may share its buffer with an input (a view).
std::vector<Tensor> run_node(const ir::Node& n, const std::vector<Tensor>& inputs);

// run_node writing into `outputs`, allocated with the node's types (what executors give
// an op they run on the interpreter: the buffers they planned for its outputs).
void run_node_into(const ir::Node& n, std::span<const Tensor> inputs, std::span<Tensor> outputs);

// Evaluates op node n's scalar recipe (OpDef::recipe) on `inputs`, each viewed as the op's
// OpDef::broadcast_view says, into new tensors of `out_types` (one per recipe result). What
// run_node does for ops whose recipe applies; a reference kernel that computes part of its
// op with the recipe (BatchNorm's output_mean_var) calls it too.
std::vector<Tensor> eval_recipe(const ir::Node& n, std::span<const Tensor> inputs,
                                std::span<const TensorType> out_types);

// Evaluates a scalar program elementwise. `inputs[i]` has `out_shape` or broadcasts to it
// (numpy rules, right-aligned; size-1 extents broadcast). Outputs are allocated with
// `out_types` (same shape). The reference path for every elementwise op.
std::vector<Tensor> eval_scalar_program(const ir::ScalarProgram& p,
                                        const std::vector<const Tensor*>& inputs,
                                        const std::vector<TensorType>& out_types);

// Seeded random values for every variable of `g` not in `given`: floats uniform in
// [-1, 1) scaled by 1/sqrt(fan-in) for params, [0.5, 1.5) for BatchNorm variances,
// integers (token ids) in [0, the consuming op's limit). Deterministic for a seed.
// The result holds `given` too, ready for interpret(). Generator and rules: random_bindings.cpp.
Bindings random_bindings(const ir::Graph& g, uint64_t seed, const Bindings& given = {});

}  // namespace ampfuse::runtime
