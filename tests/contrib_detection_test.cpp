// The contrib detection ops (ir/ops/contrib_detection.cpp, runtime/reference/
// detection_kernels.cpp) against MXNet 1.9.1: tests/data/detection/cases.json holds inputs,
// attributes and MXNet's outputs (written by tests/data/detection/make_cases.py): box_nms's
// sort order and ties, topk, valid_thresh, id_index, force_suppress, background_id, the
// formats, the -1 rows; box_decode's formats, stds and clip; ROIAlign's adaptive and fixed
// sampling grids, `aligned`, regions partly or wholly outside the features, a negative
// batch index. Then type inference's refusals, and the gradients (MXNet's: box_nms routes
// each kept row's gradient back whole, ROIAlign spreads it over the bilinear taps,
// box_decode has none).
#include "engine/execution/executor.h"
#include "engine/lower.h"
#include "ir/builder.h"
#include "ir/error.h"
#include "ir/op_registry.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;
using Attrs = std::map<std::string, std::string>;

nlohmann::json load_cases() {
  std::ifstream f(std::filesystem::path(AMPFUSE_TESTDATA_DIR) / "detection" / "cases.json");
  EXPECT_TRUE(f) << "missing tests/data/detection/cases.json";
  return nlohmann::json::parse(f);
}

Tensor tensor_of(const nlohmann::json& j) {
  Tensor t(TensorType{DType::f32, j["shape"].get<Shape>()});
  const std::vector<double> v = j["values"].get<std::vector<double>>();
  for (size_t i = 0; i < v.size(); ++i) t.set_f64(static_cast<int64_t>(i), v[i]);
  return t;
}

ir::Graph one_node(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> refs;
  for (size_t i = 0; i < ins.size(); ++i) refs.push_back(b.input(fmt::format("x{}", i), ins[i]));
  b.output(b.op(op, refs, attrs, "node"));
  return b.finish();
}

