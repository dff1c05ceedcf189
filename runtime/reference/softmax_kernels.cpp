// Reference kernels: softmax, log_softmax, softmin, SoftmaxActivation, SoftmaxOutput
// (forward only; its label is ignored).
#include "ir/error.h"
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/reference_kernels.h"

#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// The data viewed as (outer, n, inner), normalized over n.
struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};

Rows rows_along(const ir::Shape& shape, size_t axis) {
  return {extent(shape, 0, axis), shape[axis], extent(shape, axis + 1, shape.size())};
}

// y = exp((x - max) / t) / sum, or with `log` (x - max) / t - log(sum), as MXNet computes
// them; t is the temperature (1 unless given).
template <class T>
void softmax_rows(std::vector<T>& x, const Rows& r, T temperature, bool log) {
  if (r.n == 0) return;
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t j = 0; j < r.inner; ++j) {
      T* base = x.data() + o * r.n * r.inner + j;
      T max = base[0];
      for (int64_t i = 1; i < r.n; ++i) max = std::max(max, base[i * r.inner]);
      T sum = 0;
      for (int64_t i = 0; i < r.n; ++i) sum += std::exp((base[i * r.inner] - max) / temperature);
      if (log) {
        const T log_sum = std::log(sum);
        for (int64_t i = 0; i < r.n; ++i) base[i * r.inner] = (base[i * r.inner] - max) / temperature - log_sum;
      } else {
        for (int64_t i = 0; i < r.n; ++i) base[i * r.inner] = std::exp((base[i * r.inner] - max) / temperature) / sum;
      }
    }
}

// softmin is softmax of -x (MXNet negates before taking the maximum, as here).
void softmax_kernel(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out, bool log,
                    bool negate = false) {
  const ir::Shape& shape = in[0].shape();
  const Rows r =
      rows_along(shape, static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size())));
  const double t = node.attrs.is_none("temperature") ? 1.0 : node.attrs.get_float("temperature");
  with_compute_type({in[0].dtype(), out[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    if (negate)
      for (T& v : x) v = -v;
    softmax_rows<T>(x, r, static_cast<T>(t), log);
    store(x, out[0]);
  });
}

// SoftmaxOutput normalizes over axis 1 with multi_output, over the last axis with
// preserve_shape, and otherwise over everything after the first axis.
void softmax_output(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[0].shape();
  Rows r;
  if (node.attrs.get_bool("multi_output"))
    r = rows_along(shape, 1);
  else if (node.attrs.get_bool("preserve_shape"))
    r = rows_along(shape, shape.size() - 1);
  else
    r = {shape[0], extent(shape, 1, shape.size()), 1};
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    softmax_rows<T>(x, r, T(1), false);
    store(x, out[0]);
  });
}

// SoftmaxActivation: mode=channel normalizes over axis 1, mode=instance over the last axis
// (MXNet reads the data as a matrix of its last axis, whatever the rank).
void softmax_activation(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[0].shape();
  const Rows r = rows_along(shape, node.attrs.get_string("mode") == "channel" ? 1 : shape.size() - 1);
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    std::vector<T> x = load<T>(in[0]);
    softmax_rows<T>(x, r, T(1), false);
    store(x, out[0]);
  });
}

}  // namespace

void register_softmax_kernels() {
  register_reference_kernel("softmax", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    softmax_kernel(n, in, out, false);
  });
  register_reference_kernel("log_softmax", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    softmax_kernel(n, in, out, true);
  });
  register_reference_kernel("softmin", [](const ir::Node& n, std::span<const Tensor> in, std::span<Tensor> out) {
    softmax_kernel(n, in, out, false, true);
  });
  register_reference_kernel("SoftmaxActivation", softmax_activation);
  register_reference_kernel("SoftmaxOutput", softmax_output);
}

}  // namespace ampfuse::runtime::ref
