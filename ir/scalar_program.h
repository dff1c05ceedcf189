// Scalar recipes: the math of an elementwise op, written once, lowered everywhere.
//
// An op's recipe is a function that, given its attributes, builds a small SSA program of
// primitive scalar instructions over its inputs. The reference interpreter evaluates that
// program, the LLVM emitter and the CUDA emitter translate it; nothing else may define
// an op's math. Programs compute in one "compute type" (ir::compute_type: f32, or f64 when
// an input or output is f64, or an integer type needs exactness up to 2^53), and store
// results rounded to the output dtype.
#pragma once

#include "ir/attrs.h"
#include "ir/dtype.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ampfuse::ir {

enum class ScalarOp : uint8_t {
  input,     // value = input #index
  constant,  // value = constant (rounded to the compute type)
  philox_bits24,  // value = ir::philox_bits24(seed, offset, the element's index): see below
  // unary
  philox_bits24_at,  // value = ir::philox_bits24(seed, philox_step_offset(offset, stride, a), index)
  neg, abs, sign, exp, log, log1p, expm1, sqrt, rsqrt, erf, tanh, floor, ceil, trunc,
  round,  // to the nearest integer, halves away from zero (C round)
  // unary, evaluated by calling a library function (is_library_call)
  sin, cos, tan, asin, acos, atan, sinh, cosh, asinh, acosh, atanh, log2, log10, cbrt,
  tgamma, lgamma,  // lgamma: log |gamma(x)|
  erfinv,          // MXNet's erfinv (ir/special_functions.h), evaluated in f64
  isfinite,  // 1 if finite else 0
  round_to,  // round to `dtype` and back to the compute type (a cast inside a program)
  // binary
  add, sub, mul, div, pow,
  fmod,  // C fmod: x - trunc(x / y) * y exactly, the sign of x; fmod(x, 0) = NaN
  max, min,  // NaN-propagating, see below
  eq, ne, lt, le, gt, ge,  // 1 or 0
  // ternary
  select,  // a != 0 ? b : c
};

std::string_view scalar_op_name(ScalarOp op);
// philox_bits24 and philox_bits24_at: the ops that read the element's index.
constexpr bool reads_element_index(ScalarOp op) {
  return op == ScalarOp::philox_bits24 || op == ScalarOp::philox_bits24_at;
}
int scalar_op_arity(ScalarOp op);  // 0 for input/constant
// exp, log, log1p, expm1, erf, tanh, pow: the ops that backends evaluate within a stated
// ULP bound (codegen/vector_math.h) and that cost the most to compile.
bool is_transcendental(ScalarOp op);
// sin ... lgamma, erfinv: the ops that backends evaluate by calling a library function per
// element instead of inlining code (see "library calls" below). A call compiles like one
// instruction, so the planner counts them as instructions, not as transcendental cost.
bool is_library_call(ScalarOp op);

