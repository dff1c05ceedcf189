// Reference kernels of the backward ops in ir/ops/nn_loss_backward.cpp: _backward_softmax,
// _backward_SoftmaxOutput, _backward_LayerNorm/InstanceNorm/GroupNorm,
// _backward_L2Normalization and _backward_LRN. Sums accumulate in the compute type (f32 for f32 and
// low-precision data, f64 for f64); each output rounds once.
#include "ir/error.h"
#include "ir/ops/nn_params.h"
#include "runtime/reference/kernel_io.h"
#include "runtime/reference/nn_kernel_families.h"
#include "runtime/reference/norm_groups.h"
#include "runtime/reference/reference_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ampfuse::runtime::ref {

namespace {

// The groups of a reduction along `axis` of `shape`.
Groups along_axis(const ir::Shape& shape, size_t axis) {
  const int64_t inner = extent(shape, axis + 1, shape.size());
  return {extent(shape, 0, axis) * inner, shape[axis], inner};
}

void backward_softmax(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& shape = in[1].shape();
  const Groups g =
      along_axis(shape, static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), shape.size())));
  const bool log = node.attrs.get_bool("log"), negate = node.attrs.get_bool("negate");
  with_compute_type({in[0].dtype(), in[1].dtype(), out[0].dtype()}, [&]<class T>() {
    const T t = static_cast<T>(node.attrs.get_float("temperature"));
    const std::vector<T> dy = load<T>(in[0]), y = load<T>(in[1]);
    std::vector<T> dx(dy.size());
    for (int64_t o = 0; o < g.outer; ++o) {
      T sum = 0;
      for (int64_t i = 0; i < g.n; ++i) sum += log ? dy[g.at(o, i)] : dy[g.at(o, i)] * y[g.at(o, i)];
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t k = g.at(o, i);
        const T d = (log ? dy[k] - std::exp(y[k]) * sum : y[k] * (dy[k] - sum)) / t;
        dx[k] = negate ? -d : d;
      }
    }
    store(dx, out[0]);
  });
}

