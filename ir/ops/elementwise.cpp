// Elementwise ops: attribute schemas, type inference, AMP classes and the scalar recipe that
// is each op's one definition of its math (docs/design.md, "Semantics").
//
// AMP classes (fp16 / bf16), each target from its own MXNet 1.9.1 list (symbol_fp16.py,
// symbol_bf16.py; tests/amp_lists_test.cpp checks every listed op against
// tests/data/mxnet_amp_lists.txt). MXNet's bf16 list puts most "neutral" ops in FP32_FUNCS
// because its 1.9.1 CPU kernels lack bf16 versions of them; ampfuse follows it anyway, so
// that a converted bf16 graph runs op for op as MXNet's does and loads in MXNet.
//   neutral both  relu tanh abs sqrt clip, Activation (but softrelu), amp_cast
//   neutral / fp32  sigmoid softsign erf sign negative floor ceil trunc fix logical_not,
//             Dropout, Cast/cast, BlockGrad/stop_gradient, identity/_copy, zeros_like,
//             ones_like, every *_scalar op but the fp32 ones below
//   fp32 / neutral  square (bf16 has f32's range: squaring overflows no sooner than f32)
//   fp32 both exp log log1p expm1 rsqrt reciprocal _power broadcast_power _power_scalar
//             _rpower_scalar _rdiv_scalar
//   widest / fp32  broadcast_mul (MXNet's bf16 list has it in FP32_FUNCS)
//   widest both  elemwise_add/sub/mul/div, the other broadcast_* arithmetic, comparisons
//             and logical ops, _maximum _minimum, _equal etc., add_n/ElementWiseSum, where;
//             maximum/minimum, which neither list names: they are _maximum/_minimum's numpy
//             spelling, so they take its class.
//   cond_fp32 Activation act_type=softrelu; LeakyReLU act_type in {elu, selu} (both
//             targets); otherwise neutral.
// amp_cast is in neither bf16 list (commented out there), and neutral for fp16. Casts (Cast,
// amp_cast) keep their class for the policy's lists, but the AMP pass lets a cast read its
// input in whatever type that has become: where MXNet's bf16 pass puts an amp_cast to f32
// before a Cast of a bf16 value, ampfuse casts directly, which gives the same values (bf16
// to f32 is exact).
//
// Deliberate differences from MXNet 1.x, all within one rounding of the f32 result:
//  - the scalar of *_scalar ops and clip's bounds are used in the compute type (f32/f64),
//    where MXNet first rounds them to the input dtype (f16: 0.1 -> 0.0999755859375; int32:
//    0.5 -> 0);
//  - ops compute in f32 and round once to the output dtype, where MXNet's half kernels may
//    round after every step (add_n of three f16 tensors);
//  - sign(NaN) is NaN (the ScalarOp::sign contract), where MXNet gives 0.
// The math functions beyond these (trigonometric, gamma, erfinv, round/rint, mod...) are in
// ir/ops/elementwise_math.cpp.
#include "ir/ops/elementwise_math.h"
#include "ir/ops/op_helpers.h"

#include "ir/error.h"

#include <cmath>
#include <numbers>

