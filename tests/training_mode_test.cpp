// Training mode (engine/passes/training_mode.h): BatchNorm with batch statistics and the
// moving-statistics update, Dropout with counter-based masks, and their gradients.
#include "engine/execution/executor.h"
#include "engine/passes/amp_convert.h"
#include "engine/passes/autodiff.h"
#include "engine/passes/training_mode.h"
#include "ir/builder.h"
#include "ir/philox.h"
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
using runtime::Tensor;
using testing::check_gradients;
using testing::GradCheckOptions;

ir::Graph batch_norm_graph(DType dtype, const Shape& s, std::map<std::string, std::string> attrs) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {dtype, s});
  b.output(b.op("BatchNorm", {x, b.param("gamma"), b.param("beta"), b.aux("moving_mean"), b.aux("moving_var")},
                std::move(attrs), "bn"));
  return b.finish();
}

ir::Graph dropout_graph(DType dtype, const Shape& s, std::map<std::string, std::string> attrs) {
  ir::GraphBuilder b;
  b.output(b.op("Dropout", {b.input("x", {dtype, s})}, std::move(attrs), "drop"));
  return b.finish(/*infer=*/false);  // mode='always' with p > 0 has no inference form
}

ir::Graph training(ir::Graph g, engine::TrainingOptions o = {}) {
  engine::to_training_mode(g, o);
  return g;
}

Tensor filled(const TensorType& t, double v) {
  Tensor out(t);
  for (int64_t i = 0; i < out.size(); ++i) out.set_f64(i, v);
  return out;
}

std::vector<double> values(const Tensor& t) { return runtime::to_f64_vector(t); }

// ---- BatchNorm ---------------------------------------------------------------------------

// The training forward computed directly in double: batch mean, biased variance, the
// normalized output and MXNet's moving update.
struct DirectBatchNorm {
  std::vector<double> y, moving_mean, moving_var;
};
DirectBatchNorm direct_batch_norm(const Shape& s, size_t axis, const runtime::Bindings& b, double eps, double momentum,
                                  bool fix_gamma) {
  const std::vector<double> x = values(b.at("x")), gamma = values(b.at("gamma")), beta = values(b.at("beta"));
  DirectBatchNorm out{x, values(b.at("moving_mean")), values(b.at("moving_var"))};
  int64_t inner = 1, outer = 1;
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  for (size_t d = 0; d < axis; ++d) outer *= s[d];
  const int64_t channels = s[axis], items = outer * inner;
  for (int64_t c = 0; c < channels; ++c) {
    const auto at = [&](int64_t o, int64_t j) { return static_cast<size_t>((o * channels + c) * inner + j); };
    double mean = 0, var = 0;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) mean += x[at(o, j)] / items;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) var += (x[at(o, j)] - mean) * (x[at(o, j)] - mean) / items;
    const double w = fix_gamma ? 1.0 : gamma[c];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < inner; ++j) out.y[at(o, j)] = (x[at(o, j)] - mean) / std::sqrt(var + eps) * w + beta[c];
    out.moving_mean[c] = out.moving_mean[c] * momentum + mean * (1 - momentum);
    out.moving_var[c] = out.moving_var[c] * momentum + var * (1 - momentum);
  }
  return out;
}

void expect_near_all(const std::vector<double>& want, const Tensor& got, double tol, const std::string& what) {
  const std::vector<double> g = values(got);
  ASSERT_EQ(want.size(), g.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], g[i], tol * (1 + std::abs(want[i]))) << what << "[" << i << "]";
}