// MXNet reads a label as static_cast<int>(value); a label no int holds matches no class.
int64_t class_of(double label) {
  if (!(std::fabs(label) < 2147483648.0)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(label);
}

// MXNet 1.9.1's SoftmaxOutput Backward (softmax_output-inl.h, with mshadow's SoftmaxGrad
// and SmoothSoftmaxGrad):
//   grad = out - one_hot(label)                 (smooth_alpha: - (1 - alpha) at the label,
//                                                 - alpha / (k - 1) elsewhere)
//   rows whose label is ignore_label: 0         (use_ignore)
//   grad *= grad_scale / valid_cnt, with valid_cnt per normalization: null 1, batch the
//   label count (multi_output: N), valid the labels != ignore_label (at least 1; counted
//   whether or not use_ignore is set). multi_output divides by the positions per
//   sample too, except under valid, and ignores smooth_alpha, as MXNet does.
// The scale is computed in float, as MXNet's float parameters are.
void backward_softmax_output(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Attrs& a = node.attrs;
  const ir::Shape& s = in[0].shape();
  const bool multi = a.get_bool("multi_output");
  // Rows of `classes` elements `stride` apart; row r's label is labels[r].
  int64_t rows = 0, classes = 0, stride = 1, positions = 1;
  if (multi) {
    classes = s[1];
    positions = extent(s, 2, s.size());
    rows = s[0] * positions;
    stride = positions;
  } else if (a.get_bool("preserve_shape")) {
    rows = extent(s, 0, s.size() - 1);
    classes = s.back();
  } else {
    rows = s[0];
    classes = extent(s, 1, s.size());
  }
  const auto first = [&](int64_t r) { return multi ? (r / positions) * classes * positions + r % positions : r * classes; };
  const std::vector<double> labels = load<double>(in[1]);
  const int64_t ignore = class_of(a.get_float("ignore_label"));
  const bool use_ignore = a.get_bool("use_ignore");
  const float alpha = multi ? 0.0f : static_cast<float>(a.get_float("smooth_alpha"));
  const float off_label = alpha == 0.0f ? 0.0f : alpha / static_cast<float>(classes - 1);

  int64_t valid_cnt = 1;
  const std::string& normalization = a.get_string("normalization");
  const int64_t num_labels = multi ? rows : static_cast<int64_t>(labels.size());
  if (normalization == "batch") valid_cnt = multi ? s[0] : num_labels;
  if (normalization == "valid") {
    valid_cnt = num_labels;
    for (int64_t r = 0; r < num_labels; ++r) valid_cnt -= class_of(labels[r]) == ignore;
    valid_cnt = std::max<int64_t>(valid_cnt, 1);
  }
  float scale = static_cast<float>(a.get_float("grad_scale"));
  if (multi && normalization != "valid") scale /= static_cast<float>(positions);
  scale /= static_cast<float>(valid_cnt);

  with_compute_type({in[0].dtype()}, [&]<class T>() {
    const std::vector<T> y = load<T>(in[0]);
    std::vector<T> grad(y.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t label = class_of(labels[r]);
      const bool ignored = use_ignore && label == ignore;
      for (int64_t c = 0; c < classes; ++c) {
        const int64_t k = first(r) + c * stride;
        T g = c == label ? y[k] - T(1) + T(alpha) : y[k] - T(off_label);
        grad[k] = ignored ? T(0) : g * T(scale);
      }
    }
    store(grad, out[0]);
  });
}

// dx, dgamma, dbeta of y = (x - mean) / sd * gamma[k] + beta[k] per group, sd =
// sqrt(var + eps), k = scale_of(group, element): with xhat = (x - mean) / sd and
// g = dy * gamma[k],
//   dx = (g - mean(g) - xhat * mean(g * xhat)) / sd,  dgamma[k] = sum dy * xhat,
//   dbeta[k] = sum dy.
template <class ScaleOf>
void norm_backward(const Groups& g, ScaleOf scale_of, const ir::Node& node, std::span<const Tensor> in,
                   std::span<Tensor> out) {
  with_compute_type({in[0].dtype(), in[1].dtype(), in[2].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    const std::vector<T> dy = load<T>(in[0]), x = load<T>(in[1]), gamma = load<T>(in[2]);
    std::vector<T> dx(x.size()), dgamma(gamma.size(), T(0)), dbeta(gamma.size(), T(0));
    const T n = static_cast<T>(g.n);
    for (int64_t o = 0; o < g.outer; ++o) {
      const auto [mean, var] = mean_var(x, g, o);
      const T sd = std::sqrt(var + eps);
      T sum_g = 0, sum_g_xhat = 0;
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = g.at(o, i), k = scale_of(o, i);
        const T xhat = (x[at] - mean) / sd, gi = dy[at] * gamma[k];
        sum_g += gi;
        sum_g_xhat += gi * xhat;
        dgamma[k] += dy[at] * xhat;
        dbeta[k] += dy[at];
      }
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = g.at(o, i);
        const T xhat = (x[at] - mean) / sd, gi = dy[at] * gamma[scale_of(o, i)];
        dx[at] = (gi - sum_g / n - xhat * (sum_g_xhat / n)) / sd;
      }
    }
    store(dx, out[0]);
    store(dgamma, out[1]);
    store(dbeta, out[2]);
  });
}

void backward_layer_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[1].shape();
  const Groups g = along_axis(s, static_cast<size_t>(ir::nn::normalize_axis(node.attrs.get_int("axis"), s.size())));
  norm_backward(g, [](int64_t, int64_t i) { return i; }, node, in, out);
}

void backward_instance_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[1].shape();
  const int64_t channels = s[1];
  norm_backward({s[0] * channels, extent(s, 2, s.size()), 1}, [channels](int64_t o, int64_t) { return o % channels; },
                node, in, out);
}

void backward_group_norm(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[1].shape();
  const int64_t groups = node.attrs.get_int("num_groups");
  norm_backward({s[0] * groups, s[1] / groups * extent(s, 2, s.size()), 1},
                [groups](int64_t o, int64_t) { return o % groups; }, node, in, out);
}

