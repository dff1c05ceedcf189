// Reference kernels of the NN backward ops (schemas in ir/ops/nn_backward.cpp): the
// semantic definition of each gradient. They accumulate in the compute type (f32 for f32
// and 16-bit data, f64 for f64) and round once to the output's dtype; channels-last data
// is transposed to channels-first on the way in and back on the way out, as the forward
// kernels do.
#include <cmath>
#include <limits>

#include "ir/ops/nn_params.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/sliding_window.h"

namespace ampfuse::runtime::ref {

namespace {

using ir::nn::ConvGeometry;
using ir::nn::PoolGeometry;
using ir::nn::PoolType;

// dw (O, C/groups, k...) = sum over images of dy (O, out...) times the im2col matrix of x:
// per image and group one GEMM, accumulated into dw.
void convolution_weight_gradient(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ConvGeometry g = ir::nn::conv_geometry(node.attrs, in[0].shape(), false);
  const Window w = conv_window(g);
  const int64_t cg = g.in_channels / g.groups, og = g.out_channels / g.groups;
  const int64_t depth = cg * w.kernel_volume(), in_plane = w.image_volume(), out_plane = w.grid_volume();
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]), dy = load<T>(in[1]);
    if (g.channels_last) {
      x = transpose_last_two(x, g.batch, in_plane, g.in_channels);
      dy = transpose_last_two(dy, g.batch, out_plane, g.out_channels);
    }
    std::vector<T> dw(static_cast<size_t>(g.out_channels * depth), T(0)), col(static_cast<size_t>(depth * out_plane));
    for (int64_t n = 0; n < g.batch; ++n)
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(x.data() + (n * g.in_channels + grp * cg) * in_plane, cg, w, col.data());
        gemm<T>(og, depth, out_plane, dy.data() + (n * g.out_channels + grp * og) * out_plane, out_plane, false,
                col.data(), out_plane, true, dw.data() + grp * og * depth, depth, /*accumulate=*/true);
      }
    // (O, C/groups, taps) -> (O, taps, C/groups), the channels-last weight layout.
    if (g.channels_last) dw = transpose_last_two(dw, g.out_channels, cg, w.kernel_volume());
    store(dw, out[0]);
  });
}

// One (batch, channel) plane: each output's gradient goes back over its window as the
// forward kernel (conv_kernels.cpp) computed it. max: all of it to the first element of
// the window (row-major) equal to the maximum, as MXNet 1.9.1's pool.h (which, finding
// none in a window with NaN, gives it to the window's last element); avg: divided by the forward's divisor; sum: as is;
// lp: times (x / y)^(p-1), the derivative of (sum x^p)^(1/p) (p=1 sums x: factor 1).
template <class T>
void pool_plane_gradient(const PoolGeometry& g, const PoolWindow& w, const T* x, const T* dy, T* dx) {
  int64_t o[3];
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2]) {
        const PoolBox box = pool_box(w, o);
        const T grad = dy[(o[0] * w.out[1] + o[1]) * w.out[2] + o[2]];
        switch (g.type) {
          case PoolType::max: {
            T best = std::numeric_limits<T>::lowest();
            for_each_in_box(w, box, [&](int64_t i) {
              best = (x[i] > best || std::isnan(x[i])) && !std::isnan(best) ? x[i] : best;
            });
            int64_t target = -1;
            bool found = false;
            for_each_in_box(w, box, [&](int64_t i) {
              if (found) return;
              target = i;
              found = x[i] == best;
            });
            if (target >= 0) dx[target] += grad;
            break;
          }
          case PoolType::avg: {
            const T share = grad / static_cast<T>(g.count_include_pad ? box.padded_size : box.size());
            for_each_in_box(w, box, [&](int64_t i) { dx[i] += share; });
            break;
          }
          case PoolType::sum:
            for_each_in_box(w, box, [&](int64_t i) { dx[i] += grad; });
            break;
          case PoolType::lp: {
            if (g.p_value == 1) {
              for_each_in_box(w, box, [&](int64_t i) { dx[i] += grad; });
              break;
            }
            T acc = 0;
            for_each_in_box(w, box, [&](int64_t i) { acc += g.p_value == 2 ? x[i] * x[i] : x[i] * x[i] * x[i]; });
            const T y = g.p_value == 2 ? std::sqrt(acc) : std::cbrt(acc);
            for_each_in_box(w, box, [&](int64_t i) {
              const T ratio = x[i] / y;
              dx[i] += grad * (g.p_value == 2 ? ratio : ratio * ratio);
            });
            break;
          }
        }
      }
}

void pooling_gradient(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeometry g = ir::nn::pool_geometry(node.attrs, in[0].shape());
  const PoolWindow w = pool_window(g);
  const int64_t planes = g.batch * g.channels, in_plane = w.in_volume(), out_plane = w.out_volume();
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]), dy = load<T>(in[1]);
    if (g.channels_last) {
      x = transpose_last_two(x, g.batch, in_plane, g.channels);
      dy = transpose_last_two(dy, g.batch, out_plane, g.channels);
    }
    std::vector<T> dx(x.size(), T(0));
    for (int64_t c = 0; c < planes; ++c)
      pool_plane_gradient<T>(g, w, x.data() + c * in_plane, dy.data() + c * out_plane, dx.data() + c * in_plane);
    if (g.channels_last) dx = transpose_last_two(dx, g.batch, g.channels, in_plane);
    store(dx, out[0]);
  });
}

// Each output's gradient divided by its window's height and width (the forward's
// divisions), added to every element of the window.
void adaptive_avg_pool_gradient(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  const int64_t planes = s[0] * s[1], height = s[2], width = s[3];
  const auto [oh, ow] = ir::nn::adaptive_pool_output_size(node.attrs);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> dy = load<T>(in[1]);
    std::vector<T> dx(static_cast<size_t>(in[0].size()), T(0));
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < oh; ++i) {
        const auto [h0, h1] = adaptive_window(i, height, oh);
        for (int64_t j = 0; j < ow; ++j) {
          const auto [w0, w1] = adaptive_window(j, width, ow);
          const T share = dy[(p * oh + i) * ow + j] / static_cast<T>(h1 - h0) / static_cast<T>(w1 - w0);
          for (int64_t r = h0; r < h1; ++r)
            for (int64_t c = w0; c < w1; ++c) dx[(p * height + r) * width + c] += share;
        }
      }
    store(dx, out[0]);
  });
}

// dw[embedding_row(index), :] += dy[index's position, :] (a scatter-add: repeated indices
// add up).
void embedding_gradient(const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
  const Tensor& indices = in[0];
  const int64_t rows = out[0].shape()[0], cols = out[0].shape()[1];
  with_compute_type({in[1].dtype()}, [&]<class T>() {
    const std::vector<T> dy = load<T>(in[1]);
    std::vector<T> dw(static_cast<size_t>(rows * cols), T(0));
    for (int64_t i = 0; i < indices.size(); ++i) {
      T* row = dw.data() + embedding_row(indices.get_f64(i), rows) * cols;
      for (int64_t c = 0; c < cols; ++c) row[c] += dy[i * cols + c];
    }
    store(dw, out[0]);
  });
}

}  // namespace

void register_nn_backward_kernels() {
  register_reference_kernel("_backward_Convolution_weight", convolution_weight_gradient);
  register_reference_kernel("_backward_Pooling", pooling_gradient);
  register_reference_kernel("_backward_AdaptiveAvgPooling2D", adaptive_avg_pool_gradient);
  register_reference_kernel("_backward_Embedding", embedding_gradient);
}

}  // namespace ampfuse::runtime::ref
