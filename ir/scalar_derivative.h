// Derivatives of scalar recipes: the gradient of every elementwise op, derived from its
// one definition (OpDef::recipe) instead of written a second time.
//
// Forward-mode differentiation of a straight-line program: walking the instructions in
// order, each one's tangent (its derivative with respect to one chosen input) is built from
// its operands' tangents by the chain rule, in the same builder, so the result is again a
// scalar program that the interpreter, LLVM and CUDA evaluate like any recipe (and that
// fuses with the forward values it needs, recomputing them instead of loading them).
//
// Rules at the points where the math has no derivative, as MXNet's backward kernels choose:
//  - max(a, b): 1 for a where a > b, else for b (relu = max(x, 0) has gradient 0 at 0, as
//    MXNet's relu_grad(out) = out > 0); min(a, b) likewise with a < b;
//  - abs: sign(x) (0 at 0); floor, ceil, trunc, round, sign, compares, isfinite and
//    philox_bits24 and philox_bits24_at (random bits, constant in the inputs; the step only
//    picks which bits): 0;
//  - select(c, a, b): select(c, a', b') (the condition has no derivative);
//  - round_to (a cast inside a program): the tangent passes unchanged;
//  - fmod(a, b): 1 for a, -trunc(a / b) for b.
// tgamma and lgamma need the digamma function, which is no primitive: their recipes have
// no derivative and scalar_tangent throws naming the instruction.
#pragma once

#include "ir/scalar_program.h"

#include <optional>

namespace ampfuse::ir {

// Appends to `b` the derivative of value `of` with respect to input `wrt`, where the
// instructions from `first` up to `of` (already in `b`) compute `of` from b's inputs.
// nullopt when the derivative is zero by construction (floor, a compare, an input the
// value does not read), so callers can drop a gradient instead of computing zeros.
std::optional<ScalarBuilder::Val> scalar_tangent(ScalarBuilder& b, ScalarBuilder::Val first, ScalarBuilder::Val of,
                                                 int wrt);

}  // namespace ampfuse::ir
