// The elementwise math ops beyond the original set (docs/ops.md, "Elementwise math"):
// trigonometric and hyperbolic functions, log2/log10, cbrt/rcbrt, gamma/gammaln, erfinv,
// round/rint, degrees/radians, hard_sigmoid, smooth_l1 and MXNet's Python-style modulo.
#pragma once

#include "ir/op_registry.h"

namespace ampfuse::ir {

void register_elementwise_math_ops(OpRegistry& r);

}  // namespace ampfuse::ir