namespace ampfuse::ir {

namespace {

using Val = ScalarBuilder::Val;
using UnaryMath = Val (*)(ScalarBuilder&, Val);
using BinaryMath = Val (*)(ScalarBuilder&, Val, Val);

// ---------------------------------------------------------------------------------------
// The math, written once and shared by every op that computes it.

Val relu(ScalarBuilder& b, Val x) { return b.max(x, b.constant(0)); }
Val sigmoid(ScalarBuilder& b, Val x) {
  // exp(-x) overflows to Inf for very negative x, and 1/Inf is the correct limit 0.
  Val one = b.constant(1);
  return b.div(one, b.add(one, b.unary(ScalarOp::exp, b.unary(ScalarOp::neg, x))));
}
Val tanh_of(ScalarBuilder& b, Val x) { return b.unary(ScalarOp::tanh, x); }
// log(1 + exp(-|x|)): never overflows, and does not lose small values to the 1.
Val log1p_exp_neg_abs(ScalarBuilder& b, Val x) {
  Val e = b.unary(ScalarOp::exp, b.unary(ScalarOp::neg, b.unary(ScalarOp::abs, x)));
  return b.unary(ScalarOp::log1p, e);
}
// softrelu(x) = log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)): exact for large |x| where
// the direct form overflows (x > 88 in f32) or rounds to 0.
Val softrelu(ScalarBuilder& b, Val x) { return b.add(relu(b, x), log1p_exp_neg_abs(b, x)); }
// log(sigmoid(x)) = -softrelu(-x) = min(x, 0) - log1p(exp(-|x|)).
Val log_sigmoid(ScalarBuilder& b, Val x) { return b.sub(b.min(x, b.constant(0)), log1p_exp_neg_abs(b, x)); }
Val softsign(ScalarBuilder& b, Val x) { return b.div(x, b.add(b.constant(1), b.unary(ScalarOp::abs, x))); }
Val mish(ScalarBuilder& b, Val x) { return b.mul(x, tanh_of(b, softrelu(b, x))); }
Val gelu_erf(ScalarBuilder& b, Val x) {
  Val phi = b.add(b.constant(1), b.unary(ScalarOp::erf, b.div(x, b.constant(std::numbers::sqrt2))));
  return b.mul(b.mul(b.constant(0.5), x), phi);
}
Val gelu_tanh(ScalarBuilder& b, Val x) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Val cube = b.mul(b.mul(x, x), x);
  Val inner = b.mul(b.constant(std::sqrt(2 / std::numbers::pi)), b.add(x, b.mul(b.constant(0.044715), cube)));
  return b.mul(b.mul(b.constant(0.5), x), b.add(b.constant(1), tanh_of(b, inner)));
}
// x > 0 ? x : slope * x. NaN fails the compare and gives slope * NaN = NaN.
Val leaky(ScalarBuilder& b, Val x, Val slope) { return b.select(b.binary(ScalarOp::gt, x, b.constant(0)), x, b.mul(slope, x)); }
Val elu(ScalarBuilder& b, Val x, Val alpha) {
  return b.select(b.binary(ScalarOp::gt, x, b.constant(0)), x, b.mul(alpha, b.unary(ScalarOp::expm1, x)));
}
// MXNet's SELU constants (mshadow_op.h).
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluLambda = 1.0507009873554804934193349852946;
Val selu(ScalarBuilder& b, Val x) { return b.mul(b.constant(kSeluLambda), elu(b, x, b.constant(kSeluAlpha))); }

Val truthy(ScalarBuilder& b, Val x) { return b.binary(ScalarOp::ne, x, b.constant(0)); }

// ---------------------------------------------------------------------------------------
// OpDef construction.

using Amp = ElementwiseAmp;
constexpr Amp kNeutral{AmpClass::neutral, AmpClass::neutral};
constexpr Amp kFp32{AmpClass::fp32, AmpClass::fp32};
constexpr Amp kWidest{AmpClass::widest, AmpClass::widest};
// Neutral for fp16, fp32 for bf16 (MXNet's bf16 FP32_FUNCS).
constexpr Amp kFp32InBf16{AmpClass::neutral, AmpClass::fp32};

// Functions, not globals: the registry may be built during another file's static init.
std::vector<InputSlot> data_slot() { return {{"data"}}; }
std::vector<InputSlot> lhs_rhs_slots() { return {{"lhs"}, {"rhs"}}; }

AttrSpec required_attr(std::string name, AttrKind kind) { return {std::move(name), kind, std::nullopt, {}}; }
AttrSpec attr_with_default(std::string name, AttrKind kind, AttrValue v, std::vector<std::string> choices = {}) {
  return {std::move(name), kind, std::move(v), std::move(choices)};
}

ScalarRecipe unary_recipe(UnaryMath f) {
  return [f](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {f(b, b.input(0))}; };
}
ScalarRecipe binary_recipe(BinaryMath f) {
  return [f](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {f(b, b.input(0), b.input(1))}; };
}
ScalarRecipe identity_recipe() {
  return [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.input(0)}; };
}

InferFn infer_same_shape(std::vector<InputSlot> slots) {
  return [slots](InferContext& c) { c.outputs[0] = unify_same_type(c, slots); };
}
InferFn infer_broadcast(std::vector<InputSlot> slots) {
  return [slots](InferContext& c) { c.outputs[0] = broadcast_inputs(c, slots, all_inputs(c)); };
}

// ---------------------------------------------------------------------------------------
// Families.