TEST(ContribDetection, MatchesMxnet) {
  const nlohmann::json cases = load_cases();
  ASSERT_GT(cases["cases"].size(), 10u);
  for (const nlohmann::json& c : cases["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<TensorType> types;
    runtime::Bindings vars;
    for (size_t i = 0; i < c["inputs"].size(); ++i) {
      Tensor t = tensor_of(c["inputs"][i]);
      types.push_back(t.type());
      vars.emplace(fmt::format("x{}", i), t);
    }
    const ir::Graph g = one_node(c["op"], types, c["attrs"].get<Attrs>());
    const std::vector<Tensor> got = runtime::interpret(g, vars);
    const Tensor want = tensor_of(c["outputs"][0]);
    ASSERT_EQ(got[0].shape(), want.shape());
    for (int64_t i = 0; i < want.size(); ++i) {
      const double w = want.get_f64(i), d = got[0].get_f64(i);
      ASSERT_NEAR(d, w, 2e-6 * std::max(1.0, std::fabs(w))) << "element " << i;
    }
  }
}

// The comparison above sees a wrong order: box_nms's first row is the highest score.
TEST(ContribDetection, KeptBoxesComeHighestScoreFirst) {
  Tensor boxes(TensorType{DType::f32, {1, 2, 6}});
  const double rows[2][6] = {{0, 0.2, 0, 0, 1, 1}, {0, 0.9, 5, 5, 6, 6}};
  for (int i = 0; i < 12; ++i) boxes.set_f64(i, rows[i / 6][i % 6]);
  const ir::Graph g = one_node("_contrib_box_nms", {boxes.type()}, {});
  const Tensor out = runtime::interpret(g, {{"x0", boxes}})[0];
  EXPECT_FLOAT_EQ(out.get_f64(1), 0.9f);
  EXPECT_FLOAT_EQ(out.get_f64(7), 0.2f);
}

Tensor f64_tensor(const Shape& shape, const std::vector<double>& v) {
  Tensor t(TensorType{DType::f64, shape});
  for (size_t i = 0; i < v.size(); ++i) t.set_f64(static_cast<int64_t>(i), v[i]);
  return t;
}

// ROIAlign is linear in the features: finite differences are exact whatever the regions,
// here one inside, one partly outside, one with a negative batch index (no gradient).
TEST(ContribDetection, RoiAlignGradientSpreadsOverTheTaps) {
  const Tensor rois = f64_tensor({3, 5}, {0, 1, 1, 6, 5, 1, -2, 3, 4, 9, -1, 0, 0, 2, 2});
  for (const Attrs& a : {Attrs{{"pooled_size", "(2,3)"}, {"spatial_scale", "0.5"}},
                         Attrs{{"pooled_size", "(3,2)"}, {"spatial_scale", "1"}, {"sample_ratio", "2"}, {"aligned", "True"}}}) {
    SCOPED_TRACE(::testing::PrintToString(a));
    ir::GraphBuilder b;
    b.output(b.op("_contrib_ROIAlign", {b.input("data", {DType::f64, {2, 3, 5, 7}}), b.input("rois", rois.type())}, a));
    EXPECT_TRUE(testing::check_gradients(b.finish(), {.wrt = {"data"}, .given = {{"rois", rois}}, .max_elements = 210}));
  }
}

// Kept rows carry their gradient back to the rows they came from; the suppressed row (IoU
// 0.85 with a higher-scoring one) and the -1 rows get zeros. With out_format != in_format
// the row is still copied back as it is (MXNet's nms_backward: no conversion Jacobian).
TEST(ContribDetection, BoxNmsGradientGoesBackToTheKeptRows) {
  const Tensor boxes = f64_tensor({1, 4, 6}, {0, 0.5, 0, 0, 2, 2,  0, 0.9, 0, 0, 2, 1.7,
                                              0, 0.7, 5, 5, 6, 6,  0, 0.1, 9, 9, 9.5, 9.5});
  ir::GraphBuilder b;
  b.output(b.op("_contrib_box_nms", {b.input("data", boxes.type())}, {{"valid_thresh", "0.2"}}));
  const ir::Graph g = b.finish();
  EXPECT_TRUE(testing::check_gradients(g, {.given = {{"data", boxes}}, .max_elements = 24}));
  for (const char* out_format : {"corner", "center"}) {
    SCOPED_TRACE(out_format);
    ir::GraphBuilder c;
    c.output(c.op("_contrib_box_nms", {c.input("data", boxes.type())}, {{"valid_thresh", "0.2"}, {"out_format", out_format}}));
    const engine::BackwardGraph bg = engine::build_backward(c.finish(), {.wrt = {}, .with_inputs = true});
    std::vector<double> dy(24);
    for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<double>(i + 1);
    const Tensor dx = runtime::interpret(bg.graph, {{"data", boxes}, {bg.head_grads.at(0), f64_tensor({1, 4, 6}, dy)}}).at(1);
    // Output rows: input row 1 (score 0.9), then row 2 (0.7); row 0 is suppressed, row 3 invalid.
    std::vector<double> want(24, 0);
    for (int k = 0; k < 6; ++k) want[6 + k] = dy[k], want[12 + k] = dy[6 + k];
    EXPECT_EQ(runtime::to_f64_vector(dx), want);
  }
}

// box_decode has no gradient (MXNet: MakeZeroGradNodes): the offsets' gradient is zeros.
TEST(ContribDetection, BoxDecodeHasNoGradient) {
  ir::GraphBuilder b;
  b.output(b.op("_contrib_box_decode", {b.input("data", {DType::f32, {1, 3, 4}}), b.input("anchors", {DType::f32, {1, 3, 4}})}));
  const engine::BackwardGraph bg = engine::build_backward(b.finish(), {.wrt = {"data"}});
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 1);
  EXPECT_EQ(runtime::to_f64_vector(runtime::interpret(bg.graph, vars).at(1)), std::vector<double>(12, 0.0));
}

