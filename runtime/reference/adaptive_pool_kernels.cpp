// Reference kernel of _contrib_AdaptiveAvgPooling2D (schema in ir/ops/nn_adaptive_pool.cpp).
// MXNet's order of operations, bit for bit on f32: the window summed row by row in the
// compute type (f32 for f32 and low-precision data, f64 for f64), then divided by its
// height and then by its width; a low-precision output rounds once (MXNet's f16 kernel
// sums in f16).
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"
#include "runtime/reference/sliding_window.h"

namespace ampfuse::runtime::ref {

namespace {

void adaptive_avg_pool(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  const int64_t planes = s[0] * s[1], height = s[2], width = s[3];
  const auto [oh, ow] = ir::nn::adaptive_pool_output_size(node.attrs);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> x = load<T>(in[0]);
    std::vector<T> y(static_cast<size_t>(planes * oh * ow));
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < oh; ++i) {
        const auto [h0, h1] = adaptive_window(i, height, oh);
        for (int64_t j = 0; j < ow; ++j) {
          const auto [w0, w1] = adaptive_window(j, width, ow);
          T sum = 0;
          for (int64_t r = h0; r < h1; ++r)
            for (int64_t c = w0; c < w1; ++c) sum += x[(p * height + r) * width + c];
          y[(p * oh + i) * ow + j] = sum / static_cast<T>(h1 - h0) / static_cast<T>(w1 - w0);
        }
      }
    store(y, out[0]);
  });
}

}  // namespace

void register_adaptive_pool_kernels() { register_reference_kernel("_contrib_AdaptiveAvgPooling2D", adaptive_avg_pool); }

}  // namespace ampfuse::runtime::ref
