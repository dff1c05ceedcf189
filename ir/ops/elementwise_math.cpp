// Elementwise math ops: the model zoo's functions beyond ir/ops/elementwise.cpp's set, each
// defined once by a scalar recipe over ir/scalar_program.h's primitives.
//
// Semantics are MXNet 1.9.1's (src/operator/mshadow_op.h), checked against the real MXNet
// (tests/elementwise_math_test.cpp holds values it computed):
//  - the C library functions (sin ... gammaln, log2, log10, cbrt, round) are MXNet's calls
//    of the same float/double functions: ScalarOp primitives of the same name;
//  - rint is not C's rint: MXNet picks floor when x is at least as close to it as to ceil,
//    so halves go down (rint(0.5) = 0, rint(-0.5) = -1, rint(2.5) = 2);
//  - mod is Python's: the result takes the divisor's sign; mod(x, 0) = 0 (not NaN);
//  - degrees/radians multiply by 180/pi and pi/180 computed in float from a float pi, as
//    MXNet writes 180.0f / PI;
//  - erfinv is MXNet's own (ir/special_functions.h); gamma/gammaln are tgamma/lgamma.
//
// AMP classes from MXNet 1.9.1's lists, per target (symbol_fp16.py, symbol_bf16.py):
//   fp16 neutral, bf16 fp32   sin cos arctan arcsinh arccosh degrees radians cbrt round rint
//                             hard_sigmoid _mod_scalar _rmod_scalar (FP16_FP32_FUNCS in the
//                             fp16 list, FP32_FUNCS in the bf16 one)
//   fp32                      tan arcsin arccos sinh cosh arctanh log2 log10 rcbrt gamma
//                             gammaln erfinv smooth_l1
//   widest                    _mod broadcast_mod
#include "ir/ops/elementwise_math.h"

#include "ir/ops/op_helpers.h"

#include <numbers>
#include <tuple>

namespace ampfuse::ir {

namespace {

using Val = ScalarBuilder::Val;

using Amp = ElementwiseAmp;
constexpr Amp kNeutralFp16{AmpClass::neutral, AmpClass::fp32};
constexpr Amp kFp32{AmpClass::fp32, AmpClass::fp32};
constexpr Amp kWidest{AmpClass::widest, AmpClass::widest};

// ---------------------------------------------------------------------------------------
// The math.

// MXNet's rint: floor if x - floor(x) <= ceil(x) - x, else ceil. Both differences are exact
// (x and its floor/ceil are within one binade step), so only the tie rule is MXNet's.
// NaN and +-Inf fail the compare (Inf - Inf is NaN) and return ceil(x) = x.
Val mxnet_rint(ScalarBuilder& b, Val x) {
  Val lo = b.unary(ScalarOp::floor, x), hi = b.unary(ScalarOp::ceil, x);
  return b.select(b.binary(ScalarOp::le, b.sub(x, lo), b.sub(hi, x)), lo, hi);
}

// MXNet's mod (mshadow_op::mod), a Python-style remainder: 0 when y == 0; else r = fmod(x, y)
// and, when x and y are on different sides of zero (x < 0 xor y < 0), r + y if r != 0 and
// r + 0 (which turns -0 into +0) if it is. MXNet computes fmod and that sum in double; the
// sum of two compute-type values rounds once there and once to the output, here once in the
// compute type: the same value unless that double rounding ever matters.
Val mxnet_mod(ScalarBuilder& b, Val x, Val y) {
  Val zero = b.constant(0);
  Val r = b.binary(ScalarOp::fmod, x, y);
  Val signs_differ = b.binary(ScalarOp::ne, b.binary(ScalarOp::lt, x, zero), b.binary(ScalarOp::lt, y, zero));
  Val shifted = b.add(r, b.select(b.binary(ScalarOp::ne, r, zero), y, zero));
  return b.select(b.binary(ScalarOp::eq, y, zero), zero, b.select(signs_differ, shifted, r));
}

// MXNet's float constant: (float)180 / (float)pi, or its inverse, rounded in float.
double degrees_per_radian() { return static_cast<double>(180.0f / static_cast<float>(std::numbers::pi)); }
double radians_per_degree() { return static_cast<double>(static_cast<float>(std::numbers::pi) / 180.0f); }

// ---------------------------------------------------------------------------------------
// Families.

void register_unary_math(OpRegistry& r) {
  struct Unary {
    const char* name;
    ScalarOp op;  // the primitive the op is
    Amp amp;
  };
  const Unary library_ops[] = {
      {"sin", ScalarOp::sin, kNeutralFp16},       {"cos", ScalarOp::cos, kNeutralFp16},
      {"tan", ScalarOp::tan, kFp32},          {"arcsin", ScalarOp::asin, kFp32},
      {"arccos", ScalarOp::acos, kFp32},      {"arctan", ScalarOp::atan, kNeutralFp16},
      {"sinh", ScalarOp::sinh, kFp32},        {"cosh", ScalarOp::cosh, kFp32},
      {"arcsinh", ScalarOp::asinh, kNeutralFp16}, {"arccosh", ScalarOp::acosh, kNeutralFp16},
      {"arctanh", ScalarOp::atanh, kFp32},    {"log2", ScalarOp::log2, kFp32},
      {"log10", ScalarOp::log10, kFp32},      {"cbrt", ScalarOp::cbrt, kNeutralFp16},
      {"gamma", ScalarOp::tgamma, kFp32},     {"gammaln", ScalarOp::lgamma, kFp32},
      {"erfinv", ScalarOp::erfinv, kFp32},    {"round", ScalarOp::round, kNeutralFp16},
  };
  for (const Unary& u : library_ops) {
    OpDef d = elementwise_op(u.name, {{"data"}}, u.amp);
    d.infer = infer_like_input;
    d.recipe = [op = u.op](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.unary(op, b.input(0))}; };
    r.add(std::move(d));
  }

