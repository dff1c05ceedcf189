// What BatchNorm's inference and training forms (ir/ops/nn_norm.cpp, nn_norm_train.cpp) share.
//
// BatchNorm's inverse standard deviation, the one part of its math a reference kernel
// needs on its own: with output_mean_var=True BatchNorm also returns the statistic it
// multiplied by, and the kernel (runtime/reference/norm_kernels.cpp) computes it with this
// program, the same instructions as the op's recipe (ir/ops/nn_norm.cpp), in the same
// compute type.
#pragma once

#include "ir/attrs.h"
#include "ir/op_registry.h"
#include "ir/scalar_program.h"

#include <optional>

namespace ampfuse::ir::nn {

// 1 / sqrt(var + eps) per channel, over BatchNorm's per-channel inputs (gamma, beta,
// moving_mean, moving_var: its inputs 1 to 4). Only moving_var is read; all four are
// operands so that the compute type is the recipe's own.
ScalarProgram batch_norm_invstd_program(const Attrs& a);

// BatchNorm's input inference, shared with its training form (_BatchNorm_train): checks
// the data, fills the four per-channel inputs and returns their type (f32, f64 for f64
// data), or nullopt while the data's type is unknown. Needs the `axis` attribute.
std::optional<TensorType> infer_batch_norm_inputs(InferContext& ctx);

}  // namespace ampfuse::ir::nn
