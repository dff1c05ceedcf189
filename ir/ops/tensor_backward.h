// The backward ops of the tensor and indexing ops (ir/ops/tensor_backward.cpp): gradients
// that no forward op computes, because they write into zeros (a slice's window) or add up
// what several outputs read from one input element (take, gather_nd, an edge pad). Their
// reference kernels (runtime/reference/tensor_backward_kernels.cpp) are their definition.
// The gradient rules of ir/ops/tensor.cpp and ir/ops/tensor_index.cpp emit them through
// the functions below.
#pragma once

#include "ir/gradient.h"
#include "ir/ops/tensor_shapes.h"

#include <vector>

namespace ampfuse::ir {

// `grad` (the gradient of a slice of an input of shape `in`, `window` its slice_dims)
// placed at the slice's elements of zeros of shape `in`: `_backward_slice`.
ValueRef slice_backward(GradContext& c, ValueRef grad, const Shape& in, const std::vector<SliceDim>& window);

// Entries [begin, end) of `axis` of v: slice_axis.
ValueRef slice_along(GradContext& c, ValueRef v, int64_t axis, int64_t begin, int64_t end);

// The rule of an op that is its own inverse (SwapAxis, reverse): the op, with its
// attributes, applied to the output's gradient.
InputGrads self_inverse_gradient(GradContext& c);

// The gradient of input 0 alone, as a rule's result: inputs after it (indices, lengths,
// inputs lending a shape) get none.
InputGrads data_gradient(GradContext& c, ValueRef grad);

}  // namespace ampfuse::ir
