// Elementwise ops (ir/ops/elementwise.cpp) and the scalar-program evaluator
// (runtime/scalar_eval.cpp): hand-computed values, rounding bits, broadcasting and errors.
#include "ir/error.h"
#include "ir/lowp.h"
#include "ir/op_registry.h"
#include "ir/ops/op_helpers.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace ampfuse {
namespace {

using ir::DType;
using ir::ScalarBuilder;
using ir::ScalarOp;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor tensor(DType d, Shape s, const std::vector<double>& v) {
  Tensor t(TensorType{d, std::move(s)});
  EXPECT_EQ(static_cast<size_t>(t.size()), v.size()) << "test data does not fit the shape";
  for (size_t i = 0; i < v.size(); ++i) t.set_f64(static_cast<int64_t>(i), v[i]);
  return t;
}
Tensor f32(Shape s, const std::vector<double>& v) { return tensor(DType::f32, std::move(s), v); }

// Exact comparison in which NaN equals NaN.
void expect_values(const Tensor& t, const std::vector<double>& want) {
  const std::vector<double> got = runtime::to_f64_vector(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " is " << got[i];
    else EXPECT_EQ(got[i], want[i]) << "element " << i;
  }
}
void expect_near(const Tensor& t, const std::vector<double>& want, double tol) {
  const std::vector<double> got = runtime::to_f64_vector(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}
std::vector<uint16_t> bits16(const Tensor& t) {
  return std::vector<uint16_t>(t.data<uint16_t>(), t.data<uint16_t>() + t.size());
}

// Runs `op` the way the interpreter does: attributes from MXNet strings, the op's type
// inference, its broadcast views, its recipe, the evaluator.
std::vector<Tensor> run_op_all(const std::string& op, const std::vector<Tensor>& inputs,
                               const std::map<std::string, std::string>& raw = {}) {
  const ir::OpDef& def = ir::OpRegistry::global().resolve(op);
  const ir::Attrs attrs = ir::parse_attrs(def, raw);
  ir::InferContext c{attrs, {}, {}};
  for (const Tensor& t : inputs) c.inputs.push_back(t.type());
  c.outputs.resize(def.output_count(attrs));
  def.infer(c);
  std::vector<TensorType> out_types;
  for (const auto& o : c.outputs) out_types.push_back(o.value());
  std::vector<Tensor> viewed;
  for (size_t i = 0; i < inputs.size(); ++i)
    viewed.push_back(inputs[i].reshaped(ir::broadcast_view_of(def, attrs, i, inputs[i].shape(), out_types[0].shape)));
  std::vector<const Tensor*> ptrs;
  for (const Tensor& t : viewed) ptrs.push_back(&t);
  ScalarBuilder b(def.input_count(attrs));
  const auto results = def.recipe(b, attrs);
  return runtime::eval_scalar_program(b.finish(results), ptrs, out_types);
}
Tensor run_op(const std::string& op, const std::vector<Tensor>& inputs,
              const std::map<std::string, std::string>& raw = {}) {
  return run_op_all(op, inputs, raw).at(0);
}

// Type inference alone, for error cases.
TensorType infer(const std::string& op, std::vector<std::optional<TensorType>> inputs,
                 const std::map<std::string, std::string>& raw = {}) {
  const ir::OpDef& def = ir::OpRegistry::global().resolve(op);
  const ir::Attrs attrs = ir::parse_attrs(def, raw);
  ir::InferContext c{attrs, std::move(inputs), {}};
  c.outputs.resize(1);
  def.infer(c);
  return c.outputs[0].value();
}

// The message of the Error that fn throws ("" if none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// ---------------------------------------------------------------------------------------
// ScalarEval: programs built by hand.

TEST(ScalarEval, AddBroadcastsALowerRankInput) {
  ScalarBuilder b(2);
  auto prog = b.finish({b.add(b.input(0), b.input(1))});
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6}), y = f32({3}, {10, 20, 30});
  auto out = runtime::eval_scalar_program(prog, {&x, &y}, {{DType::f32, {2, 3}}});
  expect_values(out.at(0), {11, 22, 33, 14, 25, 36});
}

TEST(ScalarEval, BothInputsBroadcast) {
  ScalarBuilder b(2);
  auto prog = b.finish({b.mul(b.input(0), b.input(1))});
  Tensor col = f32({2, 1}, {1, 2}), row = f32({1, 3}, {3, 5, 7});
  auto out = runtime::eval_scalar_program(prog, {&col, &row}, {{DType::f32, {2, 3}}});
  expect_values(out.at(0), {3, 5, 7, 6, 10, 14});
}

TEST(ScalarEval, RankZeroAndSingleElementInputs) {
  ScalarBuilder b(2);
  auto prog = b.finish({b.sub(b.input(0), b.input(1))});
  Tensor s = f32({}, {10}), one = f32({1, 1}, {4});
  auto scalar = runtime::eval_scalar_program(prog, {&s, &s}, {{DType::f32, {}}});
  expect_values(scalar.at(0), {0});
  EXPECT_EQ(scalar.at(0).shape(), Shape{});
  Tensor v = f32({3}, {1, 2, 3});
  auto out = runtime::eval_scalar_program(prog, {&v, &one}, {{DType::f32, {1, 3}}});
  expect_values(out.at(0), {-3, -2, -1});
}

TEST(ScalarEval, ZeroSizeOutputs) {
  ScalarBuilder b(2);
  auto prog = b.finish({b.add(b.input(0), b.input(1))});
  Tensor empty = f32({0, 3}, {}), row = f32({3}, {1, 2, 3});
  auto out = runtime::eval_scalar_program(prog, {&empty, &row}, {{DType::f16, {0, 3}}});
  EXPECT_EQ(out.at(0).type(), (TensorType{DType::f16, {0, 3}}));
  EXPECT_EQ(out.at(0).size(), 0);
  // An extent-1 input broadcasts to extent 0, like numpy.
  Tensor one = f32({1}, {5});
  auto out2 = runtime::eval_scalar_program(prog, {&one, &empty}, {{DType::f32, {0, 3}}});
  EXPECT_EQ(out2.at(0).size(), 0);
}

