// What the tests over the shared MXNet models (models/) have in common.
#pragma once

#include "runtime/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace ampfuse::testing {

// AMPFUSE_MODELS_DIR from the environment, else the repository's models/.
inline std::string models_dir() {
  if (const char* env = std::getenv("AMPFUSE_MODELS_DIR")) return env;
  return AMPFUSE_MODELS_DIR;
}

// Largest |got - want| relative to the largest finite |want| (NaN against a number: inf).
inline double relative_error(const runtime::Tensor& got, const runtime::Tensor& want) {
  const std::vector<double> a = runtime::to_f64_vector(got), b = runtime::to_f64_vector(want);
  double largest = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(b[i])) largest = std::max(largest, std::fabs(b[i]));
    const double d = std::fabs(a[i] - b[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst / std::max(largest, 1e-30);
}

}  // namespace ampfuse::testing
