// Strided views over dense tensors: the one gather/scatter loop behind the reference
// kernels of transpose, slices, broadcasts, Concat, stack, SliceChannel and reductions.
//
// A permutation, a slice (offset + scaled strides, negative for a negative step) and a
// broadcast (stride 0) are all the same thing here: a shape walked in row-major order with
// a stride per dim, so any combination of them is one strided copy.
#pragma once

#include "runtime/tensor.h"

#include <cstdint>
#include <vector>

namespace ampfuse::runtime {

struct StridedView {
  Shape shape;                   // the index space, walked row-major
  std::vector<int64_t> strides;  // in elements, per dim; 0 repeats, negative walks backwards
  int64_t offset = 0;            // the element at index (0, ..., 0)
};

// Row-major strides of a dense tensor of shape `s`.
std::vector<int64_t> dense_strides(const Shape& s);
// The view of a whole dense tensor, element i at offset i.
StridedView dense_view(const Shape& s);

// Copies element `from[idx]` of `src` to `to[idx]` of `dst` for every index, bit for bit
// (no float round trip, so f16/bf16 NaN payloads survive). Both views have one shape and
// both tensors one dtype; the views must stay inside their tensors.
void strided_copy(const Tensor& src, const StridedView& from, Tensor& dst, const StridedView& to);

// Calls visit(offset_a, offset_b) for every index of two views of one shape, in row-major
// order.
template <class Visit>
void for_each_offset_pair(const StridedView& a, const StridedView& b, Visit&& visit) {
  const Shape& shape = a.shape;
  const size_t rank = shape.size();
  for (int64_t e : shape)
    if (e == 0) return;
  if (rank == 0) {
    visit(a.offset, b.offset);
    return;
  }
  std::vector<int64_t> index(rank, 0);
  int64_t base_a = a.offset, base_b = b.offset;
  const int64_t inner = shape.back(), step_a = a.strides.back(), step_b = b.strides.back();
  for (;;) {
    for (int64_t k = 0; k < inner; ++k) visit(base_a + k * step_a, base_b + k * step_b);
    // Advance the outer dims like an odometer.
    size_t d = rank - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      base_a += a.strides[d];
      base_b += b.strides[d];
      if (++index[d] < shape[d]) break;
      base_a -= a.strides[d] * shape[d];
      base_b -= b.strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

// Calls visit(offset) for every index of `view`, in row-major order.
template <class Visit>
void for_each_offset(const StridedView& view, Visit&& visit) {
  for_each_offset_pair(view, view, [&](int64_t o, int64_t) { visit(o); });
}

}  // namespace ampfuse::runtime