TEST(ScalarEval, StridedBroadcastAcrossBlocks) {
  // [3,700,2] + [700,1]: neither flat nor one element, and 4200 elements span 5 blocks.
  const int64_t n0 = 3, n1 = 700, n2 = 2;
  std::vector<double> xv, yv;
  for (int64_t i = 0; i < n0 * n1 * n2; ++i) xv.push_back(static_cast<double>(i));
  for (int64_t j = 0; j < n1; ++j) yv.push_back(static_cast<double>(j) * 10000);
  Tensor x = f32({n0, n1, n2}, xv), y = f32({n1, 1}, yv);
  ScalarBuilder b(2);
  auto prog = b.finish({b.add(b.input(0), b.input(1))});
  auto out = runtime::eval_scalar_program(prog, {&x, &y}, {{DType::f32, {n0, n1, n2}}});
  const float* o = out.at(0).data<float>();
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      for (int64_t k = 0; k < n2; ++k) {
        const int64_t flat = (i * n1 + j) * n2 + k;
        ASSERT_EQ(o[flat], static_cast<float>(flat + j * 10000)) << i << "," << j << "," << k;
      }
}

TEST(ScalarEval, MaxMinPropagateNaNFromEitherSide) {
  ScalarBuilder b(2);
  auto x = b.input(0), y = b.input(1);
  auto prog = b.finish({b.max(x, y), b.min(x, y)});
  Tensor l = f32({4}, {kNaN, 1, 2, -kInf}), r = f32({4}, {1, kNaN, -3, 5});
  auto out = runtime::eval_scalar_program(prog, {&l, &r}, {{DType::f32, {4}}, {DType::f32, {4}}});
  expect_values(out.at(0), {kNaN, kNaN, 2, 5});
  expect_values(out.at(1), {kNaN, kNaN, -3, -kInf});
}

TEST(ScalarEval, ComparesWithNaNAreFalseExceptNotEqual) {
  ScalarBuilder b(2);
  auto x = b.input(0), y = b.input(1);
  std::vector<ScalarBuilder::Val> results;
  for (ScalarOp op : {ScalarOp::eq, ScalarOp::ne, ScalarOp::lt, ScalarOp::le, ScalarOp::gt, ScalarOp::ge})
    results.push_back(b.binary(op, x, y));
  auto prog = b.finish(results);
  Tensor l = f32({3}, {kNaN, 1, 2}), r = f32({3}, {kNaN, 1, 1});
  std::vector<TensorType> types(6, TensorType{DType::f32, {3}});
  auto out = runtime::eval_scalar_program(prog, {&l, &r}, types);
  expect_values(out[0], {0, 1, 0});  // eq
  expect_values(out[1], {1, 0, 1});  // ne
  expect_values(out[2], {0, 0, 0});  // lt
  expect_values(out[3], {0, 1, 0});  // le
  expect_values(out[4], {0, 0, 1});  // gt
  expect_values(out[5], {0, 1, 1});  // ge
}

TEST(ScalarEval, SignAndSelectFollowTheContract) {
  ScalarBuilder b(1);
  auto x = b.input(0);
  auto prog = b.finish({b.unary(ScalarOp::sign, x), b.select(x, b.constant(7), b.constant(8))});
  Tensor in = f32({5}, {kNaN, -0.0, 0.0, -3, 0.25});
  auto out = runtime::eval_scalar_program(prog, {&in}, {{DType::f32, {5}}, {DType::f32, {5}}});
  expect_values(out[0], {kNaN, 0, 0, -1, 1});
  EXPECT_FALSE(std::signbit(out[0].data<float>()[1]));  // sign(-0) is +0
  expect_values(out[1], {7, 8, 8, 7, 7});  // NaN != 0: true
}

TEST(ScalarEval, StoresToF16RoundToNearestEven) {
  ScalarBuilder b(1);
  auto prog = b.finish({b.input(0)});
  const double tie_down = 1 + std::ldexp(1, -11);      // halfway between 1 and 1+2^-10: to even 1
  const double tie_up = 1 + 3 * std::ldexp(1, -11);    // halfway, rounds up to even 1+2^-9
  const double sub_tie = std::ldexp(1, -25);           // half the smallest subnormal: to 0
  const double sub_up = 3 * std::ldexp(1, -25);        // 1.5 ulp: to 2 ulp
  Tensor in = f32({8}, {tie_down, tie_up, 65519, 65520, -65520, sub_tie, sub_up, kNaN});
  auto out = runtime::eval_scalar_program(prog, {&in}, {{DType::f16, {8}}});
  const auto got = bits16(out[0]);
  EXPECT_EQ(got[0], 0x3C00);
  EXPECT_EQ(got[1], 0x3C02);
  EXPECT_EQ(got[2], 0x7BFF);  // 65519 < 65520: the largest finite f16, 65504
  EXPECT_EQ(got[3], 0x7C00);  // +Inf
  EXPECT_EQ(got[4], 0xFC00);  // -Inf
  EXPECT_EQ(got[5], 0x0000);
  EXPECT_EQ(got[6], 0x0002);
  EXPECT_EQ(got[7] & 0x7C00, 0x7C00);
  EXPECT_NE(got[7] & 0x03FF, 0);  // NaN stays NaN
}

TEST(ScalarEval, StoresToBf16RoundToNearestEven) {
  ScalarBuilder b(1);
  auto prog = b.finish({b.input(0)});
  const double tie_down = 1 + std::ldexp(1, -8), tie_up = 1 + 3 * std::ldexp(1, -8);
  Tensor in = f32({4}, {tie_down, tie_up, 3.4028234663852886e38, -0.0});
  auto out = runtime::eval_scalar_program(prog, {&in}, {{DType::bf16, {4}}});
  EXPECT_EQ(bits16(out[0]), (std::vector<uint16_t>{0x3F80, 0x3F82, 0x7F80, 0x8000}));
}

