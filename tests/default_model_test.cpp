// The embedded default model: its structure, and that it runs to a probability per class.
#include "models/default_model.h"
#include "engine/execution/executor.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ampfuse::engine {
namespace {

using ir::DType;
using ir::TensorType;
using models::build_default_model;

TEST(DefaultModel, HasTheDocumentedBlocksAndTypes) {
  const ir::Graph g = build_default_model(2);
  std::map<std::string, int> ops;
  for (const ir::Node& n : g.nodes)
    if (!n.is_var()) ++ops[n.op];
  const std::map<std::string, int> expected = {
      {"Convolution", 1}, {"BatchNorm", 1}, {"Activation", 1}, {"Pooling", 1},     {"Flatten", 1},
      {"FullyConnected", 3}, {"LeakyReLU", 1}, {"elemwise_add", 1}, {"LayerNorm", 1}, {"softmax", 1}};
  EXPECT_EQ(ops, expected);

  const std::optional<int32_t> data = g.find_var("data");
  ASSERT_TRUE(data);
  EXPECT_EQ(g.nodes[*data].role, ir::VarRole::input);
  EXPECT_EQ(g.nodes[*data].outputs.at(0), (TensorType{DType::f32, {2, 3, 32, 32}}));
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.output_name(0), "softmax_output");
  EXPECT_EQ(g.type(g.outputs[0]), (TensorType{DType::f32, {2, 10}}));
  // Convolution keeps 32x32 (pad 1), pooling halves it: the first FullyConnected sees 16*16*16.
  const std::optional<int32_t> w = g.find_var("fc1_weight");
  ASSERT_TRUE(w);
  EXPECT_EQ(g.nodes[*w].outputs.at(0), (TensorType{DType::f32, {256, 4096}}));
  EXPECT_EQ(g.nodes[*g.find_var("bn0_moving_var")].role, ir::VarRole::aux);
}

TEST(DefaultModel, RunsToFiniteProbabilities) {
  const ir::Graph g = build_default_model(3);
  const std::vector<runtime::Tensor> out = runtime::interpret(g, runtime::random_bindings(g, 0));
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].type(), (TensorType{DType::f32, {3, 10}}));
  std::vector<double> row_sums(3, 0.0);
  for (int64_t i = 0; i < out[0].size(); ++i) {
    const double p = out[0].get_f64(i);
    ASSERT_TRUE(std::isfinite(p)) << "element " << i;
    ASSERT_GT(p, 0.0);
    ASSERT_LT(p, 1.0);
    row_sums[i / 10] += p;
  }
  for (double s : row_sums) {
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  // Different images give different predictions (the input reaches the output).
  EXPECT_NE(out[0].get_f64(0), out[0].get_f64(10));
}

TEST(DefaultModel, BatchZeroIsEmptyAndANegativeOneIsRefused) {
  EXPECT_ERROR(build_default_model(-1), "batch of 0 or more, not -1");
  const ir::Graph g = build_default_model(0);
  const runtime::Bindings vars = runtime::random_bindings(g, 1);
  const std::vector<runtime::Tensor> out = Executable::compile(g).run(vars);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (ir::Shape{0, 10}));
}

}  // namespace
}  // namespace ampfuse::engine
