// Gradients of softmax, the normalizations and the loss heads (issue 15, "Training I"):
// softmax, log_softmax, softmin, SoftmaxActivation and the norms against finite differences
// in f64; the loss heads, whose gradient is no derivative of their output, against MXNet
// 1.9.1's formulas written out here; the backward graphs compiled by the executor in f32
// against the interpreter.
#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "tests/gradient_check.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using ir::ValueRef;
using runtime::Tensor;
using testing::check_gradients;
using Attrs = std::map<std::string, std::string>;

Tensor f64_tensor(const Shape& s, const std::vector<double>& values) {
  Tensor t(TensorType{DType::f64, s});
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.size());
  for (int64_t i = 0; i < t.size(); ++i) t.data<double>()[i] = values[static_cast<size_t>(i)];
  return t;
}

ir::Graph unary_graph(const std::string& op, const Shape& s, const Attrs& attrs) {
  ir::GraphBuilder b;
  b.output(b.op(op, {b.input("x", {DType::f64, s})}, attrs));
  return b.finish();
}

// data -> op(data, gamma, beta), gamma and beta params of the shape the op infers.
ir::Graph norm_graph(const std::string& op, const Shape& s, const Attrs& attrs) {
  ir::GraphBuilder b;
  b.output(b.op(op, {b.input("x", {DType::f64, s}), b.param("gamma"), b.param("beta")}, attrs));
  return b.finish();
}

TEST(LossGradients, SoftmaxFamilyMatchesFiniteDifferences) {
  struct Case {
    Shape shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {{{7}, {}},
                                   {{3, 5}, {{"axis", "0"}}},
                                   {{2, 7, 3}, {{"axis", "1"}, {"temperature", "2.5"}}},
                                   {{2, 3, 1}, {{"axis", "-1"}}},
                                   {{1, 5}, {{"temperature", "0.7"}}}};
  for (const char* op : {"softmax", "log_softmax", "softmin"})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(op) + " " + ir::shape_str(c.shape));
      EXPECT_TRUE(check_gradients(unary_graph(op, c.shape, c.attrs)));
    }
  for (const auto& [mode, shape] : {std::pair{"instance", Shape{3, 5}}, std::pair{"instance", Shape{2, 3, 5}},
                                    std::pair{"channel", Shape{2, 3, 5}}, std::pair{"channel", Shape{1, 7, 2, 3}}}) {
    SCOPED_TRACE(std::string("SoftmaxActivation ") + mode + " " + ir::shape_str(shape));
    EXPECT_TRUE(check_gradients(unary_graph("SoftmaxActivation", shape, {{"mode", mode}})));
  }
}

// A softmax whose output dtype differs from its input's: the gradient has the input's.
TEST(LossGradients, SoftmaxGradientHasTheInputsDtype) {
  ir::GraphBuilder b;
  b.output(b.op("softmax", {b.param("x", TensorType{DType::f32, {2, 3}})}, {{"dtype", "float64"}}));
  const engine::BackwardGraph bg = engine::build_backward(b.finish());
  EXPECT_EQ(bg.graph.type(bg.graph.outputs.at(1)), (TensorType{DType::f32, {2, 3}}));
}

TEST(LossGradients, NormalizationsMatchFiniteDifferences) {
  struct Case {
    std::string op;
    Shape shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"LayerNorm", {3, 7}, {}},
      {"LayerNorm", {2, 5, 3}, {{"axis", "1"}, {"eps", "0.01"}}},
      {"LayerNorm", {5, 2}, {{"axis", "0"}}},
      {"LayerNorm", {7}, {}},
      {"InstanceNorm", {2, 3, 5}, {}},
      {"InstanceNorm", {1, 2, 3, 2}, {{"eps", "0.1"}}},
      {"GroupNorm", {2, 6, 5}, {{"num_groups", "3"}}},
      {"GroupNorm", {3, 4}, {{"num_groups", "2"}}},
      {"GroupNorm", {1, 3, 2, 2}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + ir::shape_str(c.shape));
    EXPECT_TRUE(check_gradients(norm_graph(c.op, c.shape, c.attrs)));
  }
  for (const auto& [mode, shape] : {std::pair{"instance", Shape{7}}, std::pair{"instance", Shape{3, 5}},
                                    std::pair{"channel", Shape{2, 3, 5}}, std::pair{"channel", Shape{3, 5}},
                                    std::pair{"spatial", Shape{2, 3, 5}}, std::pair{"spatial", Shape{1, 2, 3, 2}}}) {
    SCOPED_TRACE(std::string("L2Normalization ") + mode + " " + ir::shape_str(shape));
    EXPECT_TRUE(check_gradients(unary_graph("L2Normalization", shape, {{"mode", mode}, {"eps", "0.001"}})));
  }  // LRN: odd and even windows, clipped at the edges, one channel alone.
  for (const auto& [nsize, shape] : {std::pair{"3", Shape{2, 5, 2, 3}}, std::pair{"4", Shape{1, 6, 3, 1}},
                                     std::pair{"5", Shape{1, 3, 2, 2}}, std::pair{"1", Shape{2, 1, 1, 3}}}) {
    SCOPED_TRACE(std::string("LRN nsize=") + nsize + " " + ir::shape_str(shape));
    EXPECT_TRUE(check_gradients(
        unary_graph("LRN", shape, {{"nsize", nsize}, {"alpha", "0.5"}, {"beta", "0.75"}, {"knorm", "1.5"}})));
  }
}

