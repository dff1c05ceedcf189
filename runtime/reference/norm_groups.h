// The layout every normalization's reference kernel walks: the data as `outer` groups of
// `n` elements, element i of group o at (o / inner) * n * inner + i * inner + o % inner.
// A normalization over axis k of a shape is {prod(before k) * prod(after k), shape[k],
// prod(after k)}; over contiguous trailing axes, inner is 1. Private to runtime/reference/.
#pragma once

#include "ir/dtype.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampfuse::runtime::ref {

struct Groups {
  int64_t outer = 1, n = 1, inner = 1;
  int64_t at(int64_t o, int64_t i) const { return (o / inner) * n * inner + i * inner + o % inner; }
};

// L2Normalization's groups: every axis but the first (instance; 1-D data is one group),
// axis 1 (channel) or the axes after axis 1 (spatial).
inline Groups l2_normalization_groups(const ir::Shape& s, const std::string& mode) {
  int64_t after_channels = 1;
  for (size_t k = 2; k < s.size(); ++k) after_channels *= s[k];
  if (s.size() == 1) return {1, s[0], 1};
  if (mode == "channel") return {s[0] * after_channels, s[1], after_channels};
  if (mode == "spatial") return {s[0] * s[1], after_channels, 1};
  return {s[0], s[1] * after_channels, 1};
}

// Mean and biased variance of group o, two passes (the mean first, then squared
// deviations from it), as MXNet's instance and group norms compute them.
template <class T>
std::pair<T, T> mean_var(const std::vector<T>& x, const Groups& g, int64_t o) {
  T sum = 0;
  for (int64_t i = 0; i < g.n; ++i) sum += x[g.at(o, i)];
  const T mean = sum / static_cast<T>(g.n);
  T sq = 0;
  for (int64_t i = 0; i < g.n; ++i) sq += (x[g.at(o, i)] - mean) * (x[g.at(o, i)] - mean);
  return {mean, sq / static_cast<T>(g.n)};
}

}  // namespace ampfuse::runtime::ref