TEST(TrainingMode, BatchNormUsesBatchStatisticsAndUpdatesMovingOnes) {
  struct Case {
    Shape shape;
    int64_t axis;
    bool fix_gamma;
    DType dtype;
  };
  for (const Case& c : {Case{{4, 3, 5}, 1, false, DType::f64}, Case{{7, 3}, -1, true, DType::f64},
                        Case{{2, 5, 1, 3}, 1, false, DType::f32}, Case{{1, 7}, 0, false, DType::f64}}) {
    SCOPED_TRACE(ir::shape_str(c.shape) + " axis " + std::to_string(c.axis));
    ir::Graph g = batch_norm_graph(c.dtype, c.shape,
                                   {{"axis", std::to_string(c.axis)}, {"eps", "0.001"}, {"momentum", "0.75"},
                                    {"fix_gamma", c.fix_gamma ? "True" : "False"}});
    EXPECT_EQ(engine::to_training_mode(g), 1);
    ASSERT_EQ(g.outputs.size(), 3u);  // y, then the new moving_mean and moving_var
    EXPECT_EQ(g.node(g.outputs[1]).op, "_BatchNorm_train");
    EXPECT_EQ(g.output_name(1), "bn_output1");
    const runtime::Bindings b = runtime::random_bindings(g, 5);
    const std::vector<Tensor> got = runtime::interpret(g, b);
    const auto axis = static_cast<size_t>(c.axis < 0 ? c.axis + static_cast<int64_t>(c.shape.size()) : c.axis);
    // momentum is a float attribute in MXNet: 0.75 is exact.
    const DirectBatchNorm want = direct_batch_norm(c.shape, axis, b, 1e-3, 0.75, c.fix_gamma);
    const double tol = c.dtype == DType::f64 ? 1e-12 : 2e-6;
    expect_near_all(want.y, got[0], tol, "y");
    expect_near_all(want.moving_mean, got[1], tol, "moving_mean");
    expect_near_all(want.moving_var, got[2], tol, "moving_var");
  }
}

TEST(TrainingMode, GlobalStatsBatchNormStaysInference) {
  ir::Graph g = batch_norm_graph(DType::f32, {2, 3}, {{"use_global_stats", "True"}});
  const ir::Graph before = g;
  EXPECT_EQ(engine::to_training_mode(g), 0);
  EXPECT_EQ(g, before);
}

// MXNet's output_mean_var in training reports the batch mean and inverse std.
TEST(TrainingMode, OutputMeanVarReadsTheBatchStatistics) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f64, {6, 2}});
  const std::vector<ir::ValueRef> outs = b.op_multi(
      "BatchNorm", {x, b.param("gamma"), b.param("beta"), b.aux("moving_mean"), b.aux("moving_var")},
      {{"output_mean_var", "True"}, {"eps", "0"}}, "bn");
  b.output(outs[1]);
  b.output(outs[2]);
  ir::Graph g = training(b.finish());
  ASSERT_EQ(g.outputs.size(), 4u);
  EXPECT_EQ(g.outputs[0].index, 3);
  EXPECT_EQ(g.outputs[1].index, 4);
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  const std::vector<Tensor> got = runtime::interpret(g, vars);
  const std::vector<double> x_values = values(vars.at("x"));
  for (int64_t c = 0; c < 2; ++c) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 6; ++i) mean += x_values[i * 2 + c] / 6;
    for (int64_t i = 0; i < 6; ++i) var += (x_values[i * 2 + c] - mean) * (x_values[i * 2 + c] - mean) / 6;
    EXPECT_NEAR(got[0].get_f64(c), mean, 1e-14);
    EXPECT_NEAR(got[1].get_f64(c), 1 / std::sqrt(var), 1e-12);
  }
}

// The moving statistics get no gradient (MXNet's aux states): their head gradients are
// zero here so that the finite differences, which do see them depend on x, agree.
GradCheckOptions zero_moving_heads(const ir::Graph& g) {
  GradCheckOptions o;
  for (size_t k = 1; k < 3; ++k) {
    const TensorType t = g.type(g.outputs[k]);
    o.given[g.output_name(k) + "_head_grad"] = filled(t, 0);
  }
  return o;
}

TEST(TrainingMode, BatchNormGradientMatchesFiniteDifferences) {
  struct Case {
    Shape shape;
    int64_t axis;
    bool fix_gamma;
  };
  for (const Case& c : {Case{{3, 4, 5}, 1, false}, Case{{7, 3}, -1, false}, Case{{2, 3, 1, 5}, 1, true},
                        Case{{5, 1}, 1, false}, Case{{3, 7}, 0, false}}) {
    SCOPED_TRACE(ir::shape_str(c.shape) + " axis " + std::to_string(c.axis));
    const ir::Graph g = training(batch_norm_graph(DType::f64, c.shape,
                                                  {{"axis", std::to_string(c.axis)}, {"eps", "0.01"},
                                                   {"fix_gamma", c.fix_gamma ? "True" : "False"}}));
    EXPECT_TRUE(check_gradients(g, zero_moving_heads(g)));
  }
}