// Low-precision data: the backward kernels widen exactly, compute in f32 and round each
// output once, so an f16 or bf16 gradient is the f32 gradient of the same values rounded.
TEST(LossGradients, LowPrecisionGradientsRoundTheF32OnesOnce) {
  struct Case {
    std::string op;
    Shape shape;
    Attrs attrs;
    bool affine;  // has gamma and beta
  };
  const std::vector<Case> cases = {{"LayerNorm", {3, 7}, {}, true},
                                   {"GroupNorm", {2, 4, 3}, {{"num_groups", "2"}}, true},
                                   {"L2Normalization", {3, 5}, {}, false},
                                   {"LRN", {1, 5, 2, 2}, {{"nsize", "3"}}, false}};
  for (const Case& c : cases)
    for (DType lowp : {DType::f16, DType::bf16}) {
      SCOPED_TRACE(c.op + " " + std::string(ir::dtype_name(lowp)));
      const auto graph = [&](DType t) {
        ir::GraphBuilder b;
        std::vector<ValueRef> ins = {b.input("x", {t, c.shape})};
        if (c.affine) {
          ins.push_back(b.param("gamma"));
          ins.push_back(b.param("beta"));
        }
        b.output(b.op(c.op, ins, c.attrs));
        return engine::build_backward(b.finish(), {.with_inputs = true}).graph;
      };
      const ir::Graph narrow = graph(lowp), wide = graph(DType::f32);
      const runtime::Bindings narrow_vars = runtime::random_bindings(narrow, 41);
      runtime::Bindings wide_vars;
      for (const auto& [name, t] : narrow_vars) wide_vars[name] = runtime::cast(t, DType::f32);
      const std::vector<Tensor> got = runtime::interpret(narrow, narrow_vars), want = runtime::interpret(wide, wide_vars);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 1; k < got.size(); ++k) {
        const Tensor rounded = runtime::cast(want[k], lowp);
        ASSERT_EQ(got[k].type(), rounded.type()) << "output " << k;
        for (int64_t i = 0; i < got[k].size(); ++i)
          EXPECT_EQ(got[k].get_f64(i), rounded.get_f64(i)) << "output " << k << " element " << i;
      }
    }
}

// output_mean_var: the normalized output differentiates; its statistics do not.
TEST(LossGradients, NormStatisticsOutputsAreRefused) {
  for (const char* op : {"LayerNorm", "GroupNorm"}) {
    SCOPED_TRACE(op);
    const auto graph = [op](bool with_statistics) {
      ir::GraphBuilder b;
      const std::vector<ValueRef> outs =
          b.op_multi(op, {b.input("x", {DType::f64, {2, 4, 3}}), b.param("gamma"), b.param("beta")},
                     {{"output_mean_var", "True"}});
      b.output(outs[0]);
      if (with_statistics) b.output(outs[1]);
      return b.finish();
    };
    EXPECT_TRUE(check_gradients(graph(false)));
    EXPECT_ERROR(engine::build_backward(graph(true)), "output_mean_var=True: the mean and standard deviation");
  }
}

