// Gradient rules of the heavy NN ops (FullyConnected, dot, batch_dot, _linalg_gemm2,
// Convolution, Deconvolution, Pooling, _contrib_AdaptiveAvgPooling2D, Embedding) against
// finite differences in f64, their backward ops' errors, and backward graphs run by the
// executor against the interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "engine/passes/layout_optimize.h"
#include "ir/builder.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "runtime/onednn/onednn_ops.h"
#include "runtime/reference/reference_kernels.h"
#include "tests/gradient_check.h"
#include "tests/output_compare.h"
#include "tests/test_util.h"

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using ir::ValueRef;
using testing::check_gradients;
using Attrs = std::map<std::string, std::string>;

std::string case_name(const std::string& op, const Attrs& attrs) {
  std::string s = op;
  for (const auto& [k, v] : attrs) s += " " + k + "=" + v;
  return s;
}

// op(x, params...) with f64 data of shape `data`; params take the types inference gives.
ir::Graph layer(const std::string& op, const Shape& data, const Attrs& attrs, const std::vector<std::string>& params) {
  ir::GraphBuilder b;
  std::vector<ValueRef> ins = {b.input("x", {DType::f64, data})};
  for (const std::string& p : params) ins.push_back(b.param(p));
  b.output(b.op(op, ins, attrs));
  return b.finish();
}

TEST(NnGradients, FullyConnected) {
  struct Case {
    Shape data;
    Attrs attrs;
    std::vector<std::string> params;
  };
  const std::vector<Case> cases = {
      {{3, 7}, {{"num_hidden", "5"}}, {"w", "b"}},
      {{2, 3, 5}, {{"num_hidden", "1"}}, {"w", "b"}},  // flatten=True: (2, 15)
      {{2, 3, 5}, {{"num_hidden", "4"}, {"flatten", "False"}}, {"w", "b"}},
      {{7}, {{"num_hidden", "3"}, {"flatten", "False"}, {"no_bias", "True"}}, {"w"}},
      {{1, 1}, {{"num_hidden", "2"}, {"no_bias", "True"}}, {"w"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name("FullyConnected", c.attrs));
    EXPECT_TRUE(check_gradients(layer("FullyConnected", c.data, c.attrs, c.params)));
  }
}

ir::Graph product(const std::string& op, const Shape& lhs, const Shape& rhs, const Attrs& attrs) {
  ir::GraphBuilder b;
  b.output(b.op(op, {b.input("a", {DType::f64, lhs}), b.input("b", {DType::f64, rhs})}, attrs));
  return b.finish();
}

// Every transpose combination, operands of rank 1 to 3 (dot reads them as matrices).
TEST(NnGradients, DotAllTransposes) {
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const Attrs attrs = {{"transpose_a", ta ? "True" : "False"}, {"transpose_b", tb ? "True" : "False"}};
      SCOPED_TRACE(case_name("dot", attrs));
      // lhs (2, 3, 5) as (6, 5), or transposed (2, 15)^T; rhs (5, 7) / (7, 5)^T, or (2, 7).
      const Shape lhs = {2, 3, 5};
      const Shape rhs = ta ? (tb ? Shape{7, 2} : Shape{2, 7}) : (tb ? Shape{7, 5} : Shape{5, 7});
      EXPECT_TRUE(check_gradients(product("dot", lhs, rhs, attrs)));
      const Shape rhs3 = ta ? (tb ? Shape{3, 1, 2} : Shape{2, 1, 3}) : (tb ? Shape{3, 1, 5} : Shape{5, 1, 3});
      EXPECT_TRUE(check_gradients(product("dot", lhs, rhs3, attrs)));
    }
  EXPECT_TRUE(check_gradients(product("dot", {7}, {7}, {})));
  EXPECT_TRUE(check_gradients(product("dot", {5}, {5, 3}, {})));
  EXPECT_TRUE(check_gradients(product("dot", {3, 5}, {5}, {})));
}

