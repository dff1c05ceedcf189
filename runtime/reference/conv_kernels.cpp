// Reference kernels: Convolution, Deconvolution, Pooling.
//
// Every kernel works on channels-first data; channels-last tensors are transposed on the
// way in and out, which is exact. 1-D and 2-D problems are 3-D ones with unit extents in
// front, so one loop nest serves every rank.
#include "ir/error.h"
#include "ir/ops/nn_params.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ampfuse::runtime::ref {

namespace {

using ir::nn::ConvGeometry;
using ir::nn::PoolGeometry;
using ir::nn::PoolType;

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

Window conv_window(const ConvGeometry& g) {
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

template <class T>
void add_bias(T* y, const T* bias, int64_t channels, int64_t plane) {
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < plane; ++i) y[c * plane + i] += bias[c];
}

// y (N, O, out...) = conv(x (N, C, in...), w (O, C/groups, k...)) + bias: per image and
// group one GEMM of the weights against the im2col matrix (the input itself for a 1x1
// kernel with unit stride and no padding).
template <class T>
void convolution(const ConvGeometry& g, const Window& w, const T* x, const T* weight, const T* bias, T* y) {
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  const int64_t depth = cg * w.kernel_volume(), in_plane = w.image_volume(), out_plane = w.grid_volume();
  const bool pointwise = w.kernel_volume() == 1 && in_plane == out_plane &&
                         std::all_of(std::begin(w.pad), std::end(w.pad), [](int64_t p) { return p == 0; });
  std::vector<T> col(pointwise ? 0 : static_cast<size_t>(depth * out_plane));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = x + (n * g.in_channels + grp * cg) * in_plane;
      if (!pointwise) im2col(xg, cg, w, col.data());
      T* yg = y + (n * g.out_channels + grp * og) * out_plane;
      gemm<T>(og, out_plane, depth, weight + grp * og * depth, depth, false, pointwise ? xg : col.data(), out_plane,
              false, yg, out_plane);
      if (bias) add_bias(yg, bias + grp * og, og, out_plane);
    }
}

// y (N, F, out...) = deconv(x (N, C, in...), w (C, F/groups, k...)) + bias: the weights'
// transpose times the input gives every output tap, which col2im sums into place.
template <class T>
void deconvolution(const ConvGeometry& g, const Window& w, const T* x, const T* weight, const T* bias, T* y) {
  const int64_t cg = g.in_channels / g.groups, fg = g.out_channels / g.groups;
  const int64_t taps = fg * w.kernel_volume(), in_plane = w.grid_volume(), out_plane = w.image_volume();
  std::vector<T> col(static_cast<size_t>(taps * in_plane));
  std::fill(y, y + g.batch * g.out_channels * out_plane, T(0));
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* xg = x + (n * g.in_channels + grp * cg) * in_plane;
      gemm<T>(taps, in_plane, cg, weight + grp * cg * taps, taps, true, xg, in_plane, false, col.data(), in_plane);
      T* yg = y + (n * g.out_channels + grp * fg) * out_plane;
      col2im(col.data(), fg, w, yg);
      if (bias) add_bias(yg, bias + grp * fg, fg, out_plane);
    }
}

void conv_kernel(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out, bool deconv) {
  const ConvGeometry g = ir::nn::conv_geometry(node.attrs, in[0].shape(), deconv);
  const Window w = conv_window(g);
  const int64_t spatial_in = extent(g.in_size, 0, g.in_size.size());
  const int64_t spatial_out = extent(g.out_size, 0, g.out_size.size());
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]), weight = load<T>(in[1]);
    std::vector<T> bias = in.size() > 2 ? load<T>(in[2]) : std::vector<T>{};
    if (g.channels_last) {
      x = transpose_last_two(x, g.batch, spatial_in, g.in_channels);
      const int64_t lead = in[1].shape().front(), last = in[1].shape().back();
      weight = transpose_last_two(weight, lead, w.kernel_volume(), last);
    }
    std::vector<T> y(static_cast<size_t>(out[0].size()));
    (deconv ? deconvolution<T> : convolution<T>)(g, w, x.data(), weight.data(), bias.empty() ? nullptr : bias.data(),
                                                 y.data());
    if (g.channels_last) y = transpose_last_two(y, g.batch, g.out_channels, spatial_out);
    store(y, out[0]);
  });
}