TEST(ScalarEval, F64InputsNarrowToF16WithoutDoubleRounding) {
  // 1 + 2^-11 + 2^-40: just above the f16 tie, so it must round up; rounding to f32 first
  // would land exactly on the tie and round down to 1.
  ScalarBuilder b(1);
  auto prog = b.finish({b.input(0)});
  Tensor in = tensor(DType::f64, {1}, {1 + std::ldexp(1, -11) + std::ldexp(1, -40)});
  auto out = runtime::eval_scalar_program(prog, {&in}, {{DType::f16, {1}}});
  EXPECT_EQ(bits16(out[0])[0], 0x3C01);
}

TEST(ScalarEval, IntegerAndBoolStoresTruncateSaturateAndMapNaN) {
  ScalarBuilder b(1);
  auto x = b.input(0);
  auto prog = b.finish({x, x, x});
  Tensor in = f32({7}, {2.7, -2.7, 3e9, -3e9, kNaN, -0.0, 300});
  auto out = runtime::eval_scalar_program(prog, {&in}, {{DType::i32, {7}}, {DType::u8, {7}}, {DType::boolean, {7}}});
  expect_values(out[0], {2, -2, 2147483647, -2147483648.0, 0, 0, 300});
  expect_values(out[1], {2, 0, 255, 0, 0, 0, 255});
  expect_values(out[2], {1, 1, 1, 1, 1, 0, 1});  // bool is x != 0, so NaN is true
}

TEST(ScalarEval, RoundToInsideAProgram) {
  ScalarBuilder b(1);
  auto x = b.input(0);
  auto prog = b.finish({b.round_to(x, DType::f16), b.round_to(x, DType::bf16), b.round_to(x, DType::i8)});
  Tensor in = f32({2}, {1 + std::ldexp(1, -11), -200.5});
  std::vector<TensorType> types(3, TensorType{DType::f32, {2}});
  auto out = runtime::eval_scalar_program(prog, {&in}, types);
  expect_values(out[0], {1, -200.5});
  expect_values(out[1], {1, -200});  // bf16 keeps 8 bits: -200.5 rounds to -200
  expect_values(out[2], {1, -128});
}

TEST(ScalarEval, ComputesInF32ForFloatDataAndF64Otherwise) {
  // (x + y) - x with y = 1e-8: 0 in f32 arithmetic, about 1e-8 in f64 arithmetic.
  ScalarBuilder b(2);
  auto x = b.input(0);
  auto prog = b.finish({b.sub(b.add(x, b.input(1)), x)});
  Tensor one = f32({1}, {1}), tiny = f32({1}, {1e-8});
  auto in_f32 = runtime::eval_scalar_program(prog, {&one, &tiny}, {{DType::f32, {1}}});
  expect_values(in_f32[0], {0});
  auto in_f64 = runtime::eval_scalar_program(prog, {&one, &tiny}, {{DType::f64, {1}}});
  EXPECT_NEAR(in_f64[0].data<double>()[0], 1e-8, 1e-15);
  // 16777217 = 2^24 + 1 is not an f32: integer data must not pass through f32.
  Tensor big = tensor(DType::i32, {1}, {16777217}), zero = tensor(DType::i32, {1}, {0});
  ScalarBuilder b2(2);
  auto prog2 = b2.finish({b2.add(b2.input(0), b2.input(1))});
  auto ints = runtime::eval_scalar_program(prog2, {&big, &zero}, {{DType::i32, {1}}});
  EXPECT_EQ(ints[0].data<int32_t>()[0], 16777217);
}

TEST(ScalarEval, TranscendentalsAreTheCLibraryInTheComputeType) {
  ScalarBuilder b(1);
  auto x = b.input(0);
  auto prog = b.finish({b.unary(ScalarOp::exp, x), b.unary(ScalarOp::log1p, x), b.unary(ScalarOp::rsqrt, x),
                        b.binary(ScalarOp::pow, x, b.constant(0.5)), b.unary(ScalarOp::isfinite, x)});
  Tensor in = f32({3}, {0.3, 4, kInf});
  std::vector<TensorType> types(5, TensorType{DType::f32, {3}});
  auto out = runtime::eval_scalar_program(prog, {&in}, types);
  const float v = 0.3f;
  expect_values(out[0], {std::exp(v), std::exp(4.0f), kInf});
  expect_values(out[1], {std::log1p(v), std::log1p(4.0f), kInf});
  expect_values(out[2], {1.0f / std::sqrt(v), 0.5, 0});
  expect_values(out[3], {std::pow(v, 0.5f), 2, kInf});
  expect_values(out[4], {1, 1, 0});
}

TEST(ScalarEval, RejectsInputsThatDoNotBroadcast) {
  ScalarBuilder b(2);
  auto prog = b.finish({b.add(b.input(0), b.input(1))});
  Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6}), y = f32({2}, {1, 2});
  const std::string msg = error_of([&] { runtime::eval_scalar_program(prog, {&x, &y}, {{DType::f32, {2, 3}}}); });
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2,3]"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { runtime::eval_scalar_program(prog, {&x}, {{DType::f32, {2, 3}}}); }), "");
  EXPECT_NE(error_of([&] { runtime::eval_scalar_program(prog, {&x, &x}, {}); }), "");
  // An input larger than the output is not broadcasting.
  EXPECT_NE(error_of([&] { runtime::eval_scalar_program(prog, {&x, &x}, {{DType::f32, {3}}}); }), "");
}

// ---------------------------------------------------------------------------------------
// ElementwiseOps: the registry entries.