void register_unary(OpRegistry& r) {
  struct Unary {
    const char* name;
    UnaryMath math;
    Amp amp;
    const char* alias = nullptr;  // MXNet's second name for the op
  };
  const Unary ops[] = {
      {"relu", relu, kNeutral},
      {"sigmoid", sigmoid, kFp32InBf16},
      {"tanh", tanh_of, kNeutral},
      {"softsign", softsign, kFp32InBf16},
      {"erf", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::erf, x); }, kFp32InBf16},
      {"abs", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::abs, x); }, kNeutral},
      {"sign", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::sign, x); }, kFp32InBf16},
      {"sqrt", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::sqrt, x); }, kNeutral},
      {"negative", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::neg, x); }, kFp32InBf16},
      {"floor", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::floor, x); }, kFp32InBf16},
      {"ceil", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::ceil, x); }, kFp32InBf16},
      {"trunc", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::trunc, x); }, kFp32InBf16},
      {"fix", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::trunc, x); }, kFp32InBf16},
      {"logical_not", [](ScalarBuilder& b, Val x) { return b.binary(ScalarOp::eq, x, b.constant(0)); }, kFp32InBf16},
      {"exp", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::exp, x); }, kFp32},
      {"log", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::log, x); }, kFp32},
      {"log1p", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::log1p, x); }, kFp32},
      {"expm1", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::expm1, x); }, kFp32},
      {"rsqrt", [](ScalarBuilder& b, Val x) { return b.unary(ScalarOp::rsqrt, x); }, kFp32},
      {"reciprocal", [](ScalarBuilder& b, Val x) { return b.div(b.constant(1), x); }, kFp32},
      {"square", [](ScalarBuilder& b, Val x) { return b.mul(x, x); }, {AmpClass::fp32, AmpClass::neutral}},
      {"identity", [](ScalarBuilder&, Val x) { return x; }, kFp32InBf16, "_copy"},
      {"BlockGrad", [](ScalarBuilder&, Val x) { return x; }, kFp32InBf16, "stop_gradient"},
  };
  for (const Unary& u : ops) {
    OpDef d = elementwise_op(u.name, data_slot(), u.amp);
    d.infer = infer_like_input;
    d.recipe = unary_recipe(u.math);
    if (u.alias) d.aliases = {u.alias};
    if (d.name == "BlockGrad") d.gradient = no_gradient;  // the identity that stops gradients
    r.add(std::move(d));
  }

  // zeros_like/ones_like take only the input's type: the recipe never loads the input.
  // MXNet 1.9.1 accepts a `dtype` attribute (GluonCV's CenterNet writes dtype='int64') and
  // ignores it: the output keeps the input's dtype (checked with mx.sym.zeros_like).
  for (auto [name, value] : {std::pair{"zeros_like", 0.0}, std::pair{"ones_like", 1.0}}) {
    OpDef d = elementwise_op(name, data_slot(), kFp32InBf16);
    d.ignored_attrs = {"dtype"};
    d.infer = infer_like_input;
    // An init-capture, not [value]: clang before 16 cannot capture a structured binding
    // (the libFuzzer build, fuzz/CMakeLists.txt, compiles ir/ with Debian's clang 14).
    d.recipe = [c = value](ScalarBuilder& b, const Attrs&) -> std::vector<Val> { return {b.constant(c)}; };
    r.add(std::move(d));
  }

  OpDef clip = elementwise_op("clip", data_slot(), kNeutral);
  clip.attrs = {required_attr("a_min", AttrKind::Float), required_attr("a_max", AttrKind::Float)};
  clip.infer = infer_like_input;
  clip.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    // MXNet's order of tests: a NaN input and NaN bounds fail both compares and pass x through.
    Val x = b.input(0), lo = b.constant(a.get_float("a_min")), hi = b.constant(a.get_float("a_max"));
    return {b.select(b.binary(ScalarOp::gt, x, hi), hi, b.select(b.binary(ScalarOp::lt, x, lo), lo, x))};
  };
  r.add(std::move(clip));
}

struct Binary {
  const char* name;
  BinaryMath math;
  Amp amp;
  const char* alias = nullptr;  // MXNet's second name for the op
};