// One (batch, channel) plane of pooling, MXNet's window rules: a window spans
// [o*stride - pad, o*stride - pad + kernel) clipped to the padded extent; avg divides by
// that clipped size with count_include_pad (the default), else by the number of data
// elements in it (0 of them gives NaN). max ignores padding and propagates NaN.
template <class T>
void pool_plane(const PoolGeometry& g, const int64_t (&in)[3], const int64_t (&outs)[3], const int64_t (&k)[3],
                const int64_t (&s)[3], const int64_t (&p)[3], const int64_t (&pe)[3], const T* x, T* y) {
  for (int64_t o0 = 0; o0 < outs[0]; ++o0)
    for (int64_t o1 = 0; o1 < outs[1]; ++o1)
      for (int64_t o2 = 0; o2 < outs[2]; ++o2) {
        const int64_t o[3] = {o0, o1, o2};
        int64_t lo[3], hi[3], window = 1;
        for (int d = 0; d < 3; ++d) {
          lo[d] = o[d] * s[d] - p[d];
          hi[d] = std::min(lo[d] + k[d], in[d] + pe[d]);
          window *= hi[d] - lo[d];
          lo[d] = std::max<int64_t>(lo[d], 0);
          hi[d] = std::min(hi[d], in[d]);
        }
        T acc = g.type == PoolType::max ? std::numeric_limits<T>::lowest() : T(0);
        int64_t count = 0;
        for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0)
          for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1)
            for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2) {
              const T v = x[(i0 * in[1] + i1) * in[2] + i2];
              ++count;
              switch (g.type) {
                case PoolType::max:
                  acc = (v > acc || std::isnan(v)) && !std::isnan(acc) ? v : acc;
                  break;
                case PoolType::avg:
                case PoolType::sum:
                  acc += v;
                  break;
                case PoolType::lp:
                  acc += g.p_value == 1 ? v : g.p_value == 2 ? v * v : v * v * v;
                  break;
              }
            }
        if (g.type == PoolType::avg) acc /= static_cast<T>(g.count_include_pad ? window : count);
        if (g.type == PoolType::lp) acc = g.p_value == 1 ? acc : g.p_value == 2 ? std::sqrt(acc) : std::cbrt(acc);
        y[(o0 * outs[1] + o1) * outs[2] + o2] = acc;
      }
}

void pooling_kernel(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeometry g = ir::nn::pool_geometry(node.attrs, in[0].shape());
  int64_t ins[3] = {1, 1, 1}, outs[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, p[3] = {0, 0, 0},
          pe[3] = {0, 0, 0};
  const size_t n = g.kernel.size(), off = 3 - n;
  for (size_t i = 0; i < n; ++i) {
    ins[off + i] = g.in_size[i];
    outs[off + i] = g.out_size[i];
    k[off + i] = g.kernel[i];
    s[off + i] = g.stride[i];
    p[off + i] = g.pad[i];
    pe[off + i] = g.pad_end[i];
  }
  const int64_t planes = g.batch * g.channels, in_plane = ins[0] * ins[1] * ins[2];
  const int64_t out_plane = outs[0] * outs[1] * outs[2];
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    if (g.channels_last) x = transpose_last_two(x, g.batch, in_plane, g.channels);
    std::vector<T> y(static_cast<size_t>(planes * out_plane));
    for (int64_t c = 0; c < planes; ++c)
      pool_plane<T>(g, ins, outs, k, s, p, pe, x.data() + c * in_plane, y.data() + c * out_plane);
    if (g.channels_last) y = transpose_last_two(y, g.batch, g.channels, out_plane);
    store(y, out[0]);
  });
}

}  // namespace

void register_conv_kernels() {
  register_reference_kernel("Convolution", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    conv_kernel(n, in, out, false);
  });
  register_reference_kernel("Deconvolution", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    conv_kernel(n, in, out, true);
  });
  register_reference_kernel("Pooling", pooling_kernel);
}

}  // namespace ampfuse::runtime::ref
