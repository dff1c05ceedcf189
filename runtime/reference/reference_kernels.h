// Plain-loop kernels for every op without a scalar recipe (convolution, matmul, pooling,
// norms, RNN, data movement, reductions). Each is the semantic definition of its op.
#pragma once

#include "ir/graph.h"
#include "runtime/tensor.h"

#include <functional>
#include <span>
#include <string_view>

namespace ampfuse::runtime {

// Computes a node's outputs. `outputs` arrive allocated with the node's inferred types.
using ReferenceKernel =
    std::function<void(const ir::Node& node, std::span<const Tensor> inputs, std::span<Tensor> outputs)>;

// The kernel for `op` (a canonical op name, as graph nodes hold), or nullptr. Elementwise
// ops have none: the interpreter runs their recipe.
const ReferenceKernel* find_reference_kernel(std::string_view op);

// Registration, one function per file in runtime/reference/. Throws unless `op` is the
// canonical name of a registered op.
void register_reference_kernel(std::string op, ReferenceKernel k);
void register_nn_kernels();
void register_tensor_kernels();
void register_index_kernels();
void register_tensor_backward_kernels();

}  // namespace ampfuse::runtime