Val add(ScalarBuilder& b, Val x, Val y) { return b.add(x, y); }
Val sub(ScalarBuilder& b, Val x, Val y) { return b.sub(x, y); }
Val mul(ScalarBuilder& b, Val x, Val y) { return b.mul(x, y); }
Val div(ScalarBuilder& b, Val x, Val y) { return b.div(x, y); }
Val power(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::pow, x, y); }
Val maximum(ScalarBuilder& b, Val x, Val y) { return b.max(x, y); }
Val minimum(ScalarBuilder& b, Val x, Val y) { return b.min(x, y); }
Val equal(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::eq, x, y); }
Val not_equal(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::ne, x, y); }
Val greater(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::gt, x, y); }
Val greater_equal(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::ge, x, y); }
Val lesser(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::lt, x, y); }
Val lesser_equal(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::le, x, y); }
// Any nonzero value, NaN included, is true (C++ truthiness, as MXNet's kernels).
Val logical_and(ScalarBuilder& b, Val x, Val y) { return b.mul(truthy(b, x), truthy(b, y)); }
Val logical_or(ScalarBuilder& b, Val x, Val y) { return b.max(truthy(b, x), truthy(b, y)); }
Val logical_xor(ScalarBuilder& b, Val x, Val y) { return b.binary(ScalarOp::ne, truthy(b, x), truthy(b, y)); }

void register_binary(OpRegistry& r) {
  // Same shapes required (MXNet's elemwise_* and _* binary ops).
  const Binary same_shape[] = {
      {"elemwise_add", add, kWidest},
      {"elemwise_sub", sub, kWidest},
      {"elemwise_mul", mul, kWidest},
      {"elemwise_div", div, kWidest},
      {"_power", power, kFp32},
      {"_equal", equal, kWidest},
      {"_not_equal", not_equal, kWidest},
      {"_greater", greater, kWidest},
      {"_greater_equal", greater_equal, kWidest},
      {"_lesser", lesser, kWidest},
      {"_lesser_equal", lesser_equal, kWidest},
      {"_logical_and", logical_and, kWidest},
      {"_logical_or", logical_or, kWidest},
      {"_logical_xor", logical_xor, kWidest},
  };
  for (const Binary& op : same_shape) {
    OpDef d = elementwise_op(op.name, lhs_rhs_slots(), op.amp);
    d.infer = infer_same_shape(lhs_rhs_slots());
    d.recipe = binary_recipe(op.math);
    r.add(std::move(d));
  }
  // NumPy broadcasting.
  const Binary broadcasting[] = {
      {"broadcast_add", add, kWidest, "broadcast_plus"},
      {"broadcast_sub", sub, kWidest, "broadcast_minus"},
      {"broadcast_mul", mul, {AmpClass::widest, AmpClass::fp32}},
      {"broadcast_div", div, kWidest},
      {"broadcast_power", power, kFp32},
      {"broadcast_maximum", maximum, kWidest},
      {"broadcast_minimum", minimum, kWidest},
      {"_maximum", maximum, kWidest},
      {"_minimum", minimum, kWidest},
      {"maximum", maximum, kWidest},
      {"minimum", minimum, kWidest},
      {"broadcast_equal", equal, kWidest},
      {"broadcast_not_equal", not_equal, kWidest},
      {"broadcast_greater", greater, kWidest},
      {"broadcast_greater_equal", greater_equal, kWidest},
      {"broadcast_lesser", lesser, kWidest},
      {"broadcast_lesser_equal", lesser_equal, kWidest},
      {"broadcast_logical_and", logical_and, kWidest},
      {"broadcast_logical_or", logical_or, kWidest},
      {"broadcast_logical_xor", logical_xor, kWidest},
  };
  for (const Binary& op : broadcasting) {
    OpDef d = elementwise_op(op.name, lhs_rhs_slots(), op.amp);
    if (op.alias) d.aliases = {op.alias};
    d.infer = infer_broadcast(lhs_rhs_slots());
    d.recipe = binary_recipe(op.math);
    r.add(std::move(d));
  }
}