void backward_l2_normalization(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const Groups g = l2_normalization_groups(in[1].shape(), node.attrs.get_string("mode"));
  with_compute_type({in[0].dtype(), in[1].dtype()}, [&]<class T>() {
    const T eps = static_cast<T>(node.attrs.get_float("eps"));
    const std::vector<T> dy = load<T>(in[0]), x = load<T>(in[1]);
    std::vector<T> dx(x.size());
    for (int64_t o = 0; o < g.outer; ++o) {
      T sq = 0;
      for (int64_t i = 0; i < g.n; ++i) sq += x[g.at(o, i)] * x[g.at(o, i)];
      const T norm = std::sqrt(sq + eps);
      T dot = 0;  // sum dy * y
      for (int64_t i = 0; i < g.n; ++i) dot += dy[g.at(o, i)] * (x[g.at(o, i)] / norm);
      for (int64_t i = 0; i < g.n; ++i) {
        const int64_t at = g.at(o, i);
        dx[at] = (dy[at] - x[at] / norm * dot) / norm;
      }
    }
    store(dx, out[0]);
  });
}

// The channel window of LRN's forward kernel (zoo_norm_kernels.cpp): c - h .. c + h,
// h = (nsize - 1) / 2, clipped to the channels there are.
void backward_lrn(const ir::Node& node, std::span<const Tensor> in, std::span<Tensor> out) {
  const ir::Shape& s = in[1].shape();
  const int64_t channels = s[1], plane = s[2] * s[3], nsize = node.attrs.get_int("nsize");
  const int64_t half = (nsize - 1) / 2;
  with_compute_type({in[0].dtype(), in[1].dtype()}, [&]<class T>() {
    const T alpha = static_cast<T>(node.attrs.get_float("alpha")), beta = static_cast<T>(node.attrs.get_float("beta"));
    const T scaled_alpha = alpha / static_cast<T>(nsize), knorm = static_cast<T>(node.attrs.get_float("knorm"));
    const std::vector<T> dy = load<T>(in[0]), x = load<T>(in[1]);
    // s per element, then t = dy * x * s^(-beta - 1), then dx.
    std::vector<T> norm(x.size(), knorm), t(x.size()), dx(x.size());
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t c = 0; c < channels; ++c) {
        T* dst = norm.data() + (b * channels + c) * plane;
        for (int64_t w = std::max<int64_t>(0, c - half); w < std::min(channels, c + half + 1); ++w) {
          const T* src = x.data() + (b * channels + w) * plane;
          for (int64_t p = 0; p < plane; ++p) dst[p] += scaled_alpha * src[p] * src[p];
        }
      }
    for (size_t i = 0; i < x.size(); ++i) t[i] = dy[i] * x[i] * std::pow(norm[i], -beta - T(1));
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t at = (b * channels + c) * plane;
        for (int64_t p = 0; p < plane; ++p) dx[at + p] = dy[at + p] * std::pow(norm[at + p], -beta);
        for (int64_t w = std::max<int64_t>(0, c - half); w < std::min(channels, c + half + 1); ++w) {
          const T* window = t.data() + (b * channels + w) * plane;
          for (int64_t p = 0; p < plane; ++p) dx[at + p] -= T(2) * beta * scaled_alpha * x[at + p] * window[p];
        }
      }
    store(dx, out[0]);
  });
}

}  // namespace

void register_loss_backward_kernels() {
  register_reference_kernel("_backward_softmax", backward_softmax);
  register_reference_kernel("_backward_SoftmaxOutput", backward_softmax_output);
  register_reference_kernel("_backward_LayerNorm", backward_layer_norm);
  register_reference_kernel("_backward_InstanceNorm", backward_instance_norm);
  register_reference_kernel("_backward_GroupNorm", backward_group_norm);
  register_reference_kernel("_backward_L2Normalization", backward_l2_normalization);
  register_reference_kernel("_backward_LRN", backward_lrn);
}

}  // namespace ampfuse::runtime::ref