TEST(ElementwiseOps, AssignedOpsAreRegistered) {
  const auto& r = ir::OpRegistry::global();
  for (const char* name :
       {"Activation", "LeakyReLU", "elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div", "_maximum",
        "_minimum", "maximum", "minimum", "broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div",
        "broadcast_power", "broadcast_maximum", "broadcast_minimum", "broadcast_equal", "broadcast_not_equal",
        "broadcast_greater", "broadcast_greater_equal", "broadcast_lesser", "broadcast_lesser_equal",
        "broadcast_logical_and", "broadcast_logical_or", "_plus_scalar", "_minus_scalar", "_rminus_scalar",
        "_mul_scalar", "_div_scalar", "_rdiv_scalar", "_power_scalar", "_rpower_scalar", "_maximum_scalar",
        "_minimum_scalar", "_equal_scalar", "_not_equal_scalar", "_greater_scalar", "_greater_equal_scalar",
        "_lesser_scalar", "_lesser_equal_scalar", "clip", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "square",
        "abs", "sign", "erf", "negative", "reciprocal", "sigmoid", "tanh", "relu", "floor", "ceil", "trunc", "fix",
        "where", "add_n", "ElementWiseSum", "Cast", "amp_cast", "zeros_like", "ones_like", "BlockGrad",
        "stop_gradient", "identity", "_copy", "Dropout"}) {
    EXPECT_EQ(r.resolve(name).kind, ir::OpKind::elementwise) << name;  // a name or MXNet's alias of one
  }
}

// A valid MXNet string for an attribute, or nullopt for kinds without an obvious one.
std::optional<std::string> sample_value(const ir::AttrSpec& s) {
  if (!s.choices.empty()) return s.choices.front();
  switch (s.kind) {
    case ir::AttrKind::Float: return std::string("1.5");
    case ir::AttrKind::Int: return std::string("2");
    case ir::AttrKind::DType: return std::string("float16");
    case ir::AttrKind::Bool: return std::string("False");
    default: return std::nullopt;
  }
}

// Attribute strings that satisfy a schema's required attributes, or nullopt.
std::optional<std::map<std::string, std::string>> sample_required_attrs(const ir::OpDef& def) {
  std::map<std::string, std::string> raw;
  for (const ir::AttrSpec& s : def.attrs) {
    if (s.default_value) continue;
    std::optional<std::string> v = sample_value(s);
    if (!v) return std::nullopt;
    raw.emplace(s.name, std::move(*v));
  }
  return raw;
}

TEST(ElementwiseOps, EveryElementwiseOpHasARecipeThatBuilds) {
  const auto& r = ir::OpRegistry::global();
  int checked = 0;
  for (const std::string& name : r.names()) {
    const ir::OpDef& def = r.get(name);
    if (def.kind != ir::OpKind::elementwise) continue;
    EXPECT_TRUE(def.fusable) << name;
    EXPECT_TRUE(static_cast<bool>(def.infer)) << name;
    ASSERT_TRUE(static_cast<bool>(def.recipe)) << name << " has no scalar recipe";
    const auto raw = sample_required_attrs(def);
    if (!raw) continue;
    const ir::Attrs attrs = ir::parse_attrs(def, *raw);
    ScalarBuilder b(def.input_count(attrs));
    const auto results = def.recipe(b, attrs);
    EXPECT_EQ(static_cast<int>(results.size()), def.output_count(attrs)) << name;
    ++checked;
  }
  EXPECT_GT(checked, 80);
}

TEST(ElementwiseOps, EveryActTypeHasARecipe) {
  for (const char* op : {"Activation", "LeakyReLU"}) {
    const ir::OpDef& def = ir::OpRegistry::global().get(op);
    for (const std::string& t : def.find_attr("act_type")->choices) {
      const ir::Attrs attrs = ir::parse_attrs(def, {{"act_type", t}});
      ScalarBuilder b(def.input_count(attrs));
      EXPECT_EQ(def.recipe(b, attrs).size(), 1u) << op << " " << t;
    }
  }
}

TEST(ElementwiseOps, AmpClassesFollowMxnetLists) {
  const auto& r = ir::OpRegistry::global();
  using ir::AmpClass;
  auto cls = [&](const char* op, DType t) { return r.get(op).amp_class(t); };
  EXPECT_EQ(cls("exp", DType::f16), AmpClass::fp32);
  EXPECT_EQ(cls("_rdiv_scalar", DType::bf16), AmpClass::fp32);
  EXPECT_EQ(cls("elemwise_add", DType::f16), AmpClass::widest);
  EXPECT_EQ(cls("where", DType::bf16), AmpClass::widest);
  EXPECT_EQ(cls("relu", DType::f16), AmpClass::neutral);
  // MXNet 1.9.1's bf16 list has Dropout in FP32_FUNCS; its fp16 list has it neutral.
  EXPECT_EQ(cls("Dropout", DType::f16), AmpClass::neutral);
  EXPECT_EQ(cls("Dropout", DType::bf16), AmpClass::fp32);
  EXPECT_EQ(cls("square", DType::f16), AmpClass::fp32);
  EXPECT_EQ(cls("square", DType::bf16), AmpClass::neutral);
  const ir::OpDef& act = r.get("Activation");
  EXPECT_EQ(act.amp_fp16, AmpClass::cond_fp32);
  EXPECT_EQ(act.cond_fp32_fp16->values, std::vector<std::string>{"softrelu"});
  const ir::OpDef& leaky = r.get("LeakyReLU");
  EXPECT_EQ(leaky.cond_fp32_fp16->values, (std::vector<std::string>{"elu", "selu"}));
  // MXNet 1.9.1's bf16 list: elu and selu too (master's has selu only).
  EXPECT_EQ(leaky.cond_fp32_bf16->values, (std::vector<std::string>{"elu", "selu"}));
  EXPECT_EQ(leaky.cond_fp32_bf16->otherwise, AmpClass::neutral);
}

TEST(ElementwiseOpsActivation, EachActType) {
  Tensor x = f32({4}, {-1, 0, 2, kNaN});
  expect_values(run_op("Activation", {x}, {{"act_type", "relu"}}), {0, 0, 2, kNaN});
  expect_values(run_op("relu", {x}), {0, 0, 2, kNaN});
  Tensor s = f32({4}, {0, -100, 100, kNaN});
  expect_values(run_op("Activation", {s}, {{"act_type", "sigmoid"}}), {0.5, 0, 1, kNaN});
  expect_values(run_op("sigmoid", {s}), {0.5, 0, 1, kNaN});
  expect_values(run_op("Activation", {f32({2}, {0, kInf})}, {{"act_type", "tanh"}}), {0, 1});
  expect_values(run_op("Activation", {f32({3}, {3, -1, 0})}, {{"act_type", "softsign"}}), {0.75, -0.5, 0});
}

