// Reference kernels: InstanceNorm, GroupNorm, L2Normalization, LRN (schemas and the
// formulas in ir/ops/nn_zoo_norm.cpp). Sums accumulate in the compute type (f32 for f32
// and low-precision data, f64 for f64) and each output rounds once.
#include "ir/error.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/norm_groups.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>

namespace ampfuse::runtime::ref {

namespace {

// y = (x - mean) / sqrt(var + eps) * gamma[o % scales] + beta[o % scales] per group o;
// the means and standard deviations go to `stats` when it is given (GroupNorm's extras).
void normalize_groups(const Groups& g, int64_t scales, const ir::Node& node, std::span<const Tensor> in,
                      std::span<Tensor> out) {
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    std::vector<T> x = load<T>(in[0]);
    const std::vector<T> gamma = load<T>(in[1]), beta = load<T>(in[2]);
    std::vector<T> means(static_cast<size_t>(g.outer)), stds(means.size());
    for (int64_t o = 0; o < g.outer; ++o) {
      const auto [mean, var] = mean_var(x, g, o);
      const T std_dev = std::sqrt(var + eps);
      const T scale = gamma[o % scales], shift = beta[o % scales];
      for (int64_t i = 0; i < g.n; ++i) {
        T& v = x[g.at(o, i)];
        v = (v - mean) / std_dev * scale + shift;
      }
      means[o] = mean;
      stds[o] = std_dev;
    }
    store(x, out[0]);
    if (out.size() > 1) {
      store(means, out[1]);
      store(stds, out[2]);
    }
  });
}

void instance_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  normalize_groups({s[0] * s[1], extent(s, 2, s.size()), 1}, s[1], node, in, out);
}

void group_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  const int64_t groups = node.attrs.get_int("num_groups");
  normalize_groups({s[0] * groups, s[1] / groups * extent(s, 2, s.size()), 1}, groups, node, in, out);
}

// y = x / sqrt(sum of x^2 over the group + eps).
void l2_normalization(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  const Groups g = l2_normalization_groups(s, node.attrs.get_string("mode"));
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    std::vector<T> x = load<T>(in[0]);
    for (int64_t o = 0; o < g.outer; ++o) {
      T sq = 0;
      for (int64_t i = 0; i < g.n; ++i) sq += x[g.at(o, i)] * x[g.at(o, i)];
      const T norm = std::sqrt(sq + eps);
      for (int64_t i = 0; i < g.n; ++i) x[g.at(o, i)] /= norm;
    }
    store(x, out[0]);
  });
}

// y = x * (knorm + alpha / nsize * sum of x^2 over channels c - h .. c + h)^-beta with
// h = (nsize - 1) / 2, the window clipped to the channels there are.
void lrn(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[0].shape();
  const int64_t channels = s[1], plane = s[2] * s[3], nsize = node.attrs.get_int("nsize");
  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const T alpha = static_cast<T>(node.attrs.get_float("alpha")), beta = static_cast<T>(node.attrs.get_float("beta"));
    const T knorm = static_cast<T>(node.attrs.get_float("knorm"));
    const T scaled_alpha = alpha / static_cast<T>(nsize);
    const std::vector<T> x = load<T>(in[0]);
    std::vector<T> y(x.size()), window(static_cast<size_t>(plane));
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t c = 0; c < channels; ++c) {
        // The window's squares, added plane by plane (contiguous, so the loops vectorize).
        const int64_t half = (nsize - 1) / 2;
        const int64_t lo = std::max<int64_t>(0, c - half), hi = std::min(channels, c + half + 1);
        std::fill(window.begin(), window.end(), T(0));
        for (int64_t w = lo; w < hi; ++w) {
          const T* src = x.data() + (b * channels + w) * plane;
          for (int64_t p = 0; p < plane; ++p) window[p] += src[p] * src[p];
        }
        const int64_t at = (b * channels + c) * plane;
        for (int64_t p = 0; p < plane; ++p) y[at + p] = x[at + p] * std::pow(knorm + scaled_alpha * window[p], -beta);
      }
    store(y, out[0]);
  });
}

}  // namespace

void register_zoo_norm_kernels() {
  register_reference_kernel("InstanceNorm", instance_norm);
  register_reference_kernel("GroupNorm", group_norm);
  register_reference_kernel("L2Normalization", l2_normalization);
  register_reference_kernel("LRN", lrn);
}

}  // namespace ampfuse::runtime::ref
