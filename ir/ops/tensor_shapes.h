// Shape rules of the tensor ops (ir/ops/tensor.cpp), shared with their reference kernels so
// that type inference and execution read an op's attributes in exactly one way.
//
// Each function follows MXNet 1.x and throws ampfuse::Error naming the input shape and the
// attribute at fault.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace ampfuse::ir {

// `axis` counted from the end when negative; valid in [-rank, rank). `attr` names the
// attribute in the error ("axis 3 (attribute 'dim') is out of range for [2,3]").
int64_t resolve_axis(int64_t axis, const Shape& in, std::string_view attr);
// The same for an axis that may also name the position after the last one
// (expand_dims, stack): valid in [-rank-1, rank].
int64_t resolve_insert_axis(int64_t axis, const Shape& in, std::string_view attr);

// Reshape's output shape from MXNet's `shape` codes: 0 copies an input dim, -1 is inferred,
// -2 copies all remaining input dims, -3 merges two input dims, -4 splits one input dim in
// the next two entries (one of them may be -1). `reverse` matches codes right to left.
Shape reshape_output_shape(const Shape& in, const std::vector<int64_t>& spec, bool reverse);

// transpose: output dim i is input dim perm[i]. Empty `axes` reverses the dims.
std::vector<int64_t> transpose_permutation(const Shape& in, const std::vector<int64_t>& axes);

// One output dim of a slice: it reads input indices begin, begin + step, ... (size of them).
struct SliceDim {
  int64_t begin = 0;
  int64_t step = 1;
  int64_t size = 0;
};
// One SliceDim per input dim; dims the attributes leave out are taken whole.
std::vector<SliceDim> slice_dims(const Shape& in, const Attrs& attrs);        // slice
std::vector<SliceDim> slice_axis_dims(const Shape& in, const Attrs& attrs);   // slice_axis
std::vector<SliceDim> slice_like_dims(const Shape& in, const Shape& like, const Attrs& attrs);
Shape slice_output_shape(const std::vector<SliceDim>& dims);

// The dims a reduction (sum, mean, max, min, prod) folds, from axis/keepdims/exclude, and
// its output shape. Reducing every dim without keepdims gives [1], as MXNet 1.x does.
struct ReducePlan {
  std::vector<bool> reduced;  // per input dim
  Shape out;
  Shape kept;  // the input's shape with each reduced dim 1: the output seen with keepdims
};
ReducePlan reduce_plan(const Shape& in, const Attrs& attrs);

// Output shapes of broadcast_to (shape), broadcast_axis (axis, size) and broadcast_like
// (lhs_axes, rhs_axes). The output has the input's rank; the kernel broadcasts every dim
// where the input has extent 1 and the output does not.
Shape broadcast_to_shape(const Shape& in, const Attrs& attrs);
Shape broadcast_axis_shape(const Shape& in, const Attrs& attrs);
Shape broadcast_like_shape(const Shape& lhs, const Shape& rhs, const Attrs& attrs);

}  // namespace ampfuse::ir
