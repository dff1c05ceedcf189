// _contrib_ModulatedDeformableConvolution against MXNet 1.9.1's outputs
// (tests/data/deformable_conv/, written by make_cases.py there): offsets past every edge,
// fractional and integral, masks, groups, deformable groups, stride, dilation, padding,
// no_bias; the interpreter and the executor (an external op). Then its shapes, refusals and
// AMP class.
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "engine/passes/autodiff.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "runtime/tensor.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <string>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

constexpr const char* kOp = "_contrib_ModulatedDeformableConvolution";

nlohmann::json load_cases() {
  std::ifstream f(std::string(AMPFUSE_TESTDATA_DIR) + "/deformable_conv/mxnet_cases.json");
  if (!f) throw std::runtime_error("missing tests/data/deformable_conv/mxnet_cases.json");
  return nlohmann::json::parse(f);
}

// One deformable convolution of variables named like its inputs, of the given shapes.
ir::Graph dcn_graph(const std::map<std::string, std::string>& attrs, const std::map<std::string, Shape>& shapes,
                    DType dtype = DType::f32) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> in;
  for (const char* name : {"data", "offset", "mask", "weight", "bias"})
    if (shapes.count(name)) in.push_back(b.input(name, TensorType{dtype, shapes.at(name)}));
  b.output(b.op(kOp, in, attrs, "dcn"));
  return b.finish();
}

struct Case {
  std::string name;
  ir::Graph graph;
  runtime::Bindings inputs;
  Shape out_shape;
  std::vector<float> want;
};

Case read_case(const nlohmann::json& c) {
  std::map<std::string, Shape> shapes;
  runtime::Bindings inputs;
  for (const auto& [name, v] : c.at("inputs").items()) {
    const Shape shape = v.at("shape").get<Shape>();
    const std::vector<float> values = v.at("values").get<std::vector<float>>();
    Tensor t(TensorType{DType::f32, shape});
    std::copy(values.begin(), values.end(), t.data<float>());
    shapes[name] = shape;
    inputs.emplace(name, std::move(t));
  }
  return {c.at("name"), dcn_graph(c.at("attrs").get<std::map<std::string, std::string>>(), shapes), std::move(inputs),
          c.at("out_shape").get<Shape>(), c.at("out").get<std::vector<float>>()};
}

// MXNet's BLAS adds a tap's products in its own order: within f32 rounding of the sum of
// their magnitudes (a few dozen products of values below 4 here).
void expect_mxnets_values(const Tensor& got, const Case& c) {
  ASSERT_EQ(got.shape(), c.out_shape);
  ASSERT_EQ(static_cast<size_t>(got.size()), c.want.size());
  for (size_t i = 0; i < c.want.size(); ++i)
    ASSERT_NEAR(got.data<float>()[i], c.want[i], 2e-5 * (1 + std::fabs(c.want[i]))) << "element " << i;
}

TEST(DeformableConv, InterpreterAndExecutorGiveMxnetsValues) {
  const nlohmann::json cases = load_cases();
  ASSERT_GE(cases.size(), 5u);
  for (const auto& json : cases) {
    const Case c = read_case(json);
    SCOPED_TRACE(c.name);
    expect_mxnets_values(runtime::interpret(c.graph, c.inputs).at(0), c);
    expect_mxnets_values(engine::Executable::compile(c.graph).run(c.inputs).at(0), c);
  }
}

// The comparison sees what the offsets and the mask do: moving one offset by a quarter
// pixel, or zeroing one mask value, changes MXNet's output beyond the tolerance.
TEST(DeformableConv, ComparisonSeesOffsetsAndMask) {
  const Case c = read_case(load_cases().at(0));
  for (const char* input : {"offset", "mask"}) {
    SCOPED_TRACE(input);
    runtime::Bindings changed = c.inputs;
    Tensor& t = changed.at(input);
    // Element 7 of tap 0's dy (offset) or tap 0's mask: an output position inside the image.
    t.data<float>()[7] = std::string(input) == "offset" ? t.data<float>()[7] + 0.25f : 0.0f;
    const Tensor got = runtime::interpret(c.graph, changed).at(0);
    double worst = 0;
    for (size_t i = 0; i < c.want.size(); ++i) worst = std::max(worst, std::fabs(double(got.data<float>()[i]) - c.want[i]));
    EXPECT_GT(worst, 1e-2);
  }
}

