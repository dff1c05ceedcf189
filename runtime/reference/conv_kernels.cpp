// Reference kernels: Convolution, Deconvolution, Pooling.
//
// Every kernel works on channels-first data; channels-last tensors are transposed on the
// way in and out, which is exact. The windows (1-D to 3-D as 3-D) are in sliding_window.h.
#include "ir/error.h"
#include "ir/op_registry.h"
#include "ir/ops/nn_params.h"
#include "runtime/interpreter.h"
#include "runtime/reference/gemm.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/sliding_window.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ampfuse::runtime::ref {

namespace {

using ir::nn::ConvGeometry;
using ir::nn::PoolGeometry;
using ir::nn::PoolType;

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
  const bool fused = node.op == "_fused_conv";
  const bool has_bias = !node.attrs.get_bool("no_bias");
  const ConvGeometry g = ir::nn::conv_geometry(node.attrs, in[0].shape(), deconv);
  const Window w = conv_window(g);
  const int64_t spatial_in = extent(g.in_size, 0, g.in_size.size());
  const int64_t spatial_out = extent(g.out_size, 0, g.out_size.size());
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]), weight = load<T>(in[1]);
    std::vector<T> bias = (fused ? has_bias : in.size() > 2) ? load<T>(in[2]) : std::vector<T>{};
    if (g.channels_last) {
      x = transpose_last_two(x, g.batch, spatial_in, g.in_channels);
      const int64_t lead = in[1].shape().front(), last = in[1].shape().back();
      weight = transpose_last_two(weight, lead, w.kernel_volume(), last);
    }
    std::vector<T> y(static_cast<size_t>(out[0].size()));
    (deconv ? deconvolution<T> : convolution<T>)(g, w, x.data(), weight.data(), bias.empty() ? nullptr : bias.data(),
                                                 y.data());
    if (g.channels_last) y = transpose_last_two(y, g.batch, g.out_channels, spatial_out);
    if (fused) apply_epilogue(node, in, y, out[0].shape());
    store(y, out[0]);
  });
}

// One (batch, channel) plane of pooling over the windows of pool_box (sliding_window.h):
// avg divides by the padded window's size with count_include_pad (the default), else by
// the number of data elements in it (0 of them gives NaN). max ignores padding and
// propagates NaN.
template <class T>
void pool_plane(const PoolGeometry& g, const PoolWindow& w, const T* x, T* y) {
  int64_t o[3];
  for (o[0] = 0; o[0] < w.out[0]; ++o[0])
    for (o[1] = 0; o[1] < w.out[1]; ++o[1])
      for (o[2] = 0; o[2] < w.out[2]; ++o[2]) {
        const PoolBox box = pool_box(w, o);
        T acc = g.type == PoolType::max ? std::numeric_limits<T>::lowest() : T(0);
        for_each_in_box(w, box, [&](int64_t i) {
          const T v = x[i];
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
        });
        if (g.type == PoolType::avg) acc /= static_cast<T>(g.count_include_pad ? box.padded_size : box.size());
        if (g.type == PoolType::lp) acc = g.p_value == 1 ? acc : g.p_value == 2 ? std::sqrt(acc) : std::cbrt(acc);
        y[(o[0] * w.out[1] + o[1]) * w.out[2] + o[2]] = acc;
      }
}

void pooling_kernel(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const PoolGeometry g = ir::nn::pool_geometry(node.attrs, in[0].shape());
  const PoolWindow w = pool_window(g);
  const int64_t planes = g.batch * g.channels, in_plane = w.in_volume(), out_plane = w.out_volume();
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    if (g.channels_last) x = transpose_last_two(x, g.batch, in_plane, g.channels);
    std::vector<T> y(static_cast<size_t>(planes * out_plane));
    for (int64_t c = 0; c < planes; ++c) pool_plane<T>(g, w, x.data() + c * in_plane, y.data() + c * out_plane);
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
  register_reference_kernel("_fused_conv", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    conv_kernel(n, in, out, false);
  });
  register_reference_kernel("Pooling", pooling_kernel);
}

Tensor apply_epilogue(const ir::Node& node, std::span<const Tensor> in, Tensor y) {
  const TensorType type = y.type();
  const auto by_recipe = [&](const std::string& op, std::vector<Tensor> operands, ir::Attrs attrs = {}) {
    ir::Node n;
    n.op = op;
    n.name = node.name;
    n.attrs = ir::complete_attrs(ir::OpRegistry::global().get(op), std::move(attrs));
    n.outputs = {type};
    return std::move(eval_recipe(n, operands, std::span<const TensorType>(&type, 1)).front());
  };
  if (node.attrs.get_bool("with_residual")) {
    Tensor residual(type);  // widened exactly to the compute type
    store(load<double>(in.back()), residual);
    y = by_recipe("elemwise_add", {std::move(y), std::move(residual)});
  }
  if (node.attrs.get_string("act_type") == "relu") y = by_recipe("relu", {std::move(y)});
  if (node.attrs.get_string("act_type") == "leaky") {
    ir::Attrs leaky;
    leaky.set("act_type", std::string("leaky"));
    leaky.set("slope", node.attrs.get_float("slope"));
    y = by_recipe("LeakyReLU", {std::move(y)}, std::move(leaky));
  }
  return y;
}

}  // namespace ampfuse::runtime::ref
