// Sliding windows shared by the convolution and pooling kernels, forward
// (conv_kernels.cpp) and backward (nn_backward_kernels.cpp): 1-D and 2-D problems are 3-D
// ones with unit extents in front, so one loop nest serves every rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "ir/ops/nn_params.h"

namespace ampfuse::runtime::ref {

// A sliding window between an "image" and a grid of window positions: image index =
// grid index * stride - pad + kernel index * dilate, per dimension. Convolution reads its
// input as the image and writes the grid; Deconvolution is the transpose and writes the
// image.
struct Window {
  int64_t image[3] = {1, 1, 1}, grid[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilate[3] = {1, 1, 1}, pad[3] = {0, 0, 0};

  int64_t image_volume() const { return image[0] * image[1] * image[2]; }
  int64_t grid_volume() const { return grid[0] * grid[1] * grid[2]; }
  int64_t kernel_volume() const { return kernel[0] * kernel[1] * kernel[2]; }
};

inline Window conv_window(const ir::nn::ConvGeometry& g) {
  Window w;
  const size_t n = g.spatial(), off = 3 - n;
  for (size_t i = 0; i < n; ++i) {
    w.image[off + i] = g.deconv ? g.out_size[i] : g.in_size[i];
    w.grid[off + i] = g.deconv ? g.in_size[i] : g.out_size[i];
    w.kernel[off + i] = g.kernel[i];
    w.stride[off + i] = g.stride[i];
    w.dilate[off + i] = g.dilate[i];
    w.pad[off + i] = g.pad[i];
  }
  return w;
}

// Visits every (kernel offset, grid position) pair whose image position lies inside the
// image: fn(row, grid_index, image_index) with row = kernel offset index.
template <class Fn>
void for_each_tap(const Window& w, Fn&& fn) {
  int64_t row = 0;
  for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0)
    for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1)
      for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2, ++row)
        for (int64_t g0 = 0; g0 < w.grid[0]; ++g0) {
          const int64_t i0 = g0 * w.stride[0] - w.pad[0] + k0 * w.dilate[0];
          if (i0 < 0 || i0 >= w.image[0]) continue;
          for (int64_t g1 = 0; g1 < w.grid[1]; ++g1) {
            const int64_t i1 = g1 * w.stride[1] - w.pad[1] + k1 * w.dilate[1];
            if (i1 < 0 || i1 >= w.image[1]) continue;
            const int64_t grid_row = (g0 * w.grid[1] + g1) * w.grid[2];
            const int64_t image_row = (i0 * w.image[1] + i1) * w.image[2];
            for (int64_t g2 = 0; g2 < w.grid[2]; ++g2) {
              const int64_t i2 = g2 * w.stride[2] - w.pad[2] + k2 * w.dilate[2];
              if (i2 >= 0 && i2 < w.image[2]) fn(row, grid_row + g2, image_row + i2);
            }
          }
        }
}

// col[(c * kernel_volume + tap) * grid_volume + p] = image value under tap at p, or 0.
template <class T>
void im2col(const T* image, int64_t channels, const Window& w, T* col) {
  const int64_t rows = w.kernel_volume(), cols = w.grid_volume(), plane = w.image_volume();
  std::fill(col, col + channels * rows * cols, T(0));
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = image + c * plane;
    T* dst = col + c * rows * cols;
    for_each_tap(w, [&](int64_t row, int64_t p, int64_t i) { dst[row * cols + p] = src[i]; });
  }
}

// The transpose of im2col: image[c][i] += col entries that map to i.
template <class T>
void col2im(const T* col, int64_t channels, const Window& w, T* image) {
  const int64_t rows = w.kernel_volume(), cols = w.grid_volume(), plane = w.image_volume();
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = col + c * rows * cols;
    T* dst = image + c * plane;
    for_each_tap(w, [&](int64_t row, int64_t p, int64_t i) { dst[i] += src[row * cols + p]; });
  }
}

// Pooling's geometry as 3-D extents (unit ones in front).
struct PoolWindow {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1}, stride[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};

  int64_t in_volume() const { return in[0] * in[1] * in[2]; }
  int64_t out_volume() const { return out[0] * out[1] * out[2]; }
};

inline PoolWindow pool_window(const ir::nn::PoolGeometry& g) {
  PoolWindow w;
  const size_t n = g.kernel.size(), off = 3 - n;
  for (size_t i = 0; i < n; ++i) {
    w.in[off + i] = g.in_size[i];
    w.out[off + i] = g.out_size[i];
    w.kernel[off + i] = g.kernel[i];
    w.stride[off + i] = g.stride[i];
    w.pad[off + i] = g.pad[i];
    w.pad_end[off + i] = g.pad_end[i];
  }
  return w;
}

// The data box [lo, hi) that output position `o` pools over, MXNet's window rules: a window
// spans [o*stride - pad, o*stride - pad + kernel) clipped to the padded extent, whose size
// (`padded_size`) avg divides by with count_include_pad; the box is that window clipped to
// the data.
struct PoolBox {
  int64_t lo[3], hi[3];
  int64_t padded_size = 1;

  // The number of data elements in the box (0 for a window wholly in the padding).
  int64_t size() const {
    int64_t n = 1;
    for (int d = 0; d < 3; ++d) n *= std::max<int64_t>(0, hi[d] - lo[d]);
    return n;
  }
};

inline PoolBox pool_box(const PoolWindow& w, const int64_t (&o)[3]) {
  PoolBox b;
  for (int d = 0; d < 3; ++d) {
    b.lo[d] = o[d] * w.stride[d] - w.pad[d];
    b.hi[d] = std::min(b.lo[d] + w.kernel[d], w.in[d] + w.pad_end[d]);
    b.padded_size *= b.hi[d] - b.lo[d];
    b.lo[d] = std::max<int64_t>(b.lo[d], 0);
    b.hi[d] = std::min(b.hi[d], w.in[d]);
  }
  return b;
}

// Calls fn(index) for every data element of the box, in row-major order (the order
// MXNet's kernels scan a window in, which decides max pooling's tie breaking).
template <class Fn>
void for_each_in_box(const PoolWindow& w, const PoolBox& b, Fn&& fn) {
  for (int64_t i0 = b.lo[0]; i0 < b.hi[0]; ++i0)
    for (int64_t i1 = b.lo[1]; i1 < b.hi[1]; ++i1)
      for (int64_t i2 = b.lo[2]; i2 < b.hi[2]; ++i2) fn((i0 * w.in[1] + i1) * w.in[2] + i2);
}

// _contrib_AdaptiveAvgPooling2D's window along one axis for output index i of `out` over
// `in`: [floor(i * in / out), ceil((i + 1) * in / out)).
inline std::pair<int64_t, int64_t> adaptive_window(int64_t i, int64_t in, int64_t out) {
  return {i * in / out, ((i + 1) * in + out - 1) / out};
}

}  // namespace ampfuse::runtime::ref