TEST(DeformableConv, ShapesAndRefusals) {
  const std::map<std::string, std::string> attrs = {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "4"}};
  // Offset, mask, weight and bias shapes follow from the data and the attributes.
  {
    ir::GraphBuilder b;
    const ir::ValueRef x = b.input("data", TensorType{DType::f32, {2, 6, 9, 7}});
    const ir::ValueRef off = b.input("offset", TensorType{DType::f32, {2, 36, 5, 4}});
    const ir::ValueRef mask = b.input("mask", TensorType{DType::f32, {2, 18, 5, 4}});
    b.output(b.op(kOp, {x, off, mask, b.param("w"), b.param("b")},
                  {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}, {"num_filter", "4"},
                   {"num_group", "2"}, {"num_deformable_group", "2"}},
                  "dcn"));
    const ir::Graph g = b.finish();
    EXPECT_EQ(g.nodes.back().outputs.at(0), (TensorType{DType::f32, {2, 4, 5, 4}}));
    EXPECT_EQ(g.nodes.at(static_cast<size_t>(*g.find_var("w"))).outputs.at(0), (TensorType{DType::f32, {4, 3, 3, 3}}));
    EXPECT_EQ(g.nodes.at(static_cast<size_t>(*g.find_var("b"))).outputs.at(0), (TensorType{DType::f32, {4}}));
  }
  const std::map<std::string, Shape> ok = {
      {"data", {1, 2, 5, 5}}, {"offset", {1, 18, 5, 5}}, {"mask", {1, 9, 5, 5}}, {"weight", {4, 2, 3, 3}}, {"bias", {4}}};
  EXPECT_NO_THROW(dcn_graph(attrs, ok));
  auto with = [&](const char* name, Shape s) {
    std::map<std::string, Shape> m = ok;
    m[name] = std::move(s);
    return m;
  };
  EXPECT_ERROR(dcn_graph(attrs, with("offset", {1, 9, 5, 5})), "input 1 (offset) has shape [1,9,5,5] but [1,18,5,5]");
  EXPECT_ERROR(dcn_graph(attrs, with("mask", {1, 9, 4, 5})), "input 2 (mask) has shape [1,9,4,5] but [1,9,5,5]");
  EXPECT_ERROR(dcn_graph(attrs, with("data", {1, 2, 5})), "must be 4-d (N, C, H, W)");
  auto attrs_with = [&](const char* key, const char* value) {
    std::map<std::string, std::string> a = attrs;
    a[key] = value;
    return a;
  };
  EXPECT_ERROR(dcn_graph(attrs_with("kernel", "(3, 3, 3)"), ok), "must be 2-d (h, w)");
  EXPECT_ERROR(dcn_graph(attrs_with("layout", "NCDHW"), ok), "only NCHW");
  EXPECT_ERROR(dcn_graph(attrs_with("num_group", "3"), ok), "num_group=3 does not divide the data's 2 channels");
  EXPECT_ERROR(dcn_graph(attrs_with("num_deformable_group", "4"), ok), "num_deformable_group=4 does not divide");
  EXPECT_ERROR(dcn_graph(attrs_with("im2col_step", "2"), with("data", {3, 2, 5, 5})), "multiple of it");
  EXPECT_ERROR(dcn_graph(attrs, ok, DType::i32), "the data must be a float tensor");
}

// In none of MXNet 1.9.1's lists: f32 for both targets, so AMP leaves the node in f32 even
// when the data arrives in bf16.
TEST(DeformableConv, AmpKeepsItInF32) {
  const ir::OpDef& d = ir::OpRegistry::global().get(kOp);
  EXPECT_EQ(d.amp_fp16, ir::AmpClass::fp32);
  EXPECT_EQ(d.amp_bf16, ir::AmpClass::fp32);
  const Case c = read_case(load_cases().at(0));
  engine::AmpOptions o;
  o.target = DType::bf16;
  const ir::Graph converted = engine::convert_for_amp(c.graph, o);
  int seen = 0;
  for (const ir::Node& n : converted.nodes) {
    if (n.op != kOp) continue;
    ++seen;
    EXPECT_EQ(n.outputs.at(0).dtype, DType::f32);
  }
  EXPECT_EQ(seen, 1);
}

// No gradient rule (MXNet 1.9.1's CPU backward is "only implemented in GPU"): differentiating
// through it is an error naming the node.
TEST(DeformableConv, DifferentiatingThroughItNamesTheNode) {
  const Case c = read_case(load_cases().at(0));
  EXPECT_ERROR(engine::build_backward(c.graph, {.wrt = {"data"}}), "'dcn'");
  EXPECT_ERROR(engine::build_backward(c.graph, {.wrt = {"data"}}), "has no gradient rule yet");
}

}  // namespace
}  // namespace ampfuse
