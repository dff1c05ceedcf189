// Comparing an output with a reference framework's (MXNet's), as tests/zoo/zoo.py does:
// shared by the zoo fixtures' test and the MXNet-converted model's.
#pragma once

#include "runtime/tensor.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ampfuse {

// Largest |got - want| relative to the largest |want| (a non-finite difference counts as
// inf; another element count too).
inline double relative_error(const runtime::Tensor& got, const runtime::Tensor& want) {
  const std::vector<double> a = runtime::to_f64_vector(got), b = runtime::to_f64_vector(want);
  if (a.size() != b.size()) return INFINITY;
  double largest = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    largest = std::max(largest, std::fabs(b[i]));
    const double d = std::fabs(a[i] - b[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(largest, 1e-30);
}

}  // namespace ampfuse
