#include "runtime/reference/strided_view.h"

#include "ir/error.h"

#include <cstring>

namespace ampfuse::runtime {

std::vector<int64_t> dense_strides(const Shape& s) {
  std::vector<int64_t> strides(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) strides[d - 1] = strides[d] * s[d];
  return strides;
}

StridedView dense_view(const Shape& s) { return {s, dense_strides(s), 0}; }

namespace {

// A kernel bug would otherwise read or write outside a buffer silently.
void check_inside(const StridedView& v, const Tensor& t, const char* which) {
  if (v.strides.size() != v.shape.size())
    fail("internal error: {} view has {} strides for rank {}", which, v.strides.size(), v.shape.size());
  int64_t lo = v.offset, hi = v.offset;
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] == 0) return;  // nothing is touched
    const int64_t reach = v.strides[d] * (v.shape[d] - 1);
    (reach < 0 ? lo : hi) += reach;
  }
  if (lo < 0 || hi >= t.size())
    fail("internal error: {} view {} reaches elements [{}, {}] of a tensor of {}", which, ir::shape_str(v.shape), lo, hi,
         t.size());
}

template <size_t N>
void copy_elements(const std::byte* src, const StridedView& from, std::byte* dst, const StridedView& to) {
  for_each_offset_pair(from, to, [&](int64_t s, int64_t d) { std::memcpy(dst + d * N, src + s * N, N); });
}

}  // namespace

void strided_copy(const Tensor& src, const StridedView& from, Tensor& dst, const StridedView& to) {
  if (src.dtype() != dst.dtype())
    fail("internal error: strided copy from {} to {}", ir::dtype_name(src.dtype()), ir::dtype_name(dst.dtype()));
  if (from.shape != to.shape)
    fail("internal error: strided copy from view {} to view {}", ir::shape_str(from.shape), ir::shape_str(to.shape));
  check_inside(from, src, "source");
  check_inside(to, dst, "destination");
  const auto* s = static_cast<const std::byte*>(src.raw());
  auto* d = static_cast<std::byte*>(dst.raw());
  switch (ir::dtype_size(src.dtype())) {
    case 1: copy_elements<1>(s, from, d, to); break;
    case 2: copy_elements<2>(s, from, d, to); break;
    case 4: copy_elements<4>(s, from, d, to); break;
    case 8: copy_elements<8>(s, from, d, to); break;
    default: fail("internal error: no strided copy for {}", ir::dtype_name(src.dtype()));
  }
}

}  // namespace ampfuse::runtime
