// The interpreter driver (variable binding, recipe and kernel dispatch, freeing of
// intermediates, error context) and random_bindings.
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/random.h"
#include "runtime/reference/reference_kernels.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>

namespace ampfuse::runtime {
namespace {

using ir::DType;
using ir::GraphBuilder;
using ir::TensorType;

constexpr const char* kTwice = "_interpreter_test_twice";        // kernel doubles its input
constexpr const char* kNoKernel = "_interpreter_test_no_kernel";  // no recipe, no kernel
constexpr const char* kBadKernel = "_interpreter_test_bad_kernel";  // returns the wrong type

// Ops for the driver's own checks, registered in the global registry (the interpreter
// reads no other). The one without a kernel is `opaque`, like Custom, so that checks over
// all compute ops are not disturbed when the whole test binary runs in one process.
void register_test_ops() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* name : {kTwice, kNoKernel, kBadKernel}) {
      ir::OpDef d;
      d.name = name;
      d.kind = name == kNoKernel ? ir::OpKind::opaque : ir::OpKind::compute;
      d.inputs = {{"data"}};
      d.infer = [](ir::InferContext& c) { c.outputs[0] = c.in(0); };
      ir::OpRegistry::global().add(std::move(d));
    }
    register_reference_kernel(kTwice, [](const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
      for (int64_t i = 0; i < in[0].size(); ++i) out[0].set_f64(i, 2 * in[0].get_f64(i));
    });
    register_reference_kernel(kBadKernel, [](const ir::Node&, std::span<const Tensor> in, std::span<Tensor> out) {
      out[0] = Tensor::zeros({DType::f64, in[0].shape()});
    });
  });
}