TEST(TrainingMode, BatchNormMovingOutputsAndFixGammaGiveNoGradient) {
  const ir::Graph g = training(batch_norm_graph(DType::f64, {4, 3}, {{"fix_gamma", "True"}}));
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {"x", "gamma", "beta"}});
  ASSERT_EQ(bg.head_grads.size(), 3u);
  runtime::Bindings with_heads = runtime::random_bindings(bg.graph, 4);
  runtime::Bindings zero_heads = with_heads;
  for (size_t k = 1; k < 3; ++k) zero_heads[bg.head_grads[k]] = filled(with_heads.at(bg.head_grads[k]).type(), 0);
  const std::vector<Tensor> a = runtime::interpret(bg.graph, with_heads), b = runtime::interpret(bg.graph, zero_heads);
  for (size_t v = 0; v < 3; ++v) EXPECT_EQ(values(a[bg.num_forward_outputs + v]), values(b[bg.num_forward_outputs + v]));
  // fix_gamma: gamma's gradient is 0, as MXNet writes it.
  EXPECT_EQ(values(a[bg.num_forward_outputs + 1]), std::vector<double>(3, 0.0));
  // and y does not read gamma.
  runtime::Bindings other_gamma = with_heads;
  other_gamma["gamma"] = filled(with_heads.at("gamma").type(), 3.5);
  EXPECT_EQ(values(runtime::interpret(bg.graph, other_gamma)[0]), values(a[0]));
}

TEST(TrainingMode, BatchNormRejectsIntegerData) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::i32, {2, 3}});
  b.output(b.op("BatchNorm", {x, b.param("gamma"), b.param("beta"), b.aux("moving_mean"), b.aux("moving_var")}, {},
                "bn"));
  ir::Graph g = b.finish(false);
  EXPECT_ERROR(engine::to_training_mode(g), "'bn' (_BatchNorm_train): the data must be a float tensor, not i32");
}

// ---- Dropout -----------------------------------------------------------------------------