void register_scalar_ops(OpRegistry& r) {
  // f(x, s) with s the `scalar` attribute; the r* forms swap the operands.
  const Binary ops[] = {
      {"_plus_scalar", add, kFp32InBf16},
      {"_minus_scalar", sub, kFp32InBf16},
      {"_rminus_scalar", [](ScalarBuilder& b, Val x, Val s) { return b.sub(s, x); }, kFp32InBf16},
      {"_mul_scalar", mul, kFp32InBf16},
      {"_div_scalar", div, kFp32InBf16},
      {"_rdiv_scalar", [](ScalarBuilder& b, Val x, Val s) { return b.div(s, x); }, kFp32},
      {"_power_scalar", power, kFp32},
      {"_rpower_scalar", [](ScalarBuilder& b, Val x, Val s) { return power(b, s, x); }, kFp32},
      {"_maximum_scalar", maximum, kFp32InBf16},
      {"_minimum_scalar", minimum, kFp32InBf16},
      {"_equal_scalar", equal, kFp32InBf16},
      {"_not_equal_scalar", not_equal, kFp32InBf16},
      {"_greater_scalar", greater, kFp32InBf16},
      {"_greater_equal_scalar", greater_equal, kFp32InBf16},
      {"_lesser_scalar", lesser, kFp32InBf16},
      {"_lesser_equal_scalar", lesser_equal, kFp32InBf16},
      {"_logical_and_scalar", logical_and, kFp32InBf16},
      {"_logical_or_scalar", logical_or, kFp32InBf16},
      {"_logical_xor_scalar", logical_xor, kFp32InBf16},
  };
  for (const Binary& op : ops) {
    OpDef d = elementwise_op(op.name, data_slot(), op.amp);
    d.attrs = {required_attr("scalar", AttrKind::Float)};
    // MXNet 2.0 writes is_int (whether `scalar` was a Python int); the value is the same.
    d.ignored_attrs = {"is_int"};
    d.infer = infer_like_input;
    d.recipe = [f = op.math](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
      return {f(b, b.input(0), b.constant(a.get_float("scalar")))};
    };
    r.add(std::move(d));
  }
}

void register_activations(OpRegistry& r) {
  OpDef act = elementwise_op("Activation", data_slot(), {AmpClass::cond_fp32, AmpClass::cond_fp32});
  act.attrs = {{"act_type", AttrKind::String, std::nullopt,
                {"relu", "sigmoid", "tanh", "softrelu", "softsign", "log_sigmoid", "mish"}}};
  act.cond_fp32_fp16 = act.cond_fp32_bf16 = CondFp32{"act_type", {"softrelu"}, AmpClass::neutral};
  act.infer = infer_like_input;
  act.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    const std::string& t = a.get_string("act_type");
    Val x = b.input(0);
    if (t == "relu") return {relu(b, x)};
    if (t == "sigmoid") return {sigmoid(b, x)};
    if (t == "tanh") return {tanh_of(b, x)};
    if (t == "softrelu") return {softrelu(b, x)};
    if (t == "softsign") return {softsign(b, x)};
    if (t == "log_sigmoid") return {log_sigmoid(b, x)};
    if (t == "mish") return {mish(b, x)};
    fail("Activation: unknown act_type '{}'", t);
  };
  r.add(std::move(act));

  OpDef leaky_relu = elementwise_op("LeakyReLU", {{"data"}, {"gamma", SlotRole::param}},
                                    {AmpClass::cond_fp32, AmpClass::cond_fp32});
  // gelu is MXNet 1.x's spelling of gelu_erf.
  leaky_relu.attrs = {
      attr_with_default("act_type", AttrKind::String, std::string("leaky"),
                        {"leaky", "prelu", "rrelu", "elu", "selu", "gelu", "gelu_erf", "gelu_tanh"}),
      attr_with_default("slope", AttrKind::Float, 0.25),
      attr_with_default("lower_bound", AttrKind::Float, 0.125),
      attr_with_default("upper_bound", AttrKind::Float, 0.334),
  };
  leaky_relu.cond_fp32_fp16 = leaky_relu.cond_fp32_bf16 = CondFp32{"act_type", {"elu", "selu"}, AmpClass::neutral};
  leaky_relu.num_inputs = [](const Attrs& a) { return a.get_string("act_type") == "prelu" ? 2 : 1; };
  leaky_relu.infer = [](InferContext& c) {
    const TensorType& data = c.in(0);
    c.outputs[0] = data;
    if (c.attrs.get_string("act_type") != "prelu") return;
    if (c.inputs.size() < 2) fail("act_type 'prelu' needs input 1 (gamma)");
    if (!c.inputs[1]) {
      // MXNet learns one slope per channel (axis 1), or per element of a 1-D input.
      if (data.shape.empty()) fail("act_type 'prelu' needs data of rank >= 1 to infer gamma, not a scalar");
      c.inputs[1] = TensorType{data.dtype, {data.shape.size() >= 2 ? data.shape[1] : data.shape[0]}};
    }
    const TensorType& gamma = *c.inputs[1];
    if (gamma.dtype != data.dtype)
      fail("input 0 (data) is {} but input 1 (gamma) is {} (ops do not mix dtypes; insert a Cast)",
           dtype_name(data.dtype), dtype_name(gamma.dtype));
    prelu_gamma_view(gamma.shape, data.shape);  // throws when gamma does not fit
  };
  leaky_relu.broadcast_view = [](const Attrs& a, size_t i, const Shape& in, const Shape& out) {
    return i == 1 && a.get_string("act_type") == "prelu" ? prelu_gamma_view(in, out) : in;
  };
  leaky_relu.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    const std::string& t = a.get_string("act_type");
    Val x = b.input(0);
    if (t == "leaky") return {leaky(b, x, b.constant(a.get_float("slope")))};
    if (t == "prelu") return {leaky(b, x, b.input(1))};
    if (t == "rrelu") {
      // Inference uses the middle of the training range, computed in float as MXNet does.
      const float lo = static_cast<float>(a.get_float("lower_bound")), hi = static_cast<float>(a.get_float("upper_bound"));
      return {leaky(b, x, b.constant((lo + hi) / 2.0f))};
    }
    if (t == "elu") return {elu(b, x, b.constant(a.get_float("slope")))};
    if (t == "selu") return {selu(b, x)};
    if (t == "gelu" || t == "gelu_erf") return {gelu_erf(b, x)};
    if (t == "gelu_tanh") return {gelu_tanh(b, x)};
    fail("LeakyReLU: unknown act_type '{}'", t);
  };
  r.add(std::move(leaky_relu));
}