TEST(NnGradients, BatchDotAndGemmAllTransposes) {
  for (const bool ta : {false, true})
    for (const bool tb : {false, true}) {
      const Attrs attrs = {{"transpose_a", ta ? "True" : "False"}, {"transpose_b", tb ? "True" : "False"}};
      SCOPED_TRACE(case_name("batch_dot", attrs));
      const Shape lhs = ta ? Shape{2, 3, 5, 7} : Shape{2, 3, 7, 5};  // op(A): (7, 5)
      const Shape rhs = tb ? Shape{2, 3, 1, 5} : Shape{2, 3, 5, 1};  // op(B): (5, 1)
      EXPECT_TRUE(check_gradients(product("batch_dot", lhs, rhs, attrs)));
      Attrs gemm = attrs;
      gemm["alpha"] = "-1.5";
      EXPECT_TRUE(
          check_gradients(product("_linalg_gemm2", {lhs.begin() + 1, lhs.end()}, {rhs.begin() + 1, rhs.end()}, gemm)));
      EXPECT_TRUE(
          check_gradients(product("linalg_gemm2", {lhs.begin() + 2, lhs.end()}, {rhs.begin() + 2, rhs.end()}, gemm)));
      // _linalg_gemm adds beta C: C's gradient is beta dy.
      gemm["beta"] = "0.75";
      ir::GraphBuilder b;
      const Shape a_shape(lhs.begin() + 1, lhs.end()), b_shape(rhs.begin() + 1, rhs.end());
      b.output(b.op("_linalg_gemm", {b.input("a", {DType::f64, a_shape}), b.input("b", {DType::f64, b_shape}),
                                     b.input("c", {DType::f64, {3, 7, 1}})},
                    gemm));
      EXPECT_TRUE(check_gradients(b.finish()));
    }
}

struct WindowCase {
  Shape data;
  Attrs attrs;
};

std::vector<std::string> conv_params(const Attrs& a, bool deconv) {
  const auto nb = a.find("no_bias");
  const bool no_bias = nb != a.end() ? nb->second == "True" : deconv;
  return no_bias ? std::vector<std::string>{"w"} : std::vector<std::string>{"w", "b"};
}

TEST(NnGradients, Convolution) {
  const std::vector<WindowCase> cases = {
      {{2, 3, 7}, {{"kernel", "(3,)"}, {"num_filter", "2"}}},
      {{1, 2, 11}, {{"kernel", "(2,)"}, {"num_filter", "3"}, {"stride", "(3,)"}, {"pad", "(1,)"}, {"no_bias", "True"}}},
      {{2, 3, 7, 5}, {{"kernel", "(3,2)"}, {"num_filter", "4"}, {"stride", "(2,1)"}, {"pad", "(1,0)"}}},
      {{1, 4, 7, 7},
       {{"kernel", "(3,3)"}, {"num_filter", "6"}, {"dilate", "(2,1)"}, {"num_group", "2"}, {"stride", "(2,2)"}}},
      {{2, 7, 5, 3}, {{"kernel", "(2,2)"}, {"num_filter", "4"}, {"pad", "(1,1)"}, {"layout", "NHWC"}}},
      {{1, 2, 5, 4, 3}, {{"kernel", "(2,3,2)"}, {"num_filter", "2"}, {"stride", "(2,1,1)"}, {"pad", "(0,1,1)"}}},
      {{1, 4, 3, 4, 3}, {{"kernel", "(1,2,2)"}, {"num_filter", "3"}, {"num_group", "3"}, {"layout", "NDHWC"}}},
  };
  for (const WindowCase& c : cases) {
    SCOPED_TRACE(case_name("Convolution", c.attrs));
    EXPECT_TRUE(check_gradients(layer("Convolution", c.data, c.attrs, conv_params(c.attrs, false))));
  }
}

