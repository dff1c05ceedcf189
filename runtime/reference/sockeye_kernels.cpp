// Sockeye 1.18's custom ops (sockeye/transformer.py, sockeye/encoder.py), value for value.
//
// Sockeye builds these tensors with NumPy in float64 or with MXNet in float32 and hands
// MXNet float32; the kernels below compute the same way and store f32 (or whatever type
// inference gave the output).
#include "ir/error.h"
#include "runtime/reference/custom_kernels.h"
#include "runtime/reference/kernel_io.h"

#include <cmath>
#include <vector>

namespace ampfuse::runtime {

namespace {

// sockeye.constants.LARGE_NEGATIVE_VALUE: the bias that removes a position from attention.
constexpr double kLargeNegative = -99999999.0;

// (1, length, depth): row p is sin(p / 10000^(2c/depth)) for c < depth/2, then cos of the
// same angles, computed in float64 as NumPy does.
void positional_encodings(const ir::Attrs& a, std::span<const Tensor>, std::span<Tensor> out) {
  const int64_t length = a.get_int("length"), depth = a.get_int("depth"), half = depth / 2;
  std::vector<double> v(static_cast<size_t>(length * depth));
  for (int64_t p = 0; p < length; ++p)
    for (int64_t c = 0; c < half; ++c) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, static_cast<double>(2 * c) / depth);
      v[p * depth + c] = std::sin(angle);
      v[p * depth + half + c] = std::cos(angle);
    }
  ref::store(v, out[0]);
}

// (1, length, length): kLargeNegative above the diagonal. Sockeye multiplies an upper-
// triangular 0/1 matrix by the negative constant, so the other entries are -0.0.
void auto_regressive_bias(const ir::Attrs& a, std::span<const Tensor>, std::span<Tensor> out) {
  const int64_t length = a.get_int("length");
  std::vector<double> v(static_cast<size_t>(length * length));
  for (int64_t i = 0; i < length; ++i)
    for (int64_t j = 0; j < length; ++j) v[i * length + j] = kLargeNegative * (j > i ? 1.0 : 0.0);
  ref::store(v, out[0]);
}

// (batch, max_length): 0 before each sequence's length, kLargeNegative from it on. MXNet's
// SequenceMask truncates a fractional length toward zero; a negative or NaN length masks
// every position (MXNet reads out of bounds there), one past max_length masks none.
void variable_length_bias(const ir::Attrs& a, std::span<const Tensor> in, std::span<Tensor> out) {
  const int64_t max_length = a.get_int("max_length");
  const Tensor& lengths = in[0];
  std::vector<float> v(static_cast<size_t>(lengths.size() * max_length));
  for (int64_t b = 0; b < lengths.size(); ++b) {
    const double len = lengths.get_f64(b);
    const int64_t keep = std::isnan(len) || len <= 0 ? 0 : static_cast<int64_t>(std::min<double>(len, max_length));
    for (int64_t t = 0; t < max_length; ++t)
      v[b * max_length + t] = t < keep ? 0.0f : static_cast<float>(kLargeNegative);
  }
  ref::store(v, out[0]);
}

}  // namespace

void register_sockeye_kernels() {
  register_custom_kernel("positional_encodings", positional_encodings);
  register_custom_kernel("auto_regressive_bias", auto_regressive_bias);
  register_custom_kernel("variable_length_bias", variable_length_bias);
}

}  // namespace ampfuse::runtime