// The backward ops check their operands like any op; the error names the node.
TEST(LossGradients, BackwardOpsRefuseMismatchedGradients) {
  ir::Graph g = ir::parse_graph(R"(graph {
  %dy = var input : f32[2,3]
  %y = var input : f32[2,4]
  %dx = _backward_softmax(%dy, %y) {axis=-1, dtype=f32}
  return %dx
})");
  const std::string message = testing::error_message([&] { ir::infer_types(g); });
  EXPECT_NE(message.find("dx"), std::string::npos) << message;
  EXPECT_NE(message.find("the output gradient has shape [2,3] but the value it differentiates has [2,4]"),
            std::string::npos)
      << message;  ir::Graph norm = ir::parse_graph(R"(graph {
  %dy = var input : f32[2,6,3]
  %x = var input : f32[2,6,3]
  %gamma = var param : f32[4]
  %grads = _backward_GroupNorm(%dy, %x, %gamma) {num_groups=4}
  return %grads
})");
  EXPECT_ERROR(ir::infer_types(norm), "num_groups=4 does not divide the channels of the data [2,6,3]");
}

// ---- loss heads: MXNet 1.9.1's implicit gradients ------------------------------------------

// The gradient of `wrt` of a graph whose only output is a loss head, and the forward output.
struct HeadGradient {
  std::vector<double> forward, grad;
};

HeadGradient head_gradient(const ir::Graph& g, const runtime::Bindings& vars, const std::string& wrt = "data") {
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {wrt}});
  EXPECT_TRUE(bg.head_grads.empty()) << "a loss head asks for no head gradient";
  const std::vector<Tensor> outs = runtime::interpret(bg.graph, vars);
  EXPECT_EQ(outs.at(1).type(), g.nodes.at(static_cast<size_t>(*g.find_var(wrt))).outputs.at(0));
  return {runtime::to_f64_vector(outs.at(0)), runtime::to_f64_vector(outs.at(1))};
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::fabs(want[i]))) << "element " << i;
}

ir::Graph softmax_output_graph(const Shape& data, const Shape& label, const Attrs& attrs) {
  ir::GraphBuilder b;
  b.output(b.op("SoftmaxOutput", {b.param("data", TensorType{DType::f64, data}), b.input("label", {DType::f64, label})},
                attrs));
  return b.finish();
}

// (softmax - target) * scale per row of `classes`, rows whose label is `ignored` zero;
// target: 1 - alpha at the label, alpha / (classes - 1) elsewhere.
std::vector<double> softmax_output_formula(const std::vector<double>& out, const std::vector<double>& labels,
                                           int64_t classes, float scale, float alpha = 0, std::optional<int> ignored = {}) {
  std::vector<double> g(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int label = static_cast<int>(labels[i / static_cast<size_t>(classes)]);
    const int64_t c = static_cast<int64_t>(i) % classes;
    const double target = c == label ? 1.0 - static_cast<double>(alpha) : static_cast<double>(alpha / (classes - 1));
    g[i] = ignored && label == *ignored ? 0.0 : (out[i] - target) * static_cast<double>(scale);
  }
  return g;
}

TEST(LossGradients, SoftmaxOutputNormalizationsAndIgnoreLabel) {
  // 5 rows of 7 classes; two rows are labelled -1, MXNet's default ignore_label.
  const std::vector<double> labels = {2, -1, 0, 6, -1};
  const runtime::Bindings vars = runtime::random_bindings(softmax_output_graph({5, 7}, {5}, {}), 3,
                                                          {{"label", f64_tensor({5}, labels)}});
  struct Case {
    Attrs attrs;
    float scale;  // MXNet's, in float
    bool ignore;
  };
  const std::vector<Case> cases = {
      {{}, 1.0f, false},
      {{{"grad_scale", "0.5"}}, 0.5f, false},
      {{{"normalization", "batch"}, {"grad_scale", "0.5"}}, 0.5f / 5, false},
      // valid counts the labels that are not ignore_label, with or without use_ignore.
      {{{"normalization", "valid"}}, 1.0f / 3, false},
      {{{"normalization", "valid"}, {"use_ignore", "True"}, {"grad_scale", "3"}}, 3.0f / 3, true},
      {{{"normalization", "null"}, {"use_ignore", "True"}}, 1.0f, true},
      {{{"normalization", "batch"}, {"use_ignore", "True"}}, 1.0f / 5, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.attrs));
    const HeadGradient h = head_gradient(softmax_output_graph({5, 7}, {5}, c.attrs), vars);
    expect_values(h.grad, softmax_output_formula(h.forward, labels, 7, c.scale, 0,
                                                 c.ignore ? std::optional<int>(-1) : std::nullopt));
  }
  // A label ignore_label names differently: use_ignore with ignore_label=0.
  const HeadGradient h = head_gradient(
      softmax_output_graph({5, 7}, {5}, {{"use_ignore", "True"}, {"ignore_label", "0"}, {"normalization", "valid"}}),
      vars);
  expect_values(h.grad, softmax_output_formula(h.forward, labels, 7, 1.0f / 4, 0, 0));
}