// Random123's known-answer vectors for philox4x32 with 10 rounds.
TEST(TrainingMode, PhiloxMatchesKnownAnswers) {
  EXPECT_EQ(ir::philox4x32_10({0, 0, 0, 0}, {0, 0}), (ir::PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(ir::philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (ir::PhiloxBlock{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(ir::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (ir::PhiloxBlock{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

std::vector<double> dropout_of_ones(const Shape& s, std::map<std::string, std::string> attrs, engine::TrainingOptions o,
                                    DType dtype = DType::f32) {
  const ir::Graph g = training(dropout_graph(dtype, s, std::move(attrs)), o);
  return values(runtime::interpret(g, {{"x", filled({dtype, s}, 1)}})[0]);
}

TEST(TrainingMode, DropoutDropsAFractionPAndScalesTheRest) {
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE(p);
    const std::vector<double> y = dropout_of_ones({1000, 101}, {{"p", std::to_string(p)}}, {.seed = 42});
    const float scale = 1.0f / (1.0f - static_cast<float>(p));
    size_t dropped = 0;
    for (double v : y) {
      if (v == 0) ++dropped;
      else ASSERT_EQ(v, static_cast<double>(scale));
    }
    // 101000 draws: the standard deviation of the fraction is under 0.0016.
    EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(y.size()), p, 0.01);
  }
  // p = 1 drops every element (MXNet's 0 * 1/0 would be NaN).
  EXPECT_EQ(dropout_of_ones({3, 5}, {{"p", "1"}}, {}), std::vector<double>(15, 0.0));
}

TEST(TrainingMode, DropoutMaskIsAFunctionOfSeedAndOffset) {
  const Shape s = {64, 33};
  const std::map<std::string, std::string> attrs = {{"p", "0.5"}, {"mode", "always"}};
  const std::vector<double> a = dropout_of_ones(s, attrs, {.seed = 7, .offset = 3});
  EXPECT_EQ(dropout_of_ones(s, attrs, {.seed = 7, .offset = 3}), a);
  EXPECT_NE(dropout_of_ones(s, attrs, {.seed = 7, .offset = 4}), a);
  EXPECT_NE(dropout_of_ones(s, attrs, {.seed = 8, .offset = 3}), a);
  // The mask depends on the element index only: f64 data gets the same one.
  EXPECT_EQ(dropout_of_ones(s, attrs, {.seed = 7, .offset = 3}, DType::f64), a);
}

TEST(TrainingMode, EachDropoutGetsItsOwnOffset) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {40, 40}});
  b.output(b.op("Dropout", {x}, {{"p", "0.5"}}, "first"));
  b.output(b.op("Dropout", {x}, {{"p", "0.5"}}, "second"));
  ir::Graph g = b.finish();
  EXPECT_EQ(engine::to_training_mode(g, {.seed = 1, .offset = 10}), 2);
  EXPECT_EQ(g.node(g.outputs[0]).attrs.get_int("offset"), 10);
  EXPECT_EQ(g.node(g.outputs[1]).attrs.get_int("offset"), 11);
  const std::vector<Tensor> y = runtime::interpret(g, {{"x", filled({DType::f32, {40, 40}}, 1)}});
  EXPECT_NE(values(y[0]), values(y[1]));
}

TEST(TrainingMode, VariationalDropoutSharesTheMaskAlongAxes) {
  const Shape s = {4, 6, 5};
  const std::vector<double> y = dropout_of_ones(s, {{"p", "0.5"}, {"axes", "(1,)"}}, {.seed = 3});
  size_t dropped = 0;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 5; ++k)
      for (int64_t j = 0; j < 6; ++j) {
        ASSERT_EQ(y[(i * 6 + j) * 5 + k], y[i * 6 * 5 + k]) << i << "," << j << "," << k;
        dropped += y[(i * 6 + j) * 5 + k] == 0;
      }
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(dropped, y.size());
}

TEST(TrainingMode, DropoutWithPZeroIsTheIdentity) {
  ir::Graph g = dropout_graph(DType::f32, {3, 7}, {{"p", "0"}, {"mode", "always"}});
  EXPECT_EQ(engine::to_training_mode(g), 0);
  EXPECT_EQ(g.nodes.back().op, "Dropout");
  ir::infer_types(g);
  const runtime::Bindings b = runtime::random_bindings(g, 1);
  EXPECT_EQ(values(runtime::interpret(g, b)[0]), values(b.at("x")));
  // The training op itself with p = 0 keeps everything too.
  ir::GraphBuilder gb;
  gb.output(gb.op("_Dropout_train", {gb.input("x", {DType::f32, {3, 7}})}, {{"p", "0"}}));
  const ir::Graph direct = gb.finish();
  EXPECT_EQ(values(runtime::interpret(direct, b)[0]), values(b.at("x")));
}

TEST(TrainingMode, DropoutGradientIsTheMaskTimesTheHeadGradient) {
  const Shape s = {9, 13};
  const ir::Graph g = training(dropout_graph(DType::f32, s, {{"p", "0.3"}}), {.seed = 5, .offset = 2});
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {}, .with_inputs = true});
  const runtime::Bindings b = runtime::random_bindings(bg.graph, 9);
  const std::vector<Tensor> out = runtime::interpret(bg.graph, b);
  const std::vector<double> mask = values(runtime::interpret(g, {{"x", filled({DType::f32, s}, 1)}})[0]);
  const std::vector<double> head = values(b.at(bg.head_grads.at(0))), dx = values(out.at(bg.num_forward_outputs));
  for (size_t i = 0; i < dx.size(); ++i)
    ASSERT_EQ(dx[i], static_cast<double>(static_cast<float>(head[i]) * static_cast<float>(mask[i]))) << i;
  // And in f64 against finite differences, with variational axes.
  EXPECT_TRUE(check_gradients(training(dropout_graph(DType::f64, {5, 7, 3}, {{"p", "0.4"}, {"axes", "(0, 2)"}}))));
}

TEST(TrainingMode, DropoutRejectsBadAxesNamingTheNode) {
  ir::Graph g = dropout_graph(DType::f32, {3, 4}, {{"p", "0.5"}, {"axes", "(2,)"}});
  EXPECT_ERROR(engine::to_training_mode(g), "'drop' (_Dropout_train): axes=2 is out of range");
  ir::Graph twice = dropout_graph(DType::f32, {3, 4}, {{"p", "0.5"}, {"axes", "(1, -1)"}});
  EXPECT_ERROR(engine::to_training_mode(twice), "names axis -1 twice");
}

// The documented order: AMP conversion first, on MXNet's op names and lists, then the
// training rewrite, then autodiff.
TEST(TrainingMode, RunsAfterAmpConversionWithTheStatisticsInF32) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {4, 6}});
  const ir::ValueRef fc = b.op("FullyConnected", {x, b.param("w"), b.param("bias")}, {{"num_hidden", "5"}}, "fc");
  const ir::ValueRef bn =
      b.op("BatchNorm", {fc, b.param("gamma"), b.param("beta"), b.aux("moving_mean"), b.aux("moving_var")}, {}, "bn");
  b.output(b.op("Dropout", {bn}, {{"p", "0.5"}}, "drop"));
  ir::Graph g = b.finish();
  engine::AmpOptions amp;
  amp.target = DType::bf16;
  engine::amp_convert(g, amp);
  EXPECT_EQ(engine::to_training_mode(g), 2);
  for (const ir::Node& n : g.nodes) {
    if (n.op == "_BatchNorm_train") {
      EXPECT_EQ(g.type(n.inputs[0]).dtype, DType::bf16);
      for (size_t i = 1; i < 5; ++i) EXPECT_EQ(g.type(n.inputs[i]).dtype, DType::f32) << i;
    }
    if (n.op == "_Dropout_train") {
      EXPECT_EQ(g.type(n.inputs[0]).dtype, DType::f32);  // fp32 in bf16, as Dropout
    }
  }
  // (FullyConnected has no gradient rule of its own yet.)
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {"gamma", "beta"}, .with_inputs = false});
  const std::vector<Tensor> out = runtime::interpret(bg.graph, runtime::random_bindings(bg.graph, 2));
  ASSERT_EQ(out.size(), bg.num_forward_outputs + 2);
  EXPECT_EQ(out.back().type(), (TensorType{DType::f32, {5}}));
}