TEST(NnGradients, Deconvolution) {
  const std::vector<WindowCase> cases = {
      {{2, 3, 7}, {{"kernel", "(3,)"}, {"num_filter", "2"}}},
      {{1, 2, 5}, {{"kernel", "(2,)"}, {"num_filter", "3"}, {"stride", "(3,)"}, {"adj", "(2,)"}, {"no_bias", "False"}}},
      {{2, 4, 5, 3},
       {{"kernel", "(3,2)"}, {"num_filter", "2"}, {"stride", "(2,1)"}, {"pad", "(1,0)"}, {"num_group", "2"}}},
      {{1, 2, 3, 4},
       {{"kernel", "(3,3)"}, {"num_filter", "3"}, {"dilate", "(1,2)"}, {"stride", "(2,2)"}, {"adj", "(1,0)"}}},
      {{1, 3, 4, 2},
       {{"kernel", "(2,2)"}, {"num_filter", "2"}, {"stride", "(2,2)"}, {"layout", "NHWC"}, {"no_bias", "False"}}},
      {{1, 2, 3, 2, 3}, {{"kernel", "(2,2,2)"}, {"num_filter", "2"}, {"stride", "(1,2,1)"}, {"pad", "(1,0,0)"}}},
  };
  for (const WindowCase& c : cases) {
    SCOPED_TRACE(case_name("Deconvolution", c.attrs));
    EXPECT_TRUE(check_gradients(layer("Deconvolution", c.data, c.attrs, conv_params(c.attrs, true))));
  }
}

TEST(NnGradients, Pooling) {
  const std::vector<WindowCase> cases = {
      {{2, 3, 7}, {{"kernel", "(3,)"}, {"pool_type", "max"}, {"stride", "(2,)"}}},
      {{1, 2, 7, 5},
       {{"kernel", "(3,2)"},
        {"pool_type", "max"},
        {"pad", "(1,1)"},
        {"pooling_convention", "full"},
        {"stride", "(2,2)"}}},
      {{1, 2, 7, 5}, {{"kernel", "(3,3)"}, {"pool_type", "avg"}, {"pad", "(1,1)"}, {"stride", "(2,2)"}}},
      {{1, 2, 7, 5},
       {{"kernel", "(3,3)"},
        {"pool_type", "avg"},
        {"pad", "(1,1)"},
        {"stride", "(2,2)"},
        {"count_include_pad", "False"},
        {"pooling_convention", "full"}}},
      {{2, 1, 5, 7}, {{"kernel", "(2,3)"}, {"pool_type", "sum"}, {"stride", "(1,2)"}}},
      {{1, 2, 5, 5}, {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "2"}}},
      {{1, 2, 5, 5}, {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "3"}, {"stride", "(2,2)"}}},
      {{1, 2, 5, 5}, {{"kernel", "(2,2)"}, {"pool_type", "lp"}, {"p_value", "1"}}},
      {{2, 3, 5, 4}, {{"pool_type", "max"}, {"global_pool", "True"}}},
      {{2, 3, 5, 4}, {{"pool_type", "avg"}, {"global_pool", "True"}}},
      {{1, 2, 11}, {{"kernel", "(3,)"}, {"pool_type", "avg"}, {"stride", "(2,)"}, {"pooling_convention", "same"}}},
      {{1, 5, 4, 2}, {{"kernel", "(2,2)"}, {"pool_type", "max"}, {"layout", "NHWC"}}},
      {{1, 2, 4, 5, 3}, {{"kernel", "(2,2,2)"}, {"pool_type", "avg"}, {"stride", "(2,2,1)"}, {"pad", "(1,0,1)"}}},
      {{1, 2, 4, 5, 3}, {{"kernel", "(2,3,2)"}, {"pool_type", "max"}, {"stride", "(1,2,1)"}}},
  };
  for (const WindowCase& c : cases) {
    SCOPED_TRACE(case_name("Pooling", c.attrs));
    const ir::Graph g = layer("Pooling", c.data, c.attrs, {});
    testing::GradCheckOptions o;
    if (c.attrs.at("pool_type") == "lp") {
      // lp's factor (x / y)^(p-1) is steep near a zero output: keep the data away from 0.
      runtime::Tensor x = runtime::random_bindings(g, 3).at("x");
      for (int64_t i = 0; i < x.size(); ++i) x.data<double>()[i] = 0.5 + std::fabs(x.data<double>()[i]);
      o.given = {{"x", x}};
    }
    EXPECT_TRUE(check_gradients(g, o));
  }
}