TEST(LossGradients, SoftmaxOutputLabelSmoothing) {
  const std::vector<double> labels = {1, 0, 4};
  const runtime::Bindings vars =
      runtime::random_bindings(softmax_output_graph({3, 5}, {3}, {}), 5, {{"label", f64_tensor({3}, labels)}});
  const HeadGradient h = head_gradient(softmax_output_graph({3, 5}, {3}, {{"smooth_alpha", "0.1"}}), vars);
  expect_values(h.grad, softmax_output_formula(h.forward, labels, 5, 1.0f, 0.1f));
  const HeadGradient ignored = head_gradient(
      softmax_output_graph({3, 5}, {3}, {{"smooth_alpha", "0.1"}, {"use_ignore", "True"}, {"ignore_label", "4"}}), vars);
  expect_values(ignored.grad, softmax_output_formula(ignored.forward, labels, 5, 1.0f, 0.1f, 4));
}

// preserve_shape: rows of the last axis, one label per row; batch divides by the label
// count (MXNet flattens the label), not by N.
TEST(LossGradients, SoftmaxOutputPreserveShape) {
  const std::vector<double> labels = {0, 3, 1, 2, 2, 0};
  const Attrs attrs = {{"preserve_shape", "True"}, {"normalization", "batch"}};
  const runtime::Bindings vars =
      runtime::random_bindings(softmax_output_graph({2, 3, 4}, {2, 3}, attrs), 9, {{"label", f64_tensor({2, 3}, labels)}});
  const HeadGradient h = head_gradient(softmax_output_graph({2, 3, 4}, {2, 3}, attrs), vars);
  expect_values(h.grad, softmax_output_formula(h.forward, labels, 4, 1.0f / 6));
}

// multi_output: softmax over axis 1 per (n, position), one label per (n, position); the
// gradient is divided by the positions (but under valid) and by the normalization count.
TEST(LossGradients, SoftmaxOutputMultiOutput) {
  const Shape data = {2, 4, 3};
  const std::vector<double> labels = {0, 3, -1, 2, 1, 1};  // (N, positions) = (2, 3)
  const runtime::Bindings vars =
      runtime::random_bindings(softmax_output_graph(data, {2, 3}, {}), 11, {{"label", f64_tensor({2, 3}, labels)}});
  const auto formula = [&](const std::vector<double>& out, float scale, bool ignore) {
    std::vector<double> g(out.size());
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 4; ++c)
        for (int64_t p = 0; p < 3; ++p) {
          const size_t i = static_cast<size_t>((n * 4 + c) * 3 + p);
          const int label = static_cast<int>(labels[static_cast<size_t>(n * 3 + p)]);
          g[i] = ignore && label == -1 ? 0.0 : (out[i] - (c == label ? 1.0 : 0.0)) * static_cast<double>(scale);
        }
    return g;
  };
  struct Case {
    Attrs attrs;
    float scale;
    bool ignore;
  };
  const std::vector<Case> cases = {
      {{{"multi_output", "True"}}, 1.0f / 3, false},
      {{{"multi_output", "True"}, {"normalization", "batch"}, {"grad_scale", "2"}}, 2.0f / 3 / 2, false},
      {{{"multi_output", "True"}, {"normalization", "valid"}, {"use_ignore", "True"}}, 1.0f / 5, true},
      // MXNet's multi_output path has no label smoothing: smooth_alpha changes nothing.
      {{{"multi_output", "True"}, {"smooth_alpha", "0.2"}}, 1.0f / 3, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.attrs));
    const HeadGradient h = head_gradient(softmax_output_graph(data, {2, 3}, c.attrs), vars);
    expect_values(h.grad, formula(h.forward, c.scale, c.ignore));
  }
}

