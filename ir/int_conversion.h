// Float -> integer conversion: the one definition every backend lowers.
//
// A Cast to an integer type, a round_to inside a scalar program (ir/scalar_program.h) and
// the store of an integer output all convert a compute-type value x (f32 or f64) this way:
//   - NaN gives 0;
//   - otherwise x is truncated toward zero (-0.5 -> 0, 2.9 -> 2, -2.9 -> -2);
//   - a truncated value below the type's range (-Inf included) gives its minimum, one above
//     it (+Inf included) its maximum; no conversion is undefined or wraps.
// A conversion to bool is x != 0 instead (NaN gives true), not this rule.
//
// This is exactly LLVM's llvm.fptosi.sat / llvm.fptoui.sat, which the CPU code generator
// emits with the width and signedness of integer_range() (codegen/dtype_lowering.cpp); the
// CUDA emitter's af_saturate takes its limits from integer_range() as well
// (codegen/cuda_emitter.cpp); the interpreter and Tensor::set_f64 call
// saturating_float_to_int. tests/numeric_rules_test.cpp checks that all of them agree on
// the edge cases (NaN, +-Inf, -0.5, 2^31, 2^63, the limits and one past them).
#pragma once

#include "ir/dtype.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace ampfuse::ir {

// The integer dtypes a float converts to by saturation: their width, signedness and range.
struct IntegerRange {
  int bits;
  bool is_signed;
  int64_t min, max;
};

// The range of i8, u8, i32 or i64. The float types and bool do not convert by saturation:
// for them `bits` is 0 (saturates_from_float is false).
constexpr IntegerRange integer_range(DType t) {
  switch (t) {
    case DType::i8: return {8, true, INT8_MIN, INT8_MAX};
    case DType::u8: return {8, false, 0, UINT8_MAX};
    case DType::i32: return {32, true, INT32_MIN, INT32_MAX};
    case DType::i64: return {64, true, INT64_MIN, INT64_MAX};
    default: return {0, false, 0, 0};
  }
}

constexpr bool saturates_from_float(DType t) { return integer_range(t).bits != 0; }

// The rule above for the C++ integer type I from F = float or double.
template <class I, class F>
I saturating_float_to_int(F x) {
  static_assert(std::is_integral_v<I> && std::is_floating_point_v<F>);
  if (x != x) return 0;
  x = std::trunc(x);
  // The limits as F: the minimum (-2^k or 0) is exact; the maximum 2^k - 1 rounds up to
  // 2^k in float (i32) and double (i64), so `x >= hi` saturates exactly the values that do
  // not fit, and every value below hi converts exactly.
  constexpr F lo = static_cast<F>(std::numeric_limits<I>::min());
  constexpr F hi = static_cast<F>(std::numeric_limits<I>::max());
  if (x <= lo) return std::numeric_limits<I>::min();
  if (x >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(x);
}

}  // namespace ampfuse::ir