// MXNet sends a max window's whole gradient to its first maximum (row-major), also when
// windows overlap.
TEST(NnGradients, MaxPoolingTiesGoToTheFirstMaximum) {
  ir::Graph g = layer("Pooling", {1, 1, 2, 3}, {{"kernel", "(2,2)"}, {"pool_type", "max"}}, {});
  const engine::BackwardGraph bg = engine::build_backward(g, {.wrt = {"x"}});
  runtime::Tensor x(TensorType{DType::f64, {1, 1, 2, 3}});
  const double values[] = {1, 4, 4, 0, 4, 2};
  for (int i = 0; i < 6; ++i) x.data<double>()[i] = values[i];
  runtime::Tensor head(TensorType{DType::f64, {1, 1, 1, 2}});
  head.data<double>()[0] = 10;
  head.data<double>()[1] = 100;
  const runtime::Tensor dx = runtime::interpret(bg.graph, {{"x", x}, {bg.head_grads.at(0), head}}).at(1);
  EXPECT_EQ(runtime::to_f64_vector(dx), (std::vector<double>{0, 110, 0, 0, 0, 0}));
}

TEST(NnGradients, AdaptiveAvgPooling) {
  for (const std::string size : {"(3,2)", "(1,)", "(5,7)", "(2,)"}) {
    SCOPED_TRACE(size);
    EXPECT_TRUE(check_gradients(layer("_contrib_AdaptiveAvgPooling2D", {2, 3, 5, 7}, {{"output_size", size}}, {})));
  }
}

// Repeated indices add up; out-of-range ones clip to the last row, as the forward reads.
TEST(NnGradients, EmbeddingScatterAddsRows) {
  ir::GraphBuilder b;
  const ValueRef ids = b.input("ids", {DType::i32, {2, 3}});
  const ValueRef w = b.param("w", TensorType{DType::f64, {7, 5}});
  b.output(b.op("Embedding", {ids, w}, {{"input_dim", "7"}, {"output_dim", "5"}, {"dtype", "float64"}}));
  const ir::Graph g = b.finish();
  runtime::Tensor id_values(TensorType{DType::i32, {2, 3}});
  const int32_t rows[] = {3, 0, 3, 6, 9, 3};
  for (int i = 0; i < 6; ++i) id_values.data<int32_t>()[i] = rows[i];
  EXPECT_TRUE(check_gradients(g, {.wrt = {"w"}, .given = {{"ids", id_values}}, .max_elements = 35}));
  EXPECT_ERROR(engine::build_backward(g, {.wrt = {"ids"}}), "ids");
}

// RNN backpropagates through time in every mode, stacked and bidirectional, into the data,
// the flat parameters and the initial states, from the output and (with state_outputs) the
// final states; every gradient element of the small parameter vectors is checked.
TEST(NnGradients, RnnBackpropagatesThroughTime) {
  struct Case {
    std::string mode;
    int layers;
    bool bidirectional, state_outputs;
  };
  const std::vector<Case> cases = {{"lstm", 1, false, true}, {"lstm", 2, true, false}, {"gru", 2, true, true},
                                   {"gru", 1, false, false}, {"rnn_tanh", 2, true, true}, {"rnn_relu", 1, true, true}};
  for (const Case& c : cases) {
    const Attrs attrs = {{"mode", c.mode},
                         {"state_size", "3"},
                         {"num_layers", std::to_string(c.layers)},
                         {"bidirectional", c.bidirectional ? "True" : "False"},
                         {"state_outputs", c.state_outputs ? "True" : "False"}};
    SCOPED_TRACE(case_name("RNN", attrs));
    ir::GraphBuilder b;
    std::vector<ValueRef> ins = {b.input("x", {DType::f64, {4, 2, 5}}), b.param("params"), b.param("h0")};
    if (c.mode == "lstm") ins.push_back(b.param("c0"));
    for (const ValueRef out : b.op_multi("RNN", ins, attrs)) b.output(out);
    EXPECT_TRUE(check_gradients(b.finish(), {.max_elements = 400}));
  }
}