// A label of the data's shape holds probabilities: (out - label) * grad_scale, no
// normalization.
TEST(LossGradients, SoftmaxOutputProbabilityLabels) {
  const Attrs attrs = {{"grad_scale", "0.25"}, {"normalization", "batch"}};
  const ir::Graph g = softmax_output_graph({3, 4}, {3, 4}, attrs);
  const runtime::Bindings vars = runtime::random_bindings(g, 13);
  const HeadGradient h = head_gradient(g, vars);
  const std::vector<double> label = runtime::to_f64_vector(vars.at("label"));
  std::vector<double> want(label.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = (h.forward[i] - label[i]) * 0.25;
  expect_values(h.grad, want);
}

// out_grad=True: MXNet multiplies the normalized implicit gradient by the gradient arriving
// at the output, here c through MakeLoss(SoftmaxOutput(data, label) * c), in both label forms.
TEST(LossGradients, SoftmaxOutputWithOutGradMultipliesByTheArrivingGradient) {
  const std::vector<double> labels = {2, -1, 0, 4};
  for (const bool probabilities : {false, true}) {
    SCOPED_TRACE(probabilities ? "probability labels" : "class labels");
    const Shape label_shape = probabilities ? Shape{4, 5} : Shape{4};
    const Attrs attrs = {{"out_grad", "True"}, {"grad_scale", "0.5"}, {"normalization", "batch"}, {"use_ignore", "True"}};
    ir::GraphBuilder b;
    const ValueRef y = b.op("SoftmaxOutput", {b.param("data", TensorType{DType::f64, {4, 5}}),
                                              b.input("label", {DType::f64, label_shape})}, attrs);
    b.output(b.op("MakeLoss", {b.op("elemwise_mul", {y, b.input("c", {DType::f64, {4, 5}})})}));
    const ir::Graph g = b.finish();
    runtime::Bindings given;
    if (!probabilities) given["label"] = f64_tensor({4}, labels);
    const runtime::Bindings vars = runtime::random_bindings(g, 17, given);
    const HeadGradient h = head_gradient(g, vars);
    const std::vector<double> out =
        runtime::to_f64_vector(runtime::interpret(softmax_output_graph({4, 5}, label_shape, attrs), vars).at(0));
    const std::vector<double> c = runtime::to_f64_vector(vars.at("c"));
    const std::vector<double> label = runtime::to_f64_vector(vars.at("label"));
    std::vector<double> want = softmax_output_formula(out, labels, 5, 0.5f / 4, 0, -1);
    for (size_t i = 0; i < want.size(); ++i)
      want[i] = (probabilities ? (out[i] - label[i]) * 0.5 : want[i]) * c[i];
    expect_values(h.grad, want);
  }
}

TEST(LossGradients, SoftmaxOutputErrorsNameTheNode) {
  // out_grad=True as a graph output is no loss head: it takes a head gradient to multiply by.
  const auto with_head = engine::build_backward(softmax_output_graph({4, 5}, {4}, {{"out_grad", "True"}}), {.wrt = {"data"}});
  EXPECT_EQ(with_head.head_grads.size(), 1u);
  EXPECT_EQ(engine::build_backward(softmax_output_graph({4, 5}, {4}, {}), {.wrt = {"data"}}).head_grads.size(), 0u);
  // Fewer labels than softmax rows: the forward accepts it (the label is unused there).
  const std::string message =
      testing::error_message([] { engine::build_backward(softmax_output_graph({4, 5}, {3}, {}), {.wrt = {"data"}}); });
  EXPECT_NE(message.find("SoftmaxOutput"), std::string::npos) << message;
  EXPECT_NE(message.find("the label [3] has 3 elements but the output [4,5] has 4 softmax rows"), std::string::npos)
      << message;
}

ir::Graph regression_graph(const std::string& op, const Shape& data, const Shape& label, const Attrs& attrs) {
  ir::GraphBuilder b;
  b.output(b.op(op, {b.param("data", TensorType{DType::f64, data}), b.input("label", {DType::f64, label})}, attrs));
  return b.finish();
}

// grad = BackwardOp(out, label) * grad_scale / m, m = outputs per sample (label size / N),
// the scale in float; MAE's BackwardOp is the sign of out - label with -1 at a tie.
TEST(LossGradients, RegressionOutputsScaleByOutputsPerSample) {
  struct Case {
    std::string op;
    Shape data, label;
    Attrs attrs;
    float scale;
  };
  const std::vector<Case> cases = {
      {"LinearRegressionOutput", {4, 3}, {4, 3}, {}, 1.0f / 3},
      {"LinearRegressionOutput", {5, 1}, {5}, {{"grad_scale", "2"}}, 2.0f},
      {"LogisticRegressionOutput", {4, 3}, {4, 3}, {{"grad_scale", "0.7"}}, 0.7f / 3},
      {"LogisticRegressionOutput", {2, 3, 5}, {2, 15}, {}, 1.0f / 15},
      {"MAERegressionOutput", {4, 3}, {4, 3}, {{"grad_scale", "1.5"}}, 1.5f / 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + " " + ir::shape_str(c.data));
    const ir::Graph g = regression_graph(c.op, c.data, c.label, c.attrs);
    runtime::Bindings vars = runtime::random_bindings(g, 17);
    // A tie, where MAE's gradient is -1.
    vars.at("label").data<double>()[0] = vars.at("data").data<double>()[0];
    const HeadGradient h = head_gradient(g, vars);
    const std::vector<double> label = runtime::to_f64_vector(vars.at("label"));
    std::vector<double> want(label.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const double diff = c.op == "MAERegressionOutput" ? (h.forward[i] - label[i] > 0 ? 1.0 : -1.0)
                                                        : h.forward[i] - label[i];
      want[i] = diff * static_cast<double>(c.scale);
    }
    if (c.op == "MAERegressionOutput") {
      EXPECT_EQ(h.grad[0], -static_cast<double>(c.scale));
    }
    expect_values(h.grad, want);
  }
}

// MakeLoss: a constant gradient, grad_scale over 1 (null), over the rows of every axis
// but the last (batch: MXNet's FlatTo2D), or over the elements above valid_thresh (valid).
TEST(LossGradients, MakeLossNormalizations) {
  const Shape s = {3, 4, 5};
  ir::GraphBuilder b;
  const ValueRef x = b.param("data", TensorType{DType::f64, s});
  b.output(b.op("MakeLoss", {x}));
  const runtime::Bindings vars = runtime::random_bindings(b.finish(), 19);
  const std::vector<double> data = runtime::to_f64_vector(vars.at("data"));
  int64_t above = 0;
  for (double v : data) above += v > 0.01;
  struct Case {
    Attrs attrs;
    double value;
  };
  const std::vector<Case> cases = {
      {{}, 1.0},
      {{{"grad_scale", "0.3"}}, static_cast<double>(0.3f)},
      {{{"normalization", "batch"}, {"grad_scale", "0.3"}}, static_cast<double>(0.3f / 12)},
      {{{"normalization", "valid"}, {"valid_thresh", "0.01"}, {"grad_scale", "2"}}, 2.0 / static_cast<double>(above)},
      // Nothing above the threshold: divided by 1, not 0.
      {{{"normalization", "valid"}, {"valid_thresh", "100"}}, 1.0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.attrs));
    ir::GraphBuilder lb;
    lb.output(lb.op("make_loss", {lb.param("data", TensorType{DType::f64, s})}, c.attrs));
    const HeadGradient h = head_gradient(lb.finish(), vars);
    expect_values(h.grad, std::vector<double>(data.size(), c.value));
  }
}