// A cast whose input nothing typed (a weight with open extents in its hint) takes its shape
// from the output a consumer determined, in f32, what MXNet's variables hold unless their
// __dtype__ says otherwise (the importer checks that hint against the result). True: the
// input is known now.
bool input_from_consumers(InferContext& c) {
  if (c.inputs[0]) return true;
  if (c.outputs_from_consumers.empty()) return false;
  c.inputs[0] = TensorType{DType::f32, c.outputs_from_consumers[0].shape};
  return true;
}

void register_casts(OpRegistry& r) {
  OpDef cast = elementwise_op("Cast", data_slot(), kFp32InBf16);
  cast.attrs = {required_attr("dtype", AttrKind::DType)};
  cast.infer = [](InferContext& c) {
    if (!input_from_consumers(c)) return;  // unknown for now: a consumer may determine it
    c.outputs[0] = TensorType{c.attrs.get_dtype("dtype"), c.in(0).shape};
  };
  cast.recipe = identity_recipe();  // the store to the output dtype is the conversion
  cast.is_cast = true;
  cast.gradient = cast_back_gradient;
  cast.aliases = {"cast"};
  r.add(std::move(cast));

  OpDef amp_cast = elementwise_op("amp_cast", data_slot(), kNeutral);
  amp_cast.attrs = {required_attr("dtype", AttrKind::DType)};
  amp_cast.infer = [](InferContext& c) {
    const DType to = c.attrs.get_dtype("dtype");
    if (!is_float(to)) fail("amp_cast casts between float types only, not to {} (use Cast)", dtype_name(to));
    if (!input_from_consumers(c)) return;  // unknown for now: a consumer may determine it
    const TensorType& in = c.in(0);
    // MXNet retypes only f32/f16/bf16 data; anything else (f64, integers) passes unchanged.
    const bool retype = in.dtype == DType::f32 || is_lowp(in.dtype);
    c.outputs[0] = TensorType{retype ? to : in.dtype, in.shape};
  };
  amp_cast.recipe = identity_recipe();
  amp_cast.is_cast = true;
  amp_cast.gradient = cast_back_gradient;
  r.add(std::move(amp_cast));
}