Tensor f32_tensor(std::vector<float> v) {
  Tensor t({DType::f32, {static_cast<int64_t>(v.size())}});
  std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

class InterpreterTest : public ::testing::Test {
 protected:
  void SetUp() override { register_test_ops(); }
};

// Cast to f16, scale in f16, widen, add the f32 input: every step rounds where the
// semantics say, and `x` and `y` are read again after other nodes have run.
TEST_F(InterpreterTest, F16CastChainMatchesHandValues) {
  GraphBuilder b;
  auto x = b.input("x", {DType::f32, {4}});
  auto y = b.op("Cast", {x}, {{"dtype", "float16"}}, "y");
  auto z = b.op("_mul_scalar", {y}, {{"scalar", "3"}}, "z");
  auto w = b.op("Cast", {z}, {{"dtype", "float32"}}, "w");
  b.output(b.op("elemwise_add", {w, x}, {}, "sum"));
  b.output(y);
  const ir::Graph g = b.finish();

  const std::vector<Tensor> out = interpret(g, {{"x", f32_tensor({0.1f, 65504.0f, 1000.7f, -2.0f})}});
  ASSERT_EQ(out.size(), 2u);
  // y: 0.1 -> 1638 * 2^-14; 1000.7 -> 1000.5 (f16 spacing 0.5 there); 65504 is the f16 max.
  ASSERT_EQ(out[1].type(), (TensorType{DType::f16, {4}}));
  EXPECT_EQ(out[1].get_f64(0), 0.0999755859375);
  EXPECT_EQ(out[1].get_f64(1), 65504.0);
  EXPECT_EQ(out[1].get_f64(2), 1000.5);
  EXPECT_EQ(out[1].get_f64(3), -2.0);
  // z = 3y in f16: 4914 * 2^-14 = 1228.5 * 2^-12 is a tie, to even 1228 * 2^-12;
  // 196512 overflows to +Inf; 3001.5 rounds to 3002 (spacing 2); -6 is exact.
  ASSERT_EQ(out[0].type(), (TensorType{DType::f32, {4}}));
  const float* s = out[0].data<float>();
  EXPECT_EQ(s[0], 0.2998046875f + 0.1f);
  EXPECT_EQ(s[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(s[2], 3002.0f + 1000.7f);
  EXPECT_EQ(s[3], -8.0f);
}

// `a` has five reads spread over the graph (one node reads it twice) and is also an output;
// recipe ops and kernel ops (transpose, Reshape) mix: freeing after the last use must not
// drop it early.
TEST_F(InterpreterTest, MultiUseValuesSurviveFreeing) {
  GraphBuilder b;
  auto x = b.input("x", {DType::f32, {1, 3}});
  auto a = b.op("_mul_scalar", {x}, {{"scalar", "2"}}, "a");
  auto t = b.op("transpose", {a}, {}, "t");
  auto c = b.op("Reshape", {t}, {{"shape", "(1, 3)"}}, "c");
  auto d = b.op("elemwise_add", {a, c}, {}, "d");
  auto e = b.op("elemwise_mul", {d, a}, {}, "e");
  auto f = b.op("elemwise_add", {a, a}, {}, "f");
  b.output(e);
  b.output(a);
  b.output(f);
  Tensor input({DType::f32, {1, 3}});
  for (int i = 0; i < 3; ++i) input.set_f64(i, i + 1);
  const std::vector<Tensor> out = interpret(b.finish(), {{"x", input}});
  ASSERT_EQ(out.size(), 3u);
  // a = 2x, c = a, d = 4x, e = 8x^2, f = 4x.
  EXPECT_EQ(to_f64_vector(out[0]), (std::vector<double>{8, 32, 72}));
  EXPECT_EQ(to_f64_vector(out[1]), (std::vector<double>{2, 4, 6}));
  EXPECT_EQ(to_f64_vector(out[2]), (std::vector<double>{4, 8, 12}));
}

TEST_F(InterpreterTest, AnOutputListedTwiceComesBackTwice) {
  GraphBuilder b;
  auto a = b.op(kTwice, {b.input("x", {DType::f32, {2}})}, {}, "a");
  b.output(a);
  b.output(a);
  const std::vector<Tensor> out = interpret(b.finish(), {{"x", f32_tensor({1, -1})}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(to_f64_vector(out[0]), (std::vector<double>{2, -2}));
  EXPECT_EQ(to_f64_vector(out[1]), (std::vector<double>{2, -2}));
}

TEST_F(InterpreterTest, UnboundVariableIsNamed) {
  GraphBuilder b;
  auto x = b.input("x", {DType::f32, {2}});
  auto y = b.input("y", {DType::f32, {2}});
  b.output(b.op("elemwise_add", {x, y}));
  const ir::Graph g = b.finish();
  EXPECT_ERROR(interpret(g, {{"x", f32_tensor({1, 2})}}), "variable 'y' is not bound");
}

TEST_F(InterpreterTest, MistypedVariableNamesItAndBothTypes) {
  GraphBuilder b;
  b.output(b.op(kTwice, {b.input("x", {DType::f32, {3}})}));
  const ir::Graph g = b.finish();
  const std::string wrong_dtype = testing::error_message([&] { interpret(g, {{"x", Tensor::zeros({DType::f64, {3}})}}); });
  EXPECT_NE(wrong_dtype.find("'x'"), std::string::npos) << wrong_dtype;
  EXPECT_NE(wrong_dtype.find("f64[3]"), std::string::npos) << wrong_dtype;
  EXPECT_NE(wrong_dtype.find("f32[3]"), std::string::npos) << wrong_dtype;
  EXPECT_ERROR(interpret(g, {{"x", f32_tensor({1, 2, 3, 4})}}), "variable 'x' is bound to f32[4] but the graph needs f32[3]");
  // The same tensor with the right type runs.
  EXPECT_EQ(to_f64_vector(interpret(g, {{"x", f32_tensor({1, 2, 3})}})[0]), (std::vector<double>{2, 4, 6}));
}

TEST_F(InterpreterTest, OpWithoutKernelNamesTheNodeAndOp) {
  GraphBuilder b;
  b.output(b.op(kNoKernel, {b.input("x", {DType::f32, {2}})}, {}, "mystery"));
  EXPECT_ERROR(interpret(b.finish(), {{"x", f32_tensor({1, 2})}}),
               fmt::format("node 1 'mystery' ({}): op '{}' has no reference kernel", kNoKernel, kNoKernel));
}

TEST_F(InterpreterTest, KernelResultOfTheWrongTypeIsCaught) {
  GraphBuilder b;
  b.output(b.op(kBadKernel, {b.input("x", {DType::f32, {2}})}, {}, "bad"));
  EXPECT_ERROR(interpret(b.finish(), {{"x", f32_tensor({1, 2})}}),
               "node 1 'bad' (_interpreter_test_bad_kernel): the reference kernel produced f64[2] for output 0 but "
               "f32[2] was inferred");
}

TEST_F(InterpreterTest, GraphWithoutTypesIsRefused) {
  GraphBuilder b;
  b.output(b.op(kTwice, {b.input("x", {DType::f32, {2}})}, {}, "a"));
  EXPECT_ERROR(interpret(b.finish(/*infer=*/false), {{"x", f32_tensor({1, 2})}}), "node 1 'a'");
}

// --- random_bindings ---------------------------------------------------------------

TEST(InterpreterRandom, SplitMix64MatchesThePublishedSequence) {
  // The first outputs of SplitMix64 from state 0 (the reference implementation's values).
  SplitMix64 rng(0);
  EXPECT_EQ(rng.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.next(), 0x06C45D188009454Full);
}

TEST(InterpreterRandom, UnitAndBoundedDrawsStayInRange) {
  SplitMix64 rng(42);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const double u = rng.next_unit();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    const uint64_t k = rng.next_below(5);
    ASSERT_LT(k, 5u);
    seen.insert(k);
  }
  EXPECT_EQ(seen.size(), 5u);
}

ir::Graph mlp_with_batchnorm(bool extra_input) {
  GraphBuilder b;
  auto x = b.input("data", {DType::f32, {4, 16}});
  auto h = b.op("FullyConnected", {x, b.param("fc_weight"), b.param("fc_bias")}, {{"num_hidden", "8"}}, "fc");
  h = b.op("BatchNorm", {h, b.param("bn_gamma"), b.param("bn_beta"), b.aux("bn_moving_mean"), b.aux("bn_moving_var")},
           {{"fix_gamma", "False"}}, "bn");
  if (extra_input) h = b.op("elemwise_add", {h, b.input("extra", {DType::f32, {4, 8}})});
  b.output(h);
  return b.finish();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(InterpreterRandom, SameSeedGivesSameBitsAndOtherSeedsDiffer) {
  const ir::Graph g = mlp_with_batchnorm(false);
  const Bindings a = random_bindings(g, 7), b = random_bindings(g, 7), c = random_bindings(g, 8);
  ASSERT_EQ(a.size(), 7u);  // data, 2 fc, 4 bn
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(same_bits(t, b.at(name))) << name;
    EXPECT_FALSE(same_bits(t, c.at(name))) << name;
  }
}

TEST(InterpreterRandom, EachVariableHasItsOwnStream) {
  const Bindings without = random_bindings(mlp_with_batchnorm(false), 3);
  const Bindings with = random_bindings(mlp_with_batchnorm(true), 3);
  ASSERT_EQ(with.count("extra"), 1u);
  for (const auto& [name, t] : without) {
    EXPECT_TRUE(same_bits(t, with.at(name))) << name;
  }
}

TEST(InterpreterRandom, ValuesFollowTheDocumentedRanges) {
  const Bindings v = random_bindings(mlp_with_batchnorm(false), 11);
  auto range = [&](const std::string& name) {
    const std::vector<double> x = to_f64_vector(v.at(name));
    return std::pair(*std::min_element(x.begin(), x.end()), *std::max_element(x.begin(), x.end()));
  };
  auto [dlo, dhi] = range("data");  // inputs: [-1, 1)
  EXPECT_GE(dlo, -1.0);
  EXPECT_LT(dhi, 1.0);
  EXPECT_LT(dlo, -0.5);
  EXPECT_GT(dhi, 0.5);
  auto [wlo, whi] = range("fc_weight");  // fan-in 16: [-1/4, 1/4), and the scale is not smaller
  EXPECT_GE(wlo, -0.25);
  EXPECT_LT(whi, 0.25);
  EXPECT_GT(std::max(-wlo, whi), 0.15);
  auto [vlo, vhi] = range("bn_moving_var");  // positive: [0.5, 1.5)
  EXPECT_GE(vlo, 0.5);
  EXPECT_LT(vhi, 1.5);
}

TEST(InterpreterRandom, GivenTensorsAreKeptAsGiven) {
  const ir::Graph g = mlp_with_batchnorm(false);
  const Tensor data = Tensor::zeros({DType::f32, {4, 16}});
  const Bindings v = random_bindings(g, 1, {{"data", data}});
  EXPECT_EQ(v.at("data").raw(), data.raw());
  EXPECT_EQ(v.size(), 7u);
}

TEST(InterpreterRandom, VariableWithoutTypeIsNamed) {
  register_test_ops();
  GraphBuilder b;
  b.output(b.op(kTwice, {b.param("w")}));
  EXPECT_ERROR(random_bindings(b.finish(false), 0), "variable 'w' has no type");
}

std::vector<double> column(const Tensor& t, int64_t width, int64_t col) {
  std::vector<double> out;
  for (int64_t i = col; i < t.size(); i += width) out.push_back(t.get_f64(i));
  return out;
}

void expect_ids_below(const std::vector<double>& ids, double limit, bool expect_all_values) {
  std::set<double> seen;
  for (double id : ids) {
    ASSERT_EQ(id, std::floor(id));
    ASSERT_GE(id, 0);
    ASSERT_LT(id, limit);
    seen.insert(id);
  }
  if (expect_all_values) {
    EXPECT_EQ(seen.size(), static_cast<size_t>(limit));
  }
}

TEST(InterpreterRandom, EmbeddingInputsGetIdsBelowInputDim) {
  GraphBuilder b;
  auto tokens = b.input("tokens", {DType::f32, {2, 50}});
  b.output(b.op("Embedding", {tokens, b.param("embed_weight")}, {{"input_dim", "7"}, {"output_dim", "4"}}));
  const Bindings v = random_bindings(b.finish(), 5);
  expect_ids_below(to_f64_vector(v.at("tokens")), 7, true);
}

// Sockeye's `source`: [N, T, 3] split along the last axis into a word id and two factor
// ids, each read by an Embedding with its own vocabulary.
TEST(InterpreterRandom, SplitFactorsGetTheirOwnVocabulary) {
  GraphBuilder b;
  auto source = b.input("source", {DType::f32, {2, 40, 3}});
  auto parts = b.op_multi("SliceChannel", {source}, {{"num_outputs", "3"}, {"axis", "2"}, {"squeeze_axis", "True"}});
  const char* dims[] = {"1000", "8", "6"};
  for (int k = 0; k < 3; ++k)
    b.output(b.op("Embedding", {parts[k], b.param(fmt::format("embed{}_weight", k))},
                  {{"input_dim", dims[k]}, {"output_dim", "4"}}));
  const Bindings v = random_bindings(b.finish(), 9);
  const Tensor& ids = v.at("source");
  expect_ids_below(column(ids, 3, 0), 1000, false);
  const std::vector<double> words = column(ids, 3, 0);
  EXPECT_GT(*std::max_element(words.begin(), words.end()), 100);  // words use the large vocabulary
  expect_ids_below(column(ids, 3, 1), 8, true);
  expect_ids_below(column(ids, 3, 2), 6, true);
}

TEST(InterpreterRandom, IntegerInputsWithoutABoundAreSmallNonNegative) {
  GraphBuilder b;
  b.output(b.op("Cast", {b.input("k", {DType::i32, {64}})}, {{"dtype", "float32"}}));
  const Bindings v = random_bindings(b.finish(), 2);
  expect_ids_below(to_f64_vector(v.at("k")), 128, false);
}

}  // namespace
}  // namespace ampfuse::runtime