// bf16 layers with an f32 bias (as AMP leaves them): every gradient has its input's type,
// the bias's summed in f32, and equals the sum of the f32 head gradient's rows.
TEST(NnGradients, LowPrecisionLayersKeepAWideBiasGradient) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : bf16[3,2,5,5]
    %w = var param : bf16[4,2,3,3]
    %b = var param : f32[4]
    %wf = var param : bf16[6,36]
    %bf = var param : f32[6]
    %c = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=4, stride=[2,2], pad=[1,1]}
    %p = Pooling(%c) {kernel=[2,2], pool_type="max", pooling_convention="full"}
    %f = FullyConnected(%c, %wf, %bf) {num_hidden=6}
    return %f, %p
  })");
  ir::infer_types(g);
  const engine::BackwardGraph bg = engine::build_backward(g, {.with_inputs = true});
  ASSERT_EQ(bg.gradient_of, (std::vector<std::string>{"x", "w", "b", "wf", "bf"}));
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 5);
  const std::vector<runtime::Tensor> out = runtime::interpret(bg.graph, vars);
  for (size_t v = 0; v < bg.gradient_of.size(); ++v)
    EXPECT_EQ(out.at(bg.num_forward_outputs + v).type(), vars.at(bg.gradient_of[v]).type()) << bg.gradient_of[v];
  const std::vector<double> head = runtime::to_f64_vector(vars.at(bg.head_grads.at(0)));
  const std::vector<double> bias_grad = runtime::to_f64_vector(out.at(bg.num_forward_outputs + 4));
  for (size_t h = 0; h < 6; ++h) {
    double sum = 0;
    for (size_t r = 0; r < 3; ++r) sum += head[r * 6 + h];
    EXPECT_NEAR(bias_grad[h], sum, 1e-5 * (1 + std::fabs(sum))) << h;
  }
}

// The backward ops check the gradient they are given against their forward output.
TEST(NnGradients, BackwardOpsRejectAMismatchedGradient) {
  const auto infer = [](const std::string& text) {
    ir::Graph g = ir::parse_graph(text);
    ir::infer_types(g);
  };
  EXPECT_ERROR(infer(R"(graph {
    %x = var input : f32[1,2,6,6]
    %dy = var input : f32[1,2,3,2]
    %dx = _backward_Pooling(%x, %dy) {kernel=[2,2], stride=[2,2]}
    return %dx
  })"),
               "input 1 (out_grad) is f32[1,2,3,2] but the forward output is f32[1,2,3,3]");
  EXPECT_ERROR(infer(R"(graph {
    %x = var input : f32[1,2,6,6]
    %dy = var input : f64[1,4,4,4]
    %dw = _backward_Convolution_weight(%x, %dy) {kernel=[3,3], num_filter=4}
    return %dw
  })"),
               "out_grad");
  EXPECT_ERROR(infer(R"(graph {
    %ids = var input : i32[3]
    %dy = var input : f32[3,4]
    %dw = _backward_Embedding(%ids, %dy) {input_dim=5, output_dim=2}
    return %dw
  })"),
               "input 1 (out_grad) is f32[3,4] but the forward output is f32[3,2]");
  EXPECT_ERROR(infer(R"(graph {
    %x = var input : f32[1,2,6,6]
    %dy = var input : f32[1,2,2,2]
    %dx = _backward_AdaptiveAvgPooling2D(%x, %dy) {output_size=[3]}
    return %dx
  })"),
               "_backward_AdaptiveAvgPooling2D");
}