// ---- executor against the interpreter, f32 ---------------------------------------------

// Compares every output within `tol` relative (0: bit for bit); every kernel must compile
// (no interpreter fallback). Returns the compile statistics.
engine::CompileStats expect_executor_matches(const ir::Graph& g, double tol) {
  const runtime::Bindings vars = runtime::random_bindings(g, 11);
  const std::vector<Tensor> want = runtime::interpret(g, vars);
  const engine::Executable exe = engine::Executable::compile(g);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  const std::vector<Tensor> got = exe.run(vars);
  EXPECT_EQ(want.size(), got.size());
  for (size_t k = 0; k < std::min(want.size(), got.size()); ++k) {
    EXPECT_EQ(want[k].type(), got[k].type()) << "output " << k;
    const std::vector<double> a = values(want[k]), b = values(got[k]);
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
      if (tol == 0 ? a[i] != b[i] : std::abs(a[i] - b[i]) > tol * (1 + std::abs(a[i]))) {
        ADD_FAILURE() << "output " << k << " element " << i << ": interpreter " << a[i] << ", executor " << b[i];
        break;
      }
  }
  return exe.compile_stats();
}

TEST(TrainingMode, DropoutBackwardOnTheExecutorIsBitExact) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {31, 17}});
  const ir::ValueRef w = b.param("w", TensorType{DType::f32, {31, 17}});
  b.output(b.op("Dropout", {b.op("elemwise_mul", {x, w})}, {{"p", "0.25"}}, "drop"));
  const ir::Graph g = training(b.finish(), {.seed = 99});
  expect_executor_matches(engine::build_backward(g, {.wrt = {}, .with_inputs = true}).graph, 0);
}

TEST(TrainingMode, BatchNormBackwardOnTheExecutorMatchesTheInterpreter) {
  for (const bool fix_gamma : {false, true}) {
    SCOPED_TRACE(fix_gamma);
    const ir::Graph g =
        training(batch_norm_graph(DType::f32, {4, 3, 7}, {{"fix_gamma", fix_gamma ? "True" : "False"}}));
    // Reductions may sum in another order on the executor: rounding differences only.
    const engine::CompileStats stats =
        expect_executor_matches(engine::build_backward(g, {.wrt = {}, .with_inputs = true}).graph, 1e-5);
    EXPECT_GT(stats.fused_nodes, 0);  // the gradient's elementwise chains fuse
  }
}

}  // namespace
}  // namespace ampfuse
