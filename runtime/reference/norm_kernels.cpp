// Reference kernels: BatchNorm (inference), LayerNorm.
#include "ir/error.h"
#include "ir/ops/nn_norm.h"
#include "ir/ops/nn_params.h"
#include "runtime/interpreter.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// BatchNorm with output_mean_var=True (without it the interpreter evaluates the op's
// recipe directly). Its math is the recipe's (ir/ops/nn_norm.cpp): y is the recipe itself,
// the mean output is moving_mean, and MXNet's "var" output holds the inverse standard
// deviation the recipe multiplies by, batch_norm_invstd_program over the same per-channel
// inputs. So both settings give y bit for bit alike.
void batch_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  out[0] = runtime::eval_recipe(node, in, std::span(node.outputs).first(1))[0];
  if (out.size() == 1) return;
  out[1] = runtime::cast(in[3], node.outputs[1].dtype);
  const ir::ScalarProgram invstd = ir::nn::batch_norm_invstd_program(node.attrs);
  out[2] = eval_scalar_program(invstd, {&in[1], &in[2], &in[3], &in[4]}, {node.outputs[2]})[0];
}

// Per position along `axis`: mean, var = mean((x - mean)^2), std = sqrt(var + eps),
// y = (x - mean) / std * gamma + beta. The two sums add in f64 (in f32 the mean of 2^20
// values near 1000 came out 1 % off) and mean and std are rounded to the compute type.
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
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(base[i * inner]);
        const T mean = static_cast<T>(sum / static_cast<double>(n));
        double sq = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(base[i * inner] - mean);
          sq += d * d;
        }
        const T std_dev = static_cast<T>(std::sqrt(sq / static_cast<double>(n) + static_cast<double>(eps)));
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