// oneDNN runs the convolutions' gradients (Deconvolution for the data, its backward-weights
// convolution for _backward_Convolution_weight) as the reference kernels define them, in
// every geometry the gradient rules emit.
TEST(NnGradients, OnednnConvolutionGradientsMatchTheReferenceKernels) {
  struct Case {
    std::string op;
    Shape data, out_grad;  // out_grad: the weight gradient's second input
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      // adj beyond pad, as the data gradient of a strided convolution without padding has:
      // oneDNN's backward-data convolution runs it.
      {"Deconvolution",
       {2, 8, 4, 4},
       {},
       {{"kernel", "(1,1)"}, {"num_filter", "4"}, {"stride", "(2,2)"}, {"adj", "(1,1)"}}},
      {"Deconvolution",
       {1, 3, 5, 6},
       {},
       {{"kernel", "(3,3)"},
        {"num_filter", "4"},
        {"stride", "(3,2)"},
        {"adj", "(2,1)"},
        {"pad", "(1,0)"},
        {"num_group", "2"},
        {"layout", "NHWC"}}},
      {"Deconvolution",
       {2, 8, 5, 5},
       {},
       {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"adj", "(1,1)"}}},
      {"Deconvolution",
       {1, 6, 4, 5},
       {},
       {{"kernel", "(3,2)"}, {"num_filter", "9"}, {"num_group", "3"}, {"dilate", "(2,1)"}}},
      {"Deconvolution",
       {2, 4, 6, 8},
       {},
       {{"kernel", "(2,2)"}, {"num_filter", "8"}, {"stride", "(2,2)"}, {"layout", "NHWC"}}},
      {"Deconvolution", {1, 4, 3, 4, 5}, {}, {{"kernel", "(3,3,3)"}, {"num_filter", "2"}, {"pad", "(1,1,1)"}}},
      {"Deconvolution",
       {2, 3, 9},
       {},
       {{"kernel", "(3,)"}, {"num_filter", "5"}, {"stride", "(2,)"}, {"pad", "(1,)"}, {"no_bias", "False"}}},
      {"_backward_Convolution_weight",
       {2, 4, 9, 9},
       {2, 8, 5, 5},
       {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}}},
      {"_backward_Convolution_weight",
       {1, 6, 7, 6},
       {1, 9, 3, 5},
       {{"kernel", "(3,2)"}, {"num_filter", "9"}, {"num_group", "3"}, {"dilate", "(2,1)"}}},
      {"_backward_Convolution_weight",
       {2, 8, 8, 4},
       {2, 4, 4, 16},
       {{"kernel", "(1,1)"}, {"num_filter", "16"}, {"stride", "(2,2)"}, {"layout", "NHWC"}}},
      {"_backward_Convolution_weight",
       {1, 2, 4, 5, 6},
       {1, 3, 4, 5, 6},
       {{"kernel", "(3,3,3)"}, {"num_filter", "3"}, {"pad", "(1,1,1)"}}},
      {"_backward_Convolution_weight",
       {3, 4, 11},
       {3, 6, 5},
       {{"kernel", "(3,)"}, {"num_filter", "6"}, {"stride", "(2,)"}}},
  };
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const Case& c : cases) {
      SCOPED_TRACE(case_name(c.op, c.attrs) + " " + std::string(ir::dtype_name(dtype)));
      // bf16: oneDNN and the reference may round an element's f32 sum differently.
      const double tol = dtype == DType::f32 ? 1e-5 : 1e-2;
      ir::GraphBuilder b;
      std::vector<ValueRef> ins = {b.input("x", {dtype, c.data})};
      if (c.out_grad.empty()) {
        ins.push_back(b.param("w"));
        if (c.attrs.count("no_bias")) ins.push_back(b.param("b"));
      } else {
        ins.push_back(b.input("dy", {dtype, c.out_grad}));
      }
      b.output(b.op(c.op, ins, c.attrs));
      const ir::Graph g = b.finish();
      const ir::Node& node = g.nodes.back();
      const runtime::Bindings vars = runtime::random_bindings(g, 3);
      std::vector<runtime::Tensor> inputs;
      std::vector<TensorType> types;
      for (const ValueRef in : node.inputs) {
        inputs.push_back(vars.at(g.nodes[in.node].name));
        types.push_back(inputs.back().type());
      }
      ASSERT_TRUE(runtime::onednn_supports(node, types)) << runtime::onednn_refusal(node, types);
      std::vector<runtime::Tensor> got = {runtime::Tensor(node.outputs[0])}, want = {runtime::Tensor(node.outputs[0])};
      runtime::onednn_run(node, inputs, got);
      (*runtime::find_reference_kernel(c.op))(node, inputs, want);
      double largest = 0;
      for (int64_t i = 0; i < want[0].size(); ++i) largest = std::max(largest, std::fabs(want[0].get_f64(i)));
      ASSERT_GT(largest, 0);
      for (int64_t i = 0; i < want[0].size(); ++i)
        ASSERT_NEAR(got[0].get_f64(i), want[0].get_f64(i), tol * largest) << "element " << i;
    }
  // adj beyond pad with a bias: neither oneDNN primitive takes it, so the reference runs it.
  ir::GraphBuilder b;
  b.output(
      b.op("Deconvolution", {b.input("x", {DType::f32, {1, 2, 4, 4}}), b.param("w"), b.param("b")},
           {{"kernel", "(1,1)"}, {"num_filter", "2"}, {"stride", "(2,2)"}, {"adj", "(1,1)"}, {"no_bias", "False"}}));
  const ir::Graph g = b.finish();
  std::vector<TensorType> types;
  for (const ValueRef in : g.nodes.back().inputs) types.push_back(g.type(in));
  EXPECT_FALSE(runtime::onednn_supports(g.nodes.back(), types));
  EXPECT_NE(runtime::onednn_refusal(g.nodes.back(), types).find("adj exceeds pad"), std::string::npos);
}

