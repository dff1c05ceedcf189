// Reference kernels: BatchNorm (inference), LayerNorm.
#include "ir/error.h"
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// Inference BatchNorm with the moving statistics, in MXNet's order of operations:
//   invstd[c] = 1.0 / sqrt(var[c] + eps)   (sqrt in the compute type, the division in f64,
//                                           rounded once to the compute type)
//   y = ((x - mean[c]) * invstd[c]) * gamma[c] + beta[c]   (gamma = 1 with fix_gamma)
// A fused kernel that folds BatchNorm must evaluate this same sequence per element.
// output_mean_var adds the mean and invstd used (MXNet's "var" output holds invstd).
void batch_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[0].shape();
  const auto axis = static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size()));
  const int64_t outer = extent(shape, 0, axis), channels = shape[axis], inner = extent(shape, axis + 1, shape.size());
  const bool fix_gamma = node.attrs.get_bool("fix_gamma");
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    std::vector<T> x = load<T>(in[0]);
    const std::vector<T> gamma = load<T>(in[1]), beta = load<T>(in[2]), mean = load<T>(in[3]), var = load<T>(in[4]);
    std::vector<T> invstd(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) invstd[c] = static_cast<T>(1.0 / std::sqrt(var[c] + eps));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t c = 0; c < channels; ++c) {
        T* row = x.data() + (o * channels + c) * inner;
        const T g = fix_gamma ? T(1) : gamma[c];
        for (int64_t i = 0; i < inner; ++i) row[i] = ((row[i] - mean[c]) * invstd[c]) * g + beta[c];
      }
    store(x, out[0]);
    if (out.size() > 1) {
      store(mean, out[1]);
      store(invstd, out[2]);
    }
  });
}

// Per position along `axis`: mean, var = mean((x - mean)^2), std = sqrt(var + eps),
// y = (x - mean) / std * gamma + beta. Sums accumulate in the compute type.
void layer_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[0].shape();
  const auto axis = static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size()));
  const int64_t outer = extent(shape, 0, axis), n = shape[axis], inner = extent(shape, axis + 1, shape.size());
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    std::vector<T> x = load<T>(in[0]);
    const std::vector<T> gamma = load<T>(in[1]), beta = load<T>(in[2]);
    std::vector<T> means(static_cast<size_t>(outer * inner)), stds(means.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) {
        T* base = x.data() + o * n * inner + j;
        T sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += base[i * inner];
        const T mean = sum / static_cast<T>(n);
        T sq = 0;
        for (int64_t i = 0; i < n; ++i) sq += (base[i * inner] - mean) * (base[i * inner] - mean);
        const T std_dev = std::sqrt(sq / static_cast<T>(n) + eps);
        for (int64_t i = 0; i < n; ++i) base[i * inner] = (base[i * inner] - mean) / std_dev * gamma[i] + beta[i];
        means[o * inner + j] = mean;
        stds[o * inner + j] = std_dev;
      }
    store(x, out[0]);
    if (out.size() > 1) {
      store(means, out[1]);
      store(stds, out[2]);
    }
  });
}

}  // namespace

void register_norm_kernels() {
  register_reference_kernel("BatchNorm", batch_norm);
  register_reference_kernel("LayerNorm", layer_norm);
}

}  // namespace ampfuse::runtime::ref
