// Reference kernel: _BatchNorm_train (BatchNorm in training), the semantic definition of
// the op described in ir/ops/nn_norm_train.cpp.
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// MXNet 1.9.1's CPU kernel, statement for statement, in its AccReal (f32, f64 for f64
// data): sums run over the channel's elements in memory order; eps is a double attribute
// and momentum a float one in MXNet, which fixes where each rounds.
void batch_norm_train(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[0].shape();
  const auto axis = static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size()));
  const int64_t outer = extent(shape, 0, axis), channels = shape[axis], inner = extent(shape, axis + 1, shape.size());
  const int64_t items = outer * inner;
  const double eps = node.attrs.get_float("eps");
  const bool fix_gamma = node.attrs.get_bool("fix_gamma");
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T momentum = static_cast<T>(static_cast<float>(node.attrs.get_float("momentum")));
    std::vector<T> x = load<T>(in[0]);
    const std::vector<T> gamma = load<T>(in[1]), beta = load<T>(in[2]);
    std::vector<T> moving_mean = load<T>(in[3]), moving_var = load<T>(in[4]);
    std::vector<T> means(static_cast<size_t>(channels)), invstds(means.size());
    for (int64_t c = 0; c < channels; ++c) {
      const auto each = [&](auto&& f) {
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t j = 0; j < inner; ++j) f(x[static_cast<size_t>((o * channels + c) * inner + j)]);
      };
      T sum = 0;
      each([&](T v) { sum += v; });
      const T mean = sum / static_cast<T>(items);
      T squares = 0;
      each([&](T v) { squares += (v - mean) * (v - mean); });
      // MXNet: "Nobody likes to divide by zero".
      const T invstd = squares == 0 && eps == 0 ? T(0) : T(1) / std::sqrt(squares / static_cast<T>(items) + static_cast<T>(eps));
      const T w = fix_gamma ? T(1) : gamma[c], b = beta[c];
      each([&](T& v) { v = fix_gamma ? (v - mean) * invstd + b : ((v - mean) * invstd) * w + b; });
      // INVSTD_TO_VARIANCE: 1.0 / (invstd * invstd) - eps, in double, rounded to AccReal.
      const auto variance = static_cast<T>(1.0 / static_cast<double>(invstd * invstd) - eps);
      moving_mean[c] = moving_mean[c] * momentum + mean * (T(1) - momentum);
      moving_var[c] = moving_var[c] * momentum + variance * (T(1) - momentum);
      means[c] = mean;
      invstds[c] = invstd;
    }
    store(x, out[0]);
    store(moving_mean, out[1]);
    store(moving_var, out[2]);
    store(means, out[3]);
    store(invstds, out[4]);
  });
}

}  // namespace

void register_norm_train_kernels() { register_reference_kernel("_BatchNorm_train", batch_norm_train); }

}  // namespace ampfuse::runtime::ref