// In a graph, between fused elementwise kernels, under bf16 AMP: the executor runs each op's
// reference kernel and gives the interpreter's result (box_nms and ROIAlign are widest ops,
// so under AMP they take the f32 of their inputs; box_decode is kept in f32).
TEST(ContribDetection, RunInTheExecutorUnderAmp) {
  const nlohmann::json cases = load_cases();
  for (const char* name : {"nms_ties_topk_valid", "decode_corner_std", "roi_align_sample_ratio"}) {
    SCOPED_TRACE(name);
    const nlohmann::json* c = nullptr;
    for (const nlohmann::json& k : cases["cases"])
      if (k["name"] == name) c = &k;
    ASSERT_NE(c, nullptr);
    ir::GraphBuilder b;
    runtime::Bindings vars;
    std::vector<ir::ValueRef> ins;
    for (size_t i = 0; i < (*c)["inputs"].size(); ++i) {
      Tensor t = tensor_of((*c)["inputs"][i]);
      vars.emplace(fmt::format("x{}", i), t);
      ins.push_back(b.op("relu", {b.op("relu", {b.input(fmt::format("x{}", i), t.type())})}));
    }
    const ir::Graph g = [&] {
      b.output(b.op("_mul_scalar", {b.op((*c)["op"], ins, (*c)["attrs"].get<Attrs>())}, {{"scalar", "2"}}));
      return b.finish();
    }();
    const std::vector<Tensor> want = runtime::interpret(g, vars);
    engine::AmpOptions amp;
    amp.target = DType::bf16;
    const std::vector<Tensor> got = engine::Executable::compile(engine::convert_for_amp(g, amp)).run(vars);
    ASSERT_EQ(got[0].shape(), want[0].shape());
    double largest = 0, worst = 0;
    for (int64_t i = 0; i < want[0].size(); ++i) {
      largest = std::max(largest, std::fabs(want[0].get_f64(i)));
      worst = std::max(worst, std::fabs(got[0].get_f64(i) - want[0].get_f64(i)));
    }
    EXPECT_LE(worst, 1e-6 * largest);
  }
}

std::string inference_error(const std::string& op, const std::vector<TensorType>& ins, const Attrs& attrs) {
  try {
    one_node(op, ins, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(ContribDetection, InferenceRefusesWhatMxnetRefuses) {
  const TensorType boxes{DType::f32, {1, 10, 6}};
  EXPECT_NE(inference_error("_contrib_box_nms", {{DType::f32, {1, 10, 4}}}, {}).find("4 elements, 5 are needed"),
            std::string::npos);
  EXPECT_NE(inference_error("_contrib_box_nms", {boxes}, {{"score_index", "3"}}).find("one of the coordinates"),
            std::string::npos);
  EXPECT_NE(inference_error("_contrib_box_nms", {boxes}, {{"id_index", "1"}}).find("also score_index"),
            std::string::npos);
  EXPECT_NE(inference_error("_contrib_box_nms", {boxes}, {{"in_format", "xywh"}}).find("xywh"), std::string::npos);
  EXPECT_NE(inference_error("_contrib_box_decode", {{DType::f32, {2, 5, 4}}, {DType::f32, {1, 6, 4}}}, {})
                .find("must be (1, 5, 4)"),
            std::string::npos);
  EXPECT_EQ(inference_error("_contrib_box_decode", {{DType::f32, {2, 5, 4}}, {DType::f32, {1, 5, 4}}}, {}), "no error");
  const TensorType features{DType::f32, {1, 8, 16, 16}};
  const Attrs roi = {{"pooled_size", "(7, 7)"}, {"spatial_scale", "0.0625"}};
  EXPECT_NE(inference_error("_contrib_ROIAlign", {features, {DType::f32, {4, 4}}}, roi).find("must be (R, 5)"),
            std::string::npos);
  Attrs psroi = roi;
  psroi["position_sensitive"] = "True";
  EXPECT_NE(inference_error("_contrib_ROIAlign", {features, {DType::f32, {4, 5}}}, psroi).find("not supported"),
            std::string::npos);
  EXPECT_EQ(one_node("_contrib_ROIAlign", {features, {DType::f32, {4, 5}}}, roi).nodes.back().outputs[0].shape,
            (Shape{4, 8, 7, 7}));
}

TEST(ContribDetection, AmpClassesFromMxnetsLists) {
  const ir::OpDef& nms = ir::OpRegistry::global().get("_contrib_box_nms");
  EXPECT_EQ(nms.amp_bf16, ir::AmpClass::widest);
  EXPECT_EQ(nms.amp_fp16, ir::AmpClass::widest);
  EXPECT_EQ(&ir::OpRegistry::global().resolve("_contrib_box_non_maximum_suppression"), &nms);
  EXPECT_EQ(ir::OpRegistry::global().get("_contrib_box_decode").amp_bf16, ir::AmpClass::fp32);
  EXPECT_EQ(ir::OpRegistry::global().get("_contrib_ROIAlign").amp_bf16, ir::AmpClass::widest);
  EXPECT_EQ(ir::OpRegistry::global().get("_contrib_ROIAlign").amp_fp16, ir::AmpClass::widest);
}

}  // namespace
}  // namespace ampfuse
