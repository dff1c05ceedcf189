// _contrib_AdaptiveAvgPooling2D against MXNet 1.9.1's outputs (tests/data/adaptive_pool/,
// written by make_cases.py there): the interpreter and the executor, bit for bit; its
// shapes, its refusals and its AMP classes.
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <string>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

constexpr const char* kOp = "_contrib_AdaptiveAvgPooling2D";

// One pooling node on input "x" of `shape`; no output_size attribute for "()".
ir::Graph pooling_graph(const Shape& shape, const std::string& output_size, DType dtype = DType::f32) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", TensorType{dtype, shape});
  std::map<std::string, std::string> attrs;
  if (output_size != "()") attrs = {{"output_size", output_size}};
  b.output(b.op(kOp, {x}, attrs, "pool"));
  return b.finish();
}

// The input make_cases.py gives MXNet: element i is ((i * 37) % 101 - 50) / 7 in f32.
Tensor case_input(const Shape& shape) {
  Tensor t(TensorType{DType::f32, shape});
  for (int64_t i = 0; i < t.size(); ++i) t.data<float>()[i] = static_cast<float>((i * 37) % 101 - 50) / 7.0f;
  return t;
}

TEST(AdaptiveAvgPool, InterpreterAndExecutorGiveMxnetsBits) {
  std::ifstream f(std::string(AMPFUSE_TESTDATA_DIR) + "/adaptive_pool/mxnet_cases.json");
  ASSERT_TRUE(f) << "missing tests/data/adaptive_pool/mxnet_cases.json";
  const nlohmann::json cases = nlohmann::json::parse(f);
  ASSERT_GE(cases.size(), 7u);
  for (const auto& c : cases) {
    const Shape shape = c.at("shape").get<Shape>();
    const std::string size = c.at("output_size");
    SCOPED_TRACE(fmt::format("{} output_size={}", ir::shape_str(shape), size));
    const ir::Graph g = pooling_graph(shape, size);
    const runtime::Bindings vars = {{"x", case_input(shape)}};
    const std::vector<float> want = c.at("out").get<std::vector<float>>();
    const Tensor interpreted = runtime::interpret(g, vars).at(0);
    const Tensor executed = engine::Executable::compile(g).run(vars).at(0);
    for (const Tensor* got : {&interpreted, &executed}) {
      ASSERT_EQ(got->shape(), c.at("out_shape").get<Shape>());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got->data<float>()[i], want[i]) << "element " << i;
    }
  }
}

// Low-precision data is averaged in f32 and rounded once: the result is the f32 result on
// the same (rounded) values, rounded to the data's type.
TEST(AdaptiveAvgPool, LowPrecisionDataRoundsOnce) {
  const Shape shape{1, 2, 7, 5};
  const Tensor x = case_input(shape);
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(ir::dtype_name(t));
    Tensor low(TensorType{t, shape}), widened(TensorType{DType::f32, shape});
    for (int64_t i = 0; i < x.size(); ++i) {
      low.set_f64(i, x.get_f64(i));
      widened.set_f64(i, low.get_f64(i));
    }
    const Tensor f32 = runtime::interpret(pooling_graph(shape, "(3, 2)"), {{"x", widened}}).at(0);
    const Tensor got = runtime::interpret(pooling_graph(shape, "(3, 2)", t), {{"x", low}}).at(0);
    ASSERT_EQ(got.type(), (TensorType{t, {1, 2, 3, 2}}));
    Tensor rounded(got.type());
    for (int64_t i = 0; i < got.size(); ++i) {
      rounded.set_f64(i, f32.get_f64(i));
      EXPECT_EQ(got.get_f64(i), rounded.get_f64(i)) << "element " << i;
    }
  }
}

TEST(AdaptiveAvgPool, ShapesAndRefusals) {
  EXPECT_EQ(pooling_graph({2, 3, 8, 8}, "()").nodes.back().outputs.at(0), (TensorType{DType::f32, {2, 3, 1, 1}}));
  EXPECT_EQ(pooling_graph({2, 3, 8, 8}, "4").nodes.back().outputs.at(0), (TensorType{DType::f32, {2, 3, 4, 4}}));
  EXPECT_EQ(pooling_graph({1, 1, 2, 2}, "(5, 3)").nodes.back().outputs.at(0), (TensorType{DType::f32, {1, 1, 5, 3}}));
  EXPECT_ERROR(pooling_graph({2, 3, 8}, "2"), "must be 4-d (N, C, H, W)");
  EXPECT_ERROR(pooling_graph({2, 3, 8, 8}, "(1, 2, 3)"), "output_size=(1, 2, 3) must have at most two values");
  EXPECT_ERROR(pooling_graph({2, 3, 8, 8}, "(0, 2)"), "output_size=(0, 2) must be positive");
  EXPECT_ERROR(pooling_graph({2, 3, 8, 8}, "2", DType::i32), "the data must be a float tensor");
}

// MXNet 1.9.1's lists: FP16_FP32_FUNCS for fp16, FP32_FUNCS for bf16.
TEST(AdaptiveAvgPool, AmpClassesFollowMxnetsLists) {
  const ir::OpDef& d = ir::OpRegistry::global().get(kOp);
  EXPECT_EQ(d.amp_fp16, ir::AmpClass::neutral);
  EXPECT_EQ(d.amp_bf16, ir::AmpClass::fp32);
}

}  // namespace
}  // namespace ampfuse
