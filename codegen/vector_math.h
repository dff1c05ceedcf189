// Transcendental functions for generated kernels.
//
// f32: our own branch-free polynomials, written as scalar IR that the loop vectorizer turns
// into vector code. Each is a Taylor series (no fitted constants: the coefficients are
// exact rationals or computed from a recurrence), evaluated without FMA. Measured against
// glibc 2.36 over every f32 input (pow: 2 million sampled pairs); tests/codegen_math_test.cpp
// re-checks a few million samples and the edge cases:
//
//   exp    <= 1 ulp     Cody-Waite reduction by ln 2, Taylor to r^7, 2^n in two steps
//   log    <= 1 ulp     m in [sqrt(1/2), sqrt(2)), log(m) = 2 atanh(f/(2+f)) to s^9
//   log1p  <= 1 ulp     log(1+x) with the rounding of 1+x corrected, (x-(u-1))/u
//   expm1  <= 2 ulp     like exp, 2^n (1+p) - 1 arranged to round once
//   tanh   <= 3 ulp     odd Taylor series to x^21 below 0.55 (coefficients from
//                       tanh' = 1 - tanh^2), expm1(2x)/(expm1(2x)+2) above
//   erf    <= 2 ulp     Taylor at 0 below 1/2; Taylor at 7 centres on [1/2, 4) whose
//                       coefficients come from Hermite polynomials (computed at start-up)
//   pow    <= 1 ulp     in f64: log2 |x| by the atanh series, 2^t by Taylor; C99 Annex F
//                       special cases (pow(x, 0) = pow(1, y) = 1 unless an input is a
//                       signalling NaN, signs for odd integer y, NaN for x < 0, y not integer)
//
// f64: calls to the C library's own functions, so f64 results equal the interpreter's.
// Special values (NaN, +-Inf, +-0, subnormals, overflow and underflow) follow the C library.
#pragma once

#include "ir/scalar_program.h"

#include <llvm/IR/IRBuilder.h>

namespace ampfuse::codegen {

// The op applied to `args` (one, or two for pow), all float or all double; `op` is one of
// ir::is_transcendental's.
llvm::Value* emit_transcendental(llvm::IRBuilder<>& b, ir::ScalarOp op, llvm::ArrayRef<llvm::Value*> args);

// `op` (one of ir::is_library_call's) applied to x, a float or double: a call per element of
// codegen/library_calls.h's library_symbol, the function the interpreter calls.
llvm::Value* emit_library_call(llvm::IRBuilder<>& b, ir::ScalarOp op, llvm::Value* x);

// Whether `op` computed in `compute` becomes a call to the C library (which keeps a loop
// scalar): the ir::is_library_call ops, and in f64 every transcendental.
bool calls_c_library(ir::ScalarOp op, ir::DType compute);

}  // namespace ampfuse::codegen