TEST(ElementwiseOpsActivation, SoftreluIsExactAtBothEnds) {
  // The direct log1p(exp(x)) overflows to Inf for x > 88 in f32; the recipe must not.
  expect_near(run_op("Activation", {f32({4}, {0, 100, 1000, -1000})}, {{"act_type", "softrelu"}}),
              {0.69314718, 100, 1000, 0}, 1e-6);
  expect_values(run_op("Activation", {f32({3}, {kInf, -kInf, kNaN})}, {{"act_type", "softrelu"}}), {kInf, 0, kNaN});
  // log_sigmoid(x) = -softrelu(-x)
  expect_near(run_op("Activation", {f32({2}, {0, -1000})}, {{"act_type", "log_sigmoid"}}), {-0.69314718, -1000},
              1e-6);
}

TEST(ElementwiseOpsActivation, RejectsBadOrMissingActType) {
  const ir::OpDef& act = ir::OpRegistry::global().get("Activation");
  std::string msg = error_of([&] { ir::parse_attrs(act, {{"act_type", "swish"}}); });
  EXPECT_NE(msg.find("act_type"), std::string::npos) << msg;
  EXPECT_NE(msg.find("swish"), std::string::npos) << msg;
  msg = error_of([&] { ir::parse_attrs(act, {}); });
  EXPECT_NE(msg.find("act_type"), std::string::npos) << msg;
}

TEST(ElementwiseOpsLeakyReLU, LeakyEluSeluRrelu) {
  Tensor x = f32({3}, {-4, 2, kNaN});
  expect_values(run_op("LeakyReLU", {x}), {-1, 2, kNaN});  // default: leaky, slope 0.25
  expect_values(run_op("LeakyReLU", {x}, {{"slope", "0.5"}}), {-2, 2, kNaN});
  // rrelu at inference: slope (0.125 + 0.334) / 2 = 0.2295
  expect_near(run_op("LeakyReLU", {f32({1}, {-2})}, {{"act_type", "rrelu"}}), {-0.459}, 1e-6);
  // elu: slope * (e^x - 1); e^-1 - 1 = -0.6321205588
  expect_near(run_op("LeakyReLU", {f32({2}, {-1, 3})}, {{"act_type", "elu"}, {"slope", "2"}}), {-1.2642411, 3}, 1e-6);
  // selu: lambda * (x > 0 ? x : alpha (e^x - 1)); 1.0507009874 * 1.6732632423 * -0.6321205588
  expect_near(run_op("LeakyReLU", {f32({2}, {-1, 1})}, {{"act_type", "selu"}}), {-1.1113307, 1.0507010}, 1e-6);
}

TEST(ElementwiseOpsLeakyReLU, GeluUsesErf) {
  // 0.5 x (1 + erf(x / sqrt 2)): Phi(1) = 0.8413447461, Phi(-1) = 0.1586552539
  Tensor x = f32({3}, {1, -1, 0});
  expect_near(run_op("LeakyReLU", {x}, {{"act_type", "gelu"}}), {0.84134475, -0.15865525, 0}, 1e-6);
  expect_near(run_op("LeakyReLU", {x}, {{"act_type", "gelu_erf"}}), {0.84134475, -0.15865525, 0}, 1e-6);
  // tanh form: 0.5 (1 + tanh(0.7978845608 * 1.044715)) = 0.8411919906
  expect_near(run_op("LeakyReLU", {x}, {{"act_type", "gelu_tanh"}}), {0.84119199, -0.15880801, 0}, 1e-6);
}

