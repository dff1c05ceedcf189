// Shape rules of the index-returning reductions and the sorting ops (argmax, argmin,
// argmax_channel, norm, topk, sort, argsort; ir/ops/nn_ordering.cpp), shared with their
// reference kernels (runtime/reference/ordering_kernels.cpp) so that type inference and
// execution read the attributes in one way. Each throws ampfuse::Error naming the attribute.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <cstdint>

namespace ampfuse::ir::nn {

// The data seen as (outer, n, inner) rows of n elements along one axis; MXNet's axis=None
// (topk, sort, argsort, argmax) makes the whole tensor one row.
struct AxisRows {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t axis = -1;  // the normalized axis, -1 when the tensor is flattened
};
// From attribute `axis` of `attrs`: an Int, None, or (topk, sort, argsort) a String holding
// either.
AxisRows axis_rows(const Shape& in, const Attrs& attrs);

// argmax / argmin: the output shape (the axis dropped, or kept as 1 with keepdims; [1] or
// all ones for axis=None).
Shape arg_reduce_shape(const Shape& in, const Attrs& attrs);

// topk / sort / argsort: the rows to sort and how many leading elements of each to keep
// (k; every element when topk's k <= 0, and for sort and argsort).
struct SortPlan {
  AxisRows rows;
  int64_t k = 0;
  Shape out;  // value and index outputs; topk's mask output has the input's shape
};
SortPlan sort_plan(const Shape& in, const Attrs& attrs, bool is_topk);

}  // namespace ampfuse::ir::nn
