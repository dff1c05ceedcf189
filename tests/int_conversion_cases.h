// The edge cases of float -> integer conversion (ir/int_conversion.h) with their expected
// results written out, shared by the interpreter and LLVM checks (numeric_rules_test.cpp)
// and the CUDA emitter's host-compiled check (cuda_host_emulation_test.cpp).
#pragma once

#include "codegen_test_util.h"
#include "ir/int_conversion.h"

#include <cstdint>
#include <limits>
#include <vector>

namespace ampfuse::testing {

struct IntConversionCase {
  double x;  // exact in f32, so that f32 and f64 sources convert the same value
  int64_t i8, u8, i32, i64;

  int64_t expected(DType t) const {
    switch (t) {
      case DType::i8: return i8;
      case DType::u8: return u8;
      case DType::i32: return i32;
      default: return i64;
    }
  }
};

inline const std::vector<IntConversionCase>& int_conversion_cases() {
  constexpr double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  constexpr int64_t i32_min = INT32_MIN, i32_max = INT32_MAX, i64_min = INT64_MIN, i64_max = INT64_MAX;
  static const std::vector<IntConversionCase> cases = {
      {nan, 0, 0, 0, 0},
      {-nan, 0, 0, 0, 0},
      {inf, 127, 255, i32_max, i64_max},
      {-inf, -128, 0, i32_min, i64_min},
      {-0.0, 0, 0, 0, 0},
      {-0.5, 0, 0, 0, 0},  // truncation, not rounding: no -1, and no saturation below u8's 0
      {0.5, 0, 0, 0, 0},
      {0x1p-149, 0, 0, 0, 0},
      {2.75, 2, 2, 2, 2},
      {-2.75, -2, 0, -2, -2},
      {127.5, 127, 127, 127, 127},
      {128, 127, 128, 128, 128},
      {-128.5, -128, 0, -128, -128},
      {-129, -128, 0, -129, -129},
      {255.5, 127, 255, 255, 255},
      {256, 127, 255, 256, 256},
      {2147483520, 127, 255, 2147483520, 2147483520},  // the largest f32 below 2^31
      {0x1p31, 127, 255, i32_max, int64_t{1} << 31},
      {-0x1p31, -128, 0, i32_min, -(int64_t{1} << 31)},
      {-2147483904, -128, 0, i32_min, -2147483904},  // the f32 after -2^31
      {0x1p62, 127, 255, i32_max, int64_t{1} << 62},
      {0x1p63, 127, 255, i32_max, i64_max},
      {-0x1p63, -128, 0, i32_min, i64_min},
      {1e30f, 127, 255, i32_max, i64_max},
      {-1e30f, -128, 0, i32_min, i64_min},
  };
  return cases;
}

inline constexpr DType kSaturatingDTypes[] = {DType::i8, DType::u8, DType::i32, DType::i64};

// The cases' x values as a tensor of `dtype` (f32 or f64).
inline Tensor int_conversion_inputs(DType dtype) {
  const auto& cases = int_conversion_cases();
  Tensor t({dtype, {static_cast<int64_t>(cases.size())}});
  for (size_t i = 0; i < cases.size(); ++i) t.set_f64(static_cast<int64_t>(i), cases[i].x);
  return t;
}

// Element i of `got` is case i converted to `to`: either stored as integer dtype `to`, or
// (`to` rounded inside a program) stored as a float of the integer's value rounded to that float.
inline ::testing::AssertionResult converted_as_defined(const Tensor& got, DType to) {
  const auto& cases = int_conversion_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const int64_t want = cases[i].expected(to);
    const int64_t k = static_cast<int64_t>(i);
    bool ok = false;
    switch (got.dtype()) {
      case DType::i8: ok = got.data<int8_t>()[k] == want; break;
      case DType::u8: ok = got.data<uint8_t>()[k] == want; break;
      case DType::i32: ok = got.data<int32_t>()[k] == want; break;
      case DType::i64: ok = got.data<int64_t>()[k] == want; break;
      case DType::f32: ok = got.data<float>()[k] == static_cast<float>(want); break;
      case DType::f64: ok = got.data<double>()[k] == static_cast<double>(want); break;
      default: return ::testing::AssertionFailure() << "unexpected result dtype " << ir::dtype_name(got.dtype());
    }
    if (!ok)
      return ::testing::AssertionFailure() << "x = " << cases[i].x << " to " << ir::dtype_name(to) << ": got "
                                           << got.get_f64(k) << ", want " << want;
  }
  return ::testing::AssertionSuccess();
}

// Kernel specs that convert the cases' x values of dtype `from` (f32 or f64) to every
// saturating integer type: stored to an integer output (compute type f64), and rounded to
// the integer type inside a program computing in `from` (the round_to path).
struct IntConversionSpec {
  KernelSpec spec;
  DType to;
};
inline std::vector<IntConversionSpec> int_conversion_specs(DType from) {
  std::vector<IntConversionSpec> specs;
  const Shape shape = {static_cast<int64_t>(int_conversion_cases().size())};
  for (DType to : kSaturatingDTypes) {
    ScalarBuilder store(1);
    specs.push_back({dense_spec("store_int", store.finish({store.input(0)}), {from}, {to}, shape), to});
    ScalarBuilder round(1);
    const ir::ScalarProgram rounded = round.finish({round.round_to(round.input(0), to)});
    specs.push_back({dense_spec("round_to_int", rounded, {from}, {from}, shape), to});
  }
  return specs;
}

}  // namespace ampfuse::testing