TEST(ElementwiseOpsLeakyReLU, PreluBroadcastsGammaAlongAxisOne) {
  // Data [1,2,2]: channel extent 2 equals the last extent, so right-aligned broadcasting
  // would pair gamma with the last axis and give [-1,-0.4,-1,-0.4] instead.
  Tensor data = f32({1, 2, 2}, {-2, -4, -2, 4}), gamma = f32({2}, {0.5, 0.1});
  expect_near(run_op("LeakyReLU", {data, gamma}, {{"act_type", "prelu"}}), {-1, -2, -0.2, 4}, 1e-7);
  // An unknown gamma is inferred as (C,), taking data's dtype.
  EXPECT_EQ(infer("LeakyReLU", {TensorType{DType::f16, {8, 3, 5, 5}}, std::nullopt}, {{"act_type", "prelu"}}),
            (TensorType{DType::f16, {8, 3, 5, 5}}));
  const ir::OpDef& def = ir::OpRegistry::global().get("LeakyReLU");
  EXPECT_EQ(def.input_count(ir::parse_attrs(def, {{"act_type", "prelu"}})), 2);
  EXPECT_EQ(def.input_count(ir::parse_attrs(def, {})), 1);
  EXPECT_EQ(ir::prelu_gamma_view({3}, {8, 3, 5, 5}), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(ir::prelu_gamma_view({1}, {8, 3, 5, 5}), (Shape{1, 1, 1, 1}));
}

TEST(ElementwiseOpsLeakyReLU, PreluRejectsGammaOfWrongSizeOrDtype) {
  std::string msg = error_of([] {
    infer("LeakyReLU", {TensorType{DType::f32, {8, 3, 5, 5}}, TensorType{DType::f32, {4}}}, {{"act_type", "prelu"}});
  });
  EXPECT_NE(msg.find("gamma"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  msg = error_of([] {
    infer("LeakyReLU", {TensorType{DType::f16, {8, 3}}, TensorType{DType::f32, {3}}}, {{"act_type", "prelu"}});
  });
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
}

TEST(ElementwiseOpsBinary, SameShapeArithmetic) {
  Tensor a = f32({2, 2}, {1, -2, 3, 0}), b = f32({2, 2}, {4, 5, -6, 0});
  expect_values(run_op("elemwise_add", {a, b}), {5, 3, -3, 0});
  expect_values(run_op("elemwise_sub", {a, b}), {-3, -7, 9, 0});
  expect_values(run_op("elemwise_mul", {a, b}), {4, -10, -18, 0});
  expect_values(run_op("elemwise_div", {a, b}), {0.25, -0.4f, -0.5, kNaN});  // 0/0 is NaN
}

TEST(ElementwiseOpsBinary, SameShapeOpsNameBothShapesAndDtypes) {
  std::string msg = error_of([] { infer("elemwise_add", {TensorType{DType::f32, {2, 3}}, TensorType{DType::f32, {3, 2}}}); });
  EXPECT_NE(msg.find("[2,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,2]"), std::string::npos) << msg;
  msg = error_of([] { infer("elemwise_mul", {TensorType{DType::f32, {2}}, TensorType{DType::f16, {2}}}); });
  EXPECT_NE(msg.find("f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rhs"), std::string::npos) << msg;
  // A weight without a type takes its partner's.
  const ir::OpDef& def = ir::OpRegistry::global().get("elemwise_add");
  const ir::Attrs attrs = ir::parse_attrs(def, {});
  ir::InferContext c{attrs, {std::nullopt, TensorType{DType::bf16, {4}}}, {}};
  c.outputs.resize(1);
  def.infer(c);
  EXPECT_EQ(c.inputs[0], (TensorType{DType::bf16, {4}}));
}

TEST(ElementwiseOpsBinary, BroadcastingOps) {
  Tensor col = f32({2, 1}, {1, 2}), row = f32({3}, {10, 20, 30});
  const Tensor sum = run_op("broadcast_add", {col, row});
  EXPECT_EQ(sum.shape(), (Shape{2, 3}));
  expect_values(sum, {11, 21, 31, 12, 22, 32});
  expect_values(run_op("broadcast_sub", {col, row}), {-9, -19, -29, -8, -18, -28});
  expect_values(run_op("broadcast_div", {f32({2}, {1, -1}), f32({1}, {0})}), {kInf, -kInf});
  expect_values(run_op("broadcast_power", {f32({3}, {2, -8, 0}), f32({3}, {3, 1.0 / 3, -1})}), {8, kNaN, kInf});
  expect_values(run_op("_maximum", {f32({3}, {1, kNaN, 5}), f32({1}, {2})}), {2, kNaN, 5});
  expect_values(run_op("minimum", {f32({3}, {1, kNaN, 5}), f32({1}, {2})}), {1, kNaN, 2});
  // Size 0 against size 1 gives size 0.
  EXPECT_EQ(run_op("broadcast_mul", {f32({0, 1}, {}), f32({3}, {1, 2, 3})}).shape(), (Shape{0, 3}));
}

TEST(ElementwiseOpsBinary, BroadcastMismatchNamesTheShapes) {
  const std::string msg =
      error_of([] { infer("broadcast_add", {TensorType{DType::f32, {2, 3}}, TensorType{DType::f32, {4}}}); });
  EXPECT_NE(msg.find("[2,3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_EQ(ir::broadcast_shape({5, 1, 3}, {4, 1}), (Shape{5, 4, 3}));
  EXPECT_EQ(ir::broadcast_shape({}, {2}), (Shape{2}));
  EXPECT_NE(error_of([] { ir::broadcast_shape({0}, {3}); }), "");
}

TEST(ElementwiseOpsBinary, ComparisonsAndLogicOutputTheInputDtype) {
  Tensor a = tensor(DType::f16, {4}, {1, 2, kNaN, 0}), b = tensor(DType::f16, {4}, {1, 1, kNaN, 0});
  const Tensor eq = run_op("broadcast_equal", {a, b});
  EXPECT_EQ(eq.dtype(), DType::f16);
  expect_values(eq, {1, 0, 0, 1});
  expect_values(run_op("broadcast_not_equal", {a, b}), {0, 1, 1, 0});
  expect_values(run_op("broadcast_greater", {a, b}), {0, 1, 0, 0});
  expect_values(run_op("broadcast_lesser_equal", {a, b}), {1, 0, 0, 1});
  expect_values(run_op("broadcast_logical_and", {a, b}), {1, 1, 1, 0});  // NaN is true
  expect_values(run_op("broadcast_logical_or", {a, tensor(DType::f16, {1}, {0})}), {1, 1, 1, 0});
  expect_values(run_op("_greater_equal", {a, b}), {1, 1, 0, 1});
}

TEST(ElementwiseOpsBinary, LowPrecisionResultsRoundOnceFromF32) {
  // f16(0.1) * 3 = 0.2999267578125 exactly, a tie between two f16 values: to even 0x34CC.
  Tensor x = tensor(DType::f16, {1}, {0.1}), three = tensor(DType::f16, {1}, {3});
  EXPECT_EQ(bits16(run_op("elemwise_mul", {x, three}))[0], 0x34CC);
  // bf16: 1.0078125 + 2^-8 = 1.01171875 is the tie between 1.0078125 and 1.015625: to even.
  Tensor p = tensor(DType::bf16, {1}, {1.0078125}), q = tensor(DType::bf16, {1}, {std::ldexp(1, -8)});
  EXPECT_EQ(bits16(run_op("broadcast_add", {p, q}))[0], 0x3F82);
}

TEST(ElementwiseOpsScalar, ArithmeticWithTheScalarAttribute) {
  Tensor x = f32({3}, {1, -2, 4});
  expect_values(run_op("_plus_scalar", {x}, {{"scalar", "2"}}), {3, 0, 6});
  expect_values(run_op("_minus_scalar", {x}, {{"scalar", "2"}}), {-1, -4, 2});
  expect_values(run_op("_rminus_scalar", {x}, {{"scalar", "2"}}), {1, 4, -2});
  expect_values(run_op("_mul_scalar", {x}, {{"scalar", "-0.5"}}), {-0.5, 1, -2});
  expect_values(run_op("_div_scalar", {x}, {{"scalar", "4"}}), {0.25, -0.5, 1});
  expect_values(run_op("_rdiv_scalar", {x}, {{"scalar", "4"}}), {4, -2, 1});
  expect_values(run_op("_power_scalar", {x}, {{"scalar", "2"}}), {1, 4, 16});
  expect_values(run_op("_rpower_scalar", {x}, {{"scalar", "2"}}), {2, 0.25, 16});
  expect_values(run_op("_maximum_scalar", {f32({2}, {kNaN, 1})}, {{"scalar", "0"}}), {kNaN, 1});
  expect_values(run_op("_minimum_scalar", {x}, {{"scalar", "0"}}), {0, -2, 0});
  // MXNet 2.0's is_int is accepted and changes nothing.
  expect_values(run_op("_plus_scalar", {x}, {{"scalar", "1"}, {"is_int", "True"}}), {2, -1, 5});
}

TEST(ElementwiseOpsScalar, ComparisonsAgainstTheScalar) {
  Tensor x = f32({4}, {0, 0.5, 1, kNaN});
  expect_values(run_op("_equal_scalar", {x}, {{"scalar", "0.5"}}), {0, 1, 0, 0});
  expect_values(run_op("_not_equal_scalar", {x}, {{"scalar", "0"}}), {0, 1, 1, 1});
  expect_values(run_op("_greater_scalar", {x}, {{"scalar", "0.5"}}), {0, 0, 1, 0});
  expect_values(run_op("_greater_equal_scalar", {x}, {{"scalar", "0.5"}}), {0, 1, 1, 0});
  expect_values(run_op("_lesser_scalar", {x}, {{"scalar", "0.5"}}), {1, 0, 0, 0});
  expect_values(run_op("_lesser_equal_scalar", {x}, {{"scalar", "0.5"}}), {1, 1, 0, 0});
}

TEST(ElementwiseOpsScalar, IntegerDataTruncatesLikeIntegerDivision) {
  Tensor x = tensor(DType::i32, {3}, {7, -7, 2147483647});
  const Tensor q = run_op("_div_scalar", {x}, {{"scalar", "2"}});
  EXPECT_EQ(q.dtype(), DType::i32);
  expect_values(q, {3, -3, 1073741823});
  expect_values(run_op("_plus_scalar", {x}, {{"scalar", "1"}}), {8, -6, 2147483647});  // saturates
}

TEST(ElementwiseOpsScalar, MissingOrMalformedScalarIsAnError) {
  const ir::OpDef& def = ir::OpRegistry::global().get("_mul_scalar");
  std::string msg = error_of([&] { ir::parse_attrs(def, {}); });
  EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;
  msg = error_of([&] { ir::parse_attrs(def, {{"scalar", "two"}}); });
  EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;
  msg = error_of([&] { ir::parse_attrs(def, {{"scalar", "2"}, {"alpha", "1"}}); });
  EXPECT_NE(msg.find("alpha"), std::string::npos) << msg;
}

TEST(ElementwiseOpsUnary, ValuesAtTheEdges) {
  Tensor x = f32({5}, {-2.5, -0.0, 0, 4, kNaN});
  expect_values(run_op("floor", {x}), {-3, 0, 0, 4, kNaN});
  expect_values(run_op("ceil", {x}), {-2, 0, 0, 4, kNaN});
  expect_values(run_op("trunc", {x}), {-2, 0, 0, 4, kNaN});
  expect_values(run_op("fix", {x}), {-2, 0, 0, 4, kNaN});
  expect_values(run_op("abs", {x}), {2.5, 0, 0, 4, kNaN});
  EXPECT_FALSE(std::signbit(run_op("abs", {x}).data<float>()[1]));
  const Tensor neg = run_op("negative", {x});
  expect_values(neg, {2.5, 0, 0, -4, kNaN});
  EXPECT_TRUE(std::signbit(neg.data<float>()[2]));  // -(+0) is -0
  expect_values(run_op("sign", {x}), {-1, 0, 0, 1, kNaN});
  expect_values(run_op("square", {x}), {6.25, 0, 0, 16, kNaN});
  expect_values(run_op("sqrt", {x}), {kNaN, -0.0, 0, 2, kNaN});
  expect_values(run_op("rsqrt", {x}), {kNaN, -kInf, kInf, 0.5, kNaN});
  expect_values(run_op("reciprocal", {x}), {-0.4f, -kInf, kInf, 0.25, kNaN});
  expect_values(run_op("log", {f32({3}, {0, -1, 1})}), {-kInf, kNaN, 0});
  expect_values(run_op("log1p", {f32({2}, {-1, 0})}), {-kInf, 0});
  expect_values(run_op("exp", {f32({3}, {-kInf, 0, kInf})}), {0, 1, kInf});
  expect_values(run_op("expm1", {f32({2}, {0, -kInf})}), {0, -1});
  expect_values(run_op("erf", {f32({3}, {0, kInf, -kInf})}), {0, 1, -1});
  expect_values(run_op("tanh", {f32({2}, {-kInf, 0})}), {-1, 0});
}

TEST(ElementwiseOpsUnary, ClipFollowsMxnetCompareOrder) {
  Tensor x = f32({4}, {-5, 0.5, 5, kNaN});
  expect_values(run_op("clip", {x}, {{"a_min", "0"}, {"a_max", "1"}}), {0, 0.5, 1, kNaN});
  // NaN bounds fail both compares, so values pass through; infinite bounds never bind.
  expect_values(run_op("clip", {x}, {{"a_min", "nan"}, {"a_max", "nan"}}), {-5, 0.5, 5, kNaN});
  expect_values(run_op("clip", {x}, {{"a_min", "-inf"}, {"a_max", "inf"}}), {-5, 0.5, 5, kNaN});
  // Crossed bounds: a_max wins above it, a_min below it.
  expect_values(run_op("clip", {x}, {{"a_min", "1"}, {"a_max", "0"}}), {1, 0, 0, kNaN});
  EXPECT_NE(error_of([] { ir::parse_attrs(ir::OpRegistry::global().get("clip"), {{"a_min", "0"}}); }).find("a_max"),
            std::string::npos);
}

TEST(ElementwiseOpsMisc, WhereSelectsAndBroadcasts) {
  Tensor cond = f32({3}, {1, 0, kNaN}), x = f32({3}, {1, 2, 3}), y = f32({3}, {-1, -2, -3});
  expect_values(run_op("where", {cond, x, y}), {1, -2, 3});
  // The condition may have its own dtype.
  expect_values(run_op("where", {tensor(DType::u8, {3}, {0, 7, 0}), x, y}), {-1, 2, -3});
  // Numpy broadcasting of all three.
  const Tensor w = run_op("where", {f32({2, 1}, {1, 0}), f32({3}, {1, 2, 3}), f32({1}, {0})});
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  expect_values(w, {1, 2, 3, 0, 0, 0});
}

TEST(ElementwiseOpsMisc, WhereWithAOneDimensionalConditionSelectsRows) {
  // MXNet's legacy where: condition (2,) against x (2,2) picks rows, not columns.
  Tensor cond = f32({2}, {0, 1}), x = f32({2, 2}, {1, 2, 3, 4}), y = f32({2, 2}, {-1, -2, -3, -4});
  expect_values(run_op("where", {cond, x, y}), {-1, -2, 3, 4});
  const std::string msg = error_of([] {
    infer("where", {TensorType{DType::f32, {3}}, TensorType{DType::f32, {3}}, TensorType{DType::f16, {3}}});
  });
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(y)"), std::string::npos) << msg;
}

TEST(ElementwiseOpsMisc, AddNSumsEveryInput) {
  Tensor a = f32({2}, {1, 2}), b = f32({2}, {10, 20}), c = f32({2}, {100, 200});
  expect_values(run_op("add_n", {a, b, c}, {{"num_args", "3"}}), {111, 222});
  expect_values(run_op("ElementWiseSum", {a, b}, {{"num_args", "2"}}), {11, 22});
  const ir::OpDef& def = ir::OpRegistry::global().get("add_n");
  EXPECT_EQ(def.input_count(ir::parse_attrs(def, {{"num_args", "5"}})), 5);
  EXPECT_NE(error_of([] { infer("add_n", {}, {{"num_args", "0"}}); }).find("num_args"), std::string::npos);
  const std::string msg =
      error_of([] { infer("add_n", {TensorType{DType::f32, {2}}, TensorType{DType::f32, {3}}}, {{"num_args", "2"}}); });
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
}

TEST(ElementwiseOpsMisc, CastRoundsOrTruncatesToTheTarget) {
  Tensor x = f32({4}, {1 + std::ldexp(1, -11), -2.7, 3e9, kNaN});
  const Tensor h = run_op("Cast", {x}, {{"dtype", "float16"}});
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(bits16(h)[0], 0x3C00);
  EXPECT_EQ(bits16(h)[2], 0x7C00);
  const Tensor i = run_op("Cast", {x}, {{"dtype", "int32"}});
  EXPECT_EQ(i.dtype(), DType::i32);
  expect_values(i, {1, -2, 2147483647, 0});
  expect_values(run_op("cast", {tensor(DType::i64, {2}, {-3, 16777217})}, {{"dtype", "float64"}}), {-3, 16777217});
  EXPECT_EQ(run_op("Cast", {x}, {{"dtype", "bool"}}).dtype(), DType::boolean);
}

TEST(ElementwiseOpsMisc, AmpCastRetypesOnlyFloatData) {
  Tensor x = f32({1}, {1 + std::ldexp(1, -8)});
  const Tensor b = run_op("amp_cast", {x}, {{"dtype", "bfloat16"}});
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(bits16(b)[0], 0x3F80);
  EXPECT_EQ(run_op("amp_cast", {b}, {{"dtype", "bfloat16"}}).dtype(), DType::bf16);  // identity
  const Tensor i = run_op("amp_cast", {tensor(DType::i32, {1}, {7})}, {{"dtype", "float16"}});
  EXPECT_EQ(i.dtype(), DType::i32);
  expect_values(i, {7});
  const std::string msg = error_of([] { infer("amp_cast", {TensorType{DType::f32, {1}}}, {{"dtype", "int32"}}); });
  EXPECT_NE(msg.find("i32"), std::string::npos) << msg;
}

TEST(ElementwiseOpsMisc, LikeOpsAndIdentities) {
  Tensor x = tensor(DType::f16, {2, 2}, {1, kNaN, -kInf, 3});
  const Tensor z = run_op("zeros_like", {x});
  EXPECT_EQ(z.type(), x.type());
  expect_values(z, {0, 0, 0, 0});
  expect_values(run_op("ones_like", {x}), {1, 1, 1, 1});
  // MXNet 1.9.1 accepts a dtype attribute and ignores it (GluonCV's CenterNet writes one).
  const Tensor z64 = run_op("zeros_like", {x}, {{"dtype", "int64"}});
  EXPECT_EQ(z64.type(), x.type());
  expect_values(z64, {0, 0, 0, 0});
  for (const char* op : {"BlockGrad", "stop_gradient", "identity", "_copy"}) {
    const Tensor y = run_op(op, {x});
    EXPECT_EQ(y.type(), x.type()) << op;
    EXPECT_EQ(bits16(y), bits16(x)) << op;
  }
}

TEST(ElementwiseOpsMisc, DropoutIsIdentityAtInference) {
  Tensor x = f32({3}, {1, -2, kNaN});
  expect_values(run_op("Dropout", {x}, {{"p", "0.1"}, {"axes", "()"}, {"cudnn_off", "False"}}), {1, -2, kNaN});
  expect_values(run_op("Dropout", {x}, {{"p", "0"}, {"mode", "always"}}), {1, -2, kNaN});
  std::string msg = error_of([] { infer("Dropout", {TensorType{DType::f32, {3}}}, {{"mode", "always"}}); });
  EXPECT_NE(msg.find("always"), std::string::npos) << msg;
  msg = error_of([] { infer("Dropout", {TensorType{DType::f32, {3}}}, {{"p", "1.5"}}); });
  EXPECT_NE(msg.find("'p'"), std::string::npos) << msg;
  msg = error_of([] { infer("Dropout", {TensorType{DType::f32, {3}}}, {{"mode", "sometimes"}}); });
  EXPECT_NE(msg.find("mode"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ampfuse