// Labels get no gradient: differentiating with respect to one gives zeros.
TEST(LossGradients, LabelsGetNoGradient) {
  const std::vector<ir::Graph> graphs = {softmax_output_graph({3, 4}, {3}, {}),
                                         regression_graph("LinearRegressionOutput", {3, 4}, {3, 4}, {})};
  for (const ir::Graph& g : graphs) {
    const runtime::Bindings vars = runtime::random_bindings(g, 23);
    for (double v : head_gradient(g, vars, "label").grad) EXPECT_EQ(v, 0.0);
  }
}

// Zero extents: empty gradients, no division by a zero extent.
TEST(LossGradients, EmptyTensorsGiveEmptyGradients) {
  const auto make_loss = [](const char* normalization) {
    ir::GraphBuilder b;
    b.output(b.op("make_loss", {b.param("a", TensorType{DType::f64, {2, 0}})}, {{"normalization", normalization}}));
    return b.finish();
  };
  const std::vector<ir::Graph> graphs = {make_loss("batch"), make_loss("valid"), softmax_output_graph({3, 0}, {3}, {{"preserve_shape", "True"}}),
                                         regression_graph("LinearRegressionOutput", {0, 3}, {0, 3}, {})};
  for (const ir::Graph& g : graphs) {
    const engine::BackwardGraph bg = engine::build_backward(g);
    const std::vector<Tensor> outs = runtime::interpret(bg.graph, runtime::random_bindings(bg.graph, 37));
    EXPECT_EQ(outs.back().size(), 0);
  }
}

