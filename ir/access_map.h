// Affine access maps: which element of a tensor an iteration index reads.
//
// The op registry declares them for ops that only re-index their input (OpDef::remap_access:
// transpose, slice, broadcast_to...), and the fusion planner (engine/planning/fusion_plan.h)
// composes them into the loads of a fused kernel, which is how broadcasts, slices and
// transposes of inputs cost no pass over memory of their own.
#pragma once

#include "ir/dtype.h"

#include <cstdint>
#include <vector>

namespace ampfuse::ir {

// Dim k of the tensor reads offset[k] + scale[k] * i[iter_dim[k]] of an iteration index i,
// or just offset[k] when iter_dim[k] == -1 (a broadcast dimension: scale 0).
struct AccessMap {
  std::vector<int32_t> iter_dim;
  std::vector<int64_t> scale;
  std::vector<int64_t> offset;

  static AccessMap identity(size_t rank);
  // NumPy broadcasting of a tensor of shape `in` over an iteration space `out`: dims
  // right-aligned, an extent-1 dim of `in` repeats where `out`'s extent is not 1.
  static AccessMap broadcast(const Shape& in, const Shape& out);
  bool is_identity() const;
  friend bool operator==(const AccessMap&, const AccessMap&) = default;
};

}  // namespace ampfuse::ir