void register_misc(OpRegistry& r) {
  const std::vector<InputSlot> where_slots = {{"condition"}, {"x"}, {"y"}};
  OpDef where = elementwise_op("where", where_slots, kWidest);
  where.infer = [where_slots](InferContext& c) {
    // The condition may have any dtype; x and y share one, which the output takes.
    TensorType out = broadcast_inputs(c, where_slots, {1, 2});
    const Shape cond = where_condition_view(c.in(0).shape, out.shape);
    try {
      out.shape = broadcast_shape(cond, out.shape);
    } catch (const Error&) {
      fail("input 0 (condition) has shape {}, which does not broadcast with x and y's {}",
           shape_str(c.in(0).shape), shape_str(out.shape));
    }
    c.outputs[0] = out;
  };
  where.broadcast_view = [](const Attrs&, size_t i, const Shape& in, const Shape& out) {
    return i == 0 ? where_condition_view(in, out) : in;
  };
  where.recipe = [](ScalarBuilder& b, const Attrs&) -> std::vector<Val> {
    return {b.select(b.input(0), b.input(1), b.input(2))};
  };
  r.add(std::move(where));

  OpDef add_n = elementwise_op("add_n", {{"args"}}, kWidest);
  add_n.attrs = {required_attr("num_args", AttrKind::Int)};
  add_n.num_inputs = [](const Attrs& a) { return static_cast<int>(a.get_int("num_args")); };
  add_n.infer = [slots = add_n.inputs](InferContext& c) {
    if (c.attrs.get_int("num_args") < 1) fail("attribute 'num_args' must be at least 1, not {}", c.attrs.get_int("num_args"));
    c.outputs[0] = unify_same_type(c, slots);
  };
  add_n.recipe = [](ScalarBuilder& b, const Attrs& a) -> std::vector<Val> {
    const int n = static_cast<int>(a.get_int("num_args"));
    if (n < 1) fail("add_n: attribute 'num_args' must be at least 1, not {}", n);
    Val sum = b.input(0);  // left to right, as MXNet sums
    for (int i = 1; i < n; ++i) sum = b.add(sum, b.input(i));
    return {sum};
  };
  add_n.aliases = {"ElementWiseSum"};
  r.add(std::move(add_n));

  OpDef dropout = elementwise_op("Dropout", data_slot(), kFp32InBf16);
  dropout.attrs = {
      attr_with_default("p", AttrKind::Float, 0.5),
      attr_with_default("mode", AttrKind::String, std::string("training"), {"training", "always"}),
      attr_with_default("axes", AttrKind::IntList, std::vector<int64_t>{}),
      attr_with_default("cudnn_off", AttrKind::Bool, false),
  };
  dropout.infer = [](InferContext& c) {
    const double p = c.attrs.get_float("p");
    if (!(p >= 0 && p <= 1)) fail("attribute 'p' must be in [0, 1], not {}", p);
    // mode=always drops at inference too: random, so not a function ampfuse can run.
    if (c.attrs.get_string("mode") == "always" && p != 0)
      fail("mode 'always' drops elements at inference as well (p={}); ampfuse runs inference graphs only", p);
    infer_like_input(c);
  };
  dropout.recipe = identity_recipe();
  r.add(std::move(dropout));
}

}  // namespace

Shape prelu_gamma_view(const Shape& gamma, const Shape& data) {
  // MXNet's rule (leaky_relu-inl.h, expand_shape): gamma's extents go, innermost first, to
  // data axes 1 and 0 where they match (or are 1); every other axis gets 1.
  Shape view(data.size(), 1);
  int64_t g = static_cast<int64_t>(gamma.size()) - 1;
  for (int64_t d = static_cast<int64_t>(data.size()) - 1; d >= 0; --d) {
    if (g >= 0 && d <= 1 && (gamma[g] == data[d] || gamma[g] == 1)) view[d] = gamma[g--];
  }
  if (g != -1)
    fail("input 1 (gamma) has shape {}, which does not fit data {}: prelu takes one slope per channel (axis 1)",
         shape_str(gamma), shape_str(data));
  return view;
}

Shape where_condition_view(const Shape& cond, const Shape& out) {
  // MXNet's legacy where: a 1-D condition selects whole rows (axis 0) of x and y.
  if (cond.size() == 1 && out.size() >= 2 && cond[0] == out[0]) {
    Shape view(out.size(), 1);
    view[0] = cond[0];
    return view;
  }
  return cond;
}

void register_elementwise_ops(OpRegistry& r) {
  register_unary(r);
  register_binary(r);
  register_scalar_ops(r);
  register_activations(r);
  register_casts(r);
  register_misc(r);
  register_elementwise_math_ops(r);
}

}  // namespace ampfuse::ir