// The f32 backward graph of each family, compiled by the executor (oneDNN for the
// products and convolutions, fused kernels for the casts and sums), equals the interpreter
// running the same graph to within summation order.
// The products and convolutions of the backward graph must all go to oneDNN.
void expect_executor_matches_interpreter(const ir::Graph& forward, double tol) {
  const engine::BackwardGraph bg = engine::build_backward(forward, {.with_inputs = true});
  for (const ir::Node& n : bg.graph.nodes) {
    if (n.op != "Convolution" && n.op != "Deconvolution" && n.op != "_backward_Convolution_weight" && n.op != "dot" &&
        n.op != "batch_dot" && n.op != "FullyConnected")
      continue;
    std::vector<TensorType> types;
    for (const ValueRef in : n.inputs) types.push_back(bg.graph.type(in));
    EXPECT_TRUE(runtime::onednn_supports(n, types))
        << n.name << " (" << n.op << "): " << runtime::onednn_refusal(n, types);
  }
  const engine::Executable exe = engine::Executable::compile(bg.graph);
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 11);
  const std::vector<runtime::Tensor> want = runtime::interpret(bg.graph, vars), got = exe.run(vars);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type()) << "output " << k;
    double largest = 0;
    for (int64_t i = 0; i < want[k].size(); ++i) largest = std::max(largest, std::fabs(want[k].get_f64(i)));
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_NEAR(want[k].get_f64(i), got[k].get_f64(i), tol * largest) << "output " << k << " element " << i;
  }
}

