// Where bilinear resizing (_contrib_BilinearResize2D) reads along one axis, as MXNet's CPU
// kernels compute it, shared by the forward kernel (index_kernels.cpp) and its gradient
// (tensor_backward_kernels.cpp) so that both take the same neighbours and weights.
#pragma once

#include <cstdint>
#include <vector>

namespace ampfuse::runtime::ref {

// Output index i reads input indices lo and lo + step with weights w_lo and w_hi.
template <class T>
struct BilinearTap {
  int64_t lo = 0, step = 0;
  T w_lo = T(1), w_hi = T(0);
};

// In the compute type T and MXNet's order of operations: source position src = scale * i
// (align_corners) or max(scale * (i + 0.5) - 0.5 in double, 0), scale = (in - 1) / (out - 1) or
// in / out (0 for an output extent of 1); lo = int(src), step = 1 unless lo is the last
// index; w_hi = src - lo, w_lo = 1 - w_hi.
template <class T>
std::vector<BilinearTap<T>> bilinear_taps(int64_t in, int64_t out, bool align_corners) {
  T scale = T(0);
  if (out > 1)
    scale = align_corners ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : static_cast<T>(in) / static_cast<T>(out);
  std::vector<BilinearTap<T>> taps(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    T src = scale * static_cast<T>(i);
    if (!align_corners) {
      // MXNet's area_pixel_compute_source_index adds the half pixel to the int index as a
      // double (dst_index + 0.5), so the product and difference are double, rounded once to
      // T on return; in float arithmetic a non-dyadic scale gives results an ulp off.
      src = static_cast<T>(static_cast<double>(scale) * (static_cast<double>(i) + 0.5) - 0.5);
      if (src < T(0)) src = T(0);
    }
    BilinearTap<T>& t = taps[static_cast<size_t>(i)];
    t.lo = static_cast<int64_t>(src);
    t.step = t.lo < in - 1 ? 1 : 0;
    t.w_hi = src - static_cast<T>(t.lo);
    t.w_lo = T(1) - t.w_hi;
  }
  return taps;
}

}  // namespace ampfuse::runtime::ref