// ---- the backward graphs on the executor, f32 ----------------------------------------------

// The executor runs the softmax and LayerNorm gradients on oneDNN, in its own summation
// order: where a gradient cancels to ~1e-3 of its terms (gn_gamma below) each path is
// ~1.5e-7 from the f64 value, so the absolute floor is a few of those.
void expect_executor_matches_interpreter(const ir::Graph& backward, const runtime::Bindings& vars) {
  const engine::Executable exe = engine::Executable::compile(backward);
  const std::vector<Tensor> want = runtime::interpret(backward, vars), got = exe.run(vars);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type()) << "output " << k;
    double largest = 0;
    for (int64_t i = 0; i < want[k].size(); ++i) largest = std::max(largest, std::fabs(want[k].get_f64(i)));
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_NEAR(want[k].get_f64(i), got[k].get_f64(i), 1e-5 * largest + 4e-7) << "output " << k << " element " << i;
  }
}

// A chain of the norms and softmaxes, differentiated with respect to the data and every
// gamma and beta.
TEST(LossGradients, NormAndSoftmaxBackwardOnTheExecutor) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {3, 6, 5, 2}});
  const ValueRef ln = b.op("LayerNorm", {x, b.param("ln_gamma"), b.param("ln_beta")});
  const ValueRef gn = b.op("GroupNorm", {ln, b.param("gn_gamma"), b.param("gn_beta")}, {{"num_groups", "3"}});
  const ValueRef in = b.op("InstanceNorm", {gn, b.param("in_gamma"), b.param("in_beta")});
  const ValueRef lrn = b.op("LRN", {in}, {{"nsize", "3"}, {"alpha", "0.5"}});
  const ValueRef l2 = b.op("L2Normalization", {lrn}, {{"mode", "channel"}});
  const ValueRef sm = b.op("softmax", {l2}, {{"axis", "1"}, {"temperature", "0.5"}});
  b.output(b.op("elemwise_add", {b.op("log_softmax", {sm}), b.op("SoftmaxActivation", {l2}, {{"mode", "channel"}})}));
  const ir::Graph g = b.finish();
  const engine::BackwardGraph bg = engine::build_backward(g, {.with_inputs = true});
  EXPECT_EQ(bg.gradient_of.size(), 7u);
  expect_executor_matches_interpreter(bg.graph, runtime::random_bindings(bg.graph, 29));
}

TEST(LossGradients, LossHeadBackwardOnTheExecutor) {
  ir::GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {6, 5}});
  const ValueRef w = b.param("w", TensorType{DType::f32, {6, 5}});
  const ValueRef h = b.op("elemwise_mul", {x, w});
  b.output(b.op("SoftmaxOutput", {h, b.input("label", {DType::f32, {6}})},
                {{"normalization", "valid"}, {"use_ignore", "True"}, {"smooth_alpha", "0.1"}}));
  b.output(b.op("MAERegressionOutput", {h, b.input("target", {DType::f32, {6, 5}})}, {{"grad_scale", "0.5"}}));
  b.output(b.op("LogisticRegressionOutput", {h, b.input("p", {DType::f32, {6, 5}})}));
  b.output(b.op("MakeLoss", {b.op("square", {w})}, {{"normalization", "valid"}, {"valid_thresh", "0.01"}}));
  const engine::BackwardGraph bg = engine::build_backward(b.finish());
  EXPECT_TRUE(bg.head_grads.empty());
  Tensor labels(TensorType{DType::f32, {6}});
  for (int64_t i = 0; i < 6; ++i) labels.data<float>()[i] = static_cast<float>(i % 6 - 1);  // -1 ignored
  expect_executor_matches_interpreter(bg.graph, runtime::random_bindings(bg.graph, 31, {{"label", labels}}));
}

}  // namespace
}  // namespace ampfuse