TEST(NnGradients, ExecutorRunsBackwardGraphsLikeTheInterpreter) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4,3,9,9]
    %w = var param : f32[8,3,3,3]
    %b = var param : f32[8]
    %wd = var param : f32[8,2,2,2]
    %wf = var param : f32[5,4]
    %bf = var param : f32[5]
    %ids = var input : i32[4,3]
    %we = var param : f32[6,5]
    %c = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=8, stride=[2,2], pad=[1,1]}
    %r = Activation(%c) {act_type="relu"}
    %p = Pooling(%r) {kernel=[2,2], pool_type="max", stride=[2,2], pooling_convention="full"}
    %d = Deconvolution(%p, %wd) {kernel=[2,2], num_filter=4, stride=[2,2], num_group=2}
    %q = Pooling(%d) {pool_type="avg", global_pool=true}
    %f = FullyConnected(%q, %wf, %bf) {num_hidden=5}
    %e = Embedding(%ids, %we) {input_dim=6, output_dim=5}
    %t = batch_dot(%e, %e) {transpose_b=true}
    %u = dot(%f, %wf)
    return %t, %u
  })");
  ir::infer_types(g);
  expect_executor_matches_interpreter(g, 1e-5);
}

// layout_optimize on a backward graph moves the convolutions of both passes to channels-last
// (the backward ops keep their layout, reading through transposes) and computes the same.
TEST(NnGradients, LayoutOptimizedBackwardGraphComputesTheSame) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f64[2,3,7,7]
    %w = var param : f64[4,3,3,3]
    %b = var param : f64[4]
    %wd = var param : f64[4,2,2,2]
    %c = Convolution(%x, %w, %b) {kernel=[3,3], num_filter=4, stride=[2,2]}
    %p = Pooling(%c) {kernel=[2,2], pool_type="avg", pooling_convention="full"}
    %d = Deconvolution(%p, %wd) {kernel=[2,2], num_filter=2, stride=[2,2], adj=[1,1]}
    %t = tanh(%d)
    return %t
  })");
  ir::infer_types(g);
  const engine::BackwardGraph bg = engine::build_backward(g, {.with_inputs = true});
  ir::Graph nhwc = bg.graph;
  ASSERT_TRUE(engine::layout_optimize(nhwc, "nhwc"));
  const runtime::Bindings vars = runtime::random_bindings(bg.graph, 13);
  const std::vector<runtime::Tensor> want = runtime::interpret(bg.graph, vars), got = runtime::interpret(nhwc, vars);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type()) << "output " << k;
    for (int64_t i = 0; i < want[k].size(); ++i)
      ASSERT_NEAR(want[k].get_f64(i), got[k].get_f64(i), 1e-12) << "output " << k << " element " << i;
  }
}

// The CPU's default layout runs a training compile's convolutions channels-last, and the
// graph output is then a transpose back: its head gradient keeps the output's name, so the
// caller binds the same names whatever the layout (a convolution output named after the
// transpose once asked for 't_NCHW_output_head_grad').
TEST(NnGradients, HeadGradientsKeepTheOutputNamesInEveryLayout) {
  const ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[2,3,8,8]
    %w = var param : f32[4,3,3,3]
    %c = Convolution(%x, %w) {kernel=[3,3], num_filter=4, no_bias=true}
    %t = tanh(%c)
    return %t, %c
  })");
  std::vector<std::vector<runtime::Tensor>> results;
  for (const char* layout : {"keep", "nhwc", "auto"}) {
    SCOPED_TRACE(layout);
    engine::ExecutorOptions eo;
    eo.layout = layout;
    eo.backward = engine::BackwardOptions{};
    const engine::Executable exe = engine::Executable::compile(g, eo);
    EXPECT_EQ(exe.compile_stats().head_grads, (std::vector<std::string>{"t_output_head_grad", "c_output_head_grad"}));
    results.push_back(exe.run(runtime::random_bindings(exe.graph(), 5)));  // values by name
  }
  for (size_t r = 1; r < results.size(); ++r)
    for (size_t k = 0; k < results[0].size(); ++k)
      EXPECT_LE(relative_error(results[r][k], results[0][k]), 1e-5) << "layout " << r << ", output " << k;
}

}  // namespace
}  // namespace ampfuse