// Semantics of the primitives, for every backend:
//  - max/min propagate NaN: max(NaN, x) = max(x, NaN) = NaN (MXNet's maximum/relu do).
//    max(-0, +0) may return either zero.
//  - compares are IEEE: any compare with NaN is false except ne.
//  - sign(NaN) = NaN, sign(+-0) = 0.
//  - round_to(dtype): f16/bf16 round-to-nearest-even (ir/lowp.h); to an integer type:
//    truncate toward zero, saturate at the type's range, NaN -> 0 (ir/int_conversion.h);
//    to bool: x != 0.
//  - exp, log, log1p, expm1, sqrt, rsqrt, erf, tanh, pow: as the C library computes them
//    in the compute type (the interpreter's reference); fused code states its ULP bound.
//  - round is C's round (halves away from zero: round(-2.5) = -3, round(-0.4) = -0); fmod is
//    C's fmod, exact. Both are exact in every backend.
//  - library calls: sin cos tan asin acos atan sinh cosh asinh acosh atanh log2 log10 cbrt
//    tgamma lgamma are the C library's functions of the compute type (sinf for f32, sin for
//    f64; lgamma through the reentrant lgamma_r). MXNet's CPU kernels call exactly these
//    functions (math_functions-inl.h), so glibc gives MXNet's bits. The interpreter and the
//    LLVM kernels call the same symbols of this process (the kernels per element, in a
//    scalarized loop: no vector version exists to be equal to), so fused CPU results are
//    bit-equal to the interpreter's. CUDA kernels call CUDA's functions of the same name,
//    within the ulp bounds codegen/cuda_emitter.h lists.
//    No composition from exp/log would do: in f32, logf(x) * (1/ln 2) differs from log2f(x)
//    on 30% of random inputs and on 4 of the 41 powers of two 2^-20..2^20, and the f32
//    polynomials of codegen/vector_math.h would add their own error to the interpreter's.
//  - erfinv is MXNet's own algorithm (cephes ndtri, in double, rounded once to the compute
//    type): ir/special_functions.h, one C++ function the interpreter and the LLVM kernels
//    both call. CUDA kernels use CUDA's erfinvf/erfinv (within their ulp bound).
//  - philox_bits24 (no operands) is the element's random bits, ir::philox_bits24(seed,
//    offset, index) (ir/philox.h): an integer below 2^24, so exact in the compute type, and
//    computed in integer arithmetic by every backend, hence bit-identical everywhere. The
//    index is the element's row-major index in the program's output shape: in a fused
//    kernel, its flat iteration index, so the planner computes a node that draws random
//    bits only under a map that keeps row-major order (engine/planning/fusion_plan.h).
//    Its derivative is 0 (the bits do not depend on the inputs).
//  - philox_bits24_at (one operand, the step) is philox_bits24 with a counter offset read at
//    run time: ir::philox_bits24(seed, ir::philox_step_offset(offset, stride, step), index).
//    The step is a value (a tensor a trainer binds afresh each step), so one compiled kernel
//    draws a new mask every step; seed, offset and stride stay in the instruction. Every
//    backend turns the step into an integer as ir::philox_step_count does (truncate; NaN
//    and negatives 0; 2^53 and beyond 2^53) and does the rest in 64-bit integers, so the
//    bits are identical everywhere. Its derivative is 0 with respect to everything.
struct ScalarInstr {
  ScalarOp op;
  int32_t a = -1, b = -1, c = -1;  // operands: earlier instruction indices
  int32_t index = 0;               // input: which input
  double value = 0;                // constant
  DType dtype = DType::f32;        // round_to
  uint64_t seed = 0, offset = 0;   // philox_bits24(_at): the generator's key and counter offset
  uint64_t stride = 0;             // philox_bits24_at: counters the offset advances per step
  friend bool operator==(const ScalarInstr&, const ScalarInstr&) = default;
};

struct ScalarProgram {
  int num_inputs = 0;
  std::vector<ScalarInstr> instrs;
  std::vector<int32_t> results;  // one per op output
  friend bool operator==(const ScalarProgram&, const ScalarProgram&) = default;
};

// Builds a ScalarProgram; each method appends an instruction and returns its index.
// Identical instructions are not deduplicated (recipes are tiny).
class ScalarBuilder {
 public:
  using Val = int32_t;
  explicit ScalarBuilder(int num_inputs);

  Val input(int i);
  Val constant(double v);
  Val unary(ScalarOp op, Val a);
  Val binary(ScalarOp op, Val a, Val b);
  Val select(Val cond, Val if_true, Val if_false);
  Val round_to(Val a, DType t);
  Val philox_bits24(uint64_t seed, uint64_t offset);
  Val philox_bits24_at(Val step, uint64_t seed, uint64_t offset, uint64_t stride);

  Val add(Val a, Val b) { return binary(ScalarOp::add, a, b); }
  Val sub(Val a, Val b) { return binary(ScalarOp::sub, a, b); }
  Val mul(Val a, Val b) { return binary(ScalarOp::mul, a, b); }
  Val div(Val a, Val b) { return binary(ScalarOp::div, a, b); }
  Val max(Val a, Val b) { return binary(ScalarOp::max, a, b); }
  Val min(Val a, Val b) { return binary(ScalarOp::min, a, b); }

  ScalarProgram finish(std::vector<Val> results);

  // The instructions appended so far (ir/scalar_derivative.h walks a recipe's part).
  const ScalarInstr& at(Val v) const { return p_.instrs.at(static_cast<size_t>(v)); }
  Val size() const { return static_cast<Val>(p_.instrs.size()); }
  int num_inputs() const { return p_.num_inputs; }

 private:
  ScalarProgram p_;
};

// A recipe: builds the op's program from its attributes. `b` starts with the op's inputs
// available as b.input(i); the recipe returns one value per output.
using ScalarRecipe = std::function<std::vector<ScalarBuilder::Val>(ScalarBuilder& b, const Attrs& attrs)>;

// Whether `p` draws random bits (philox_bits24 or philox_bits24_at), so its value depends on the element's index.
bool uses_element_index(const ScalarProgram& p);

// Human-readable listing, one instruction per line ("%3 = mul %1, %2").
std::string print_scalar_program(const ScalarProgram& p);

}  // namespace ampfuse::ir
