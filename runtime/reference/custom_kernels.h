// Reference kernels of Custom ops, keyed by op_type (ir/custom_ops.h holds their schemas).
#pragma once

#include "ir/attrs.h"
#include "runtime/tensor.h"

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace ampfuse::runtime {

// Computes a Custom node's outputs from its extra attributes, typed by the op_type's
// schema (ir::custom_op_attrs). `outputs` arrive allocated with the inferred types.
using CustomKernel =
    std::function<void(const ir::Attrs& typed, std::span<const Tensor> inputs, std::span<Tensor> outputs)>;

void register_custom_kernel(std::string op_type, CustomKernel k);  // throws on a duplicate
const CustomKernel* find_custom_kernel(std::string_view op_type);

// Sockeye 1.18's positional_encodings, auto_regressive_bias, variable_length_bias.
void register_sockeye_kernels();

}  // namespace ampfuse::runtime