  struct Composed {
    const char* name;
    Val (*math)(ScalarBuilder&, Val);
    Amp amp;
  };
  const Composed composed_ops[] = {
      {"rint", mxnet_rint, kNeutralFp16},
      // 1.0f / cbrt(x), in the compute type.
      {"rcbrt", [](ScalarBuilder& b, Val x) { return b.div(b.constant(1), b.unary(ScalarOp::cbrt, x)); }, kFp32},
      {"degrees", [](ScalarBuilder& b, Val x) { return b.mul(b.constant(degrees_per_radian()), x); }, kNeutralFp16},
      {"radians", [](ScalarBuilder& b, Val x) { return b.mul(b.constant(radians_per_degree()), x); }, kNeutralFp16},
  };
  for (const Composed& c : composed_ops) {
    OpDef d = elementwise_op(c.name, {{"data"}}, c.amp);
    d.infer = infer_like_input;
    d.recipe = [f = c.math](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {f(b, b.input(0))}; };
    r.add(std::move(d));
  }

  OpDef hard_sigmoid = elementwise_op("hard_sigmoid", {{"data"}}, kNeutralFp16);
  hard_sigmoid.attrs = {{"alpha", AttrKind::Float, 0.2, {}}, {"beta", AttrKind::Float, 0.5, {}}};
  hard_sigmoid.infer = infer_like_input;
  hard_sigmoid.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    // MXNet: y = alpha x + beta; y = 1 < y ? 1 : y; y = 0 > y ? 0 : y (NaN stays NaN).
    // alpha and beta are float parameters (real_t): rounded to float as MXNet stores them.
    Val alpha = b.constant(static_cast<float>(a.get_float("alpha")));
    Val beta = b.constant(static_cast<float>(a.get_float("beta")));
    Val one = b.constant(1), zero = b.constant(0);
    Val y = b.add(b.mul(alpha, b.input(0)), beta);
    y = b.select(b.binary(ScalarOp::lt, one, y), one, y);
    return {b.select(b.binary(ScalarOp::gt, zero, y), zero, y)};
  };
  r.add(std::move(hard_sigmoid));

  OpDef smooth_l1 = elementwise_op("smooth_l1", {{"data"}}, kFp32);
  smooth_l1.attrs = {{"scalar", AttrKind::Float, 1.0, {}}};
  smooth_l1.ignored_attrs = {"is_int"};
  smooth_l1.infer = infer_like_input;
  smooth_l1.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    // mshadow_op::smooth_l1_loss with sigma = scalar, in MXNet's order of operations:
    // |x| > 1/sigma^2: |x| - 0.5/sigma^2, else 0.5 x^2 sigma^2.
    Val x = b.input(0), sigma = b.constant(a.get_float("scalar")), half = b.constant(0.5);
    Val sigma2 = b.mul(sigma, sigma);
    Val inv_sigma2 = b.div(b.constant(1), sigma2);
    Val linear_tail = b.mul(half, inv_sigma2);
    Val quadratic = b.mul(b.mul(b.mul(half, x), x), sigma2);
    Val below = b.select(b.binary(ScalarOp::lt, x, b.unary(ScalarOp::neg, inv_sigma2)),
                         b.sub(b.unary(ScalarOp::neg, x), linear_tail), quadratic);
    return {b.select(b.binary(ScalarOp::gt, x, inv_sigma2), b.sub(x, linear_tail), below)};
  };
  r.add(std::move(smooth_l1));
}

void register_mod(OpRegistry& r) {
  const std::vector<InputSlot> lhs_rhs = {{"lhs"}, {"rhs"}};
  OpDef same_shape = elementwise_op("_mod", lhs_rhs, kWidest);
  same_shape.aliases = {"_Mod"};
  same_shape.infer = [lhs_rhs](InferContext& c) { c.outputs[0] = unify_same_type(c, lhs_rhs); };
  same_shape.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> {
    return {mxnet_mod(b, b.input(0), b.input(1))};
  };
  r.add(std::move(same_shape));

  OpDef broadcasting = elementwise_op("broadcast_mod", lhs_rhs, kWidest);
  broadcasting.infer = [lhs_rhs](InferContext& c) { c.outputs[0] = broadcast_inputs(c, lhs_rhs, all_inputs(c)); };
  broadcasting.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> {
    return {mxnet_mod(b, b.input(0), b.input(1))};
  };
  r.add(std::move(broadcasting));

  // x mod scalar and scalar mod x (the scalar used in the compute type, as the other
  // *_scalar ops: docs/ops.md).
  for (const auto& [name, alias, scalar_first] :
       {std::tuple{"_mod_scalar", "_ModScalar", false}, std::tuple{"_rmod_scalar", "_RModScalar", true}}) {
    const bool reversed = scalar_first;
    OpDef d = elementwise_op(name, {{"data"}}, kNeutralFp16);
    d.aliases = {alias};
    d.attrs = {{"scalar", AttrKind::Float, std::nullopt, {}}};
    d.ignored_attrs = {"is_int"};
    d.infer = infer_like_input;
    d.recipe = [reversed](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
      Val x = b.input(0), s = b.constant(a.get_float("scalar"));
      return {reversed ? mxnet_mod(b, s, x) : mxnet_mod(b, x, s)};
    };
    r.add(std::move(d));
  }
}

}  // namespace

void register_elementwise_math_ops(OpRegistry& r) {
  register_unary_math(r);
  register_mod(r);
}

}  // namespace ampfuse::ir
