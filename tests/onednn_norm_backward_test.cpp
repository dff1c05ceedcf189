// The backward ops of softmax and LayerNorm through oneDNN (runtime/onednn/
// onednn_norm_backward.cpp) against the interpreter's reference kernels at odd shapes, f32
// and bf16; what oneDNN refuses, with its reason; and a compiled backward graph whose
// softmax and LayerNorm gradients run on oneDNN and equal the interpreter.
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "runtime/interpreter.h"
#include "runtime/onednn/onednn_ops.h"

#include "tests/model_files.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <iostream>

namespace ampfuse::runtime {
namespace {

using ampfuse::testing::relative_error;
using ir::DType;
using ir::Shape;
using Attrs = std::map<std::string, std::string>;

// A graph of one `op` node over inputs in0, in1... of these types, all its outputs returned.
ir::Graph one_node(const std::string& op, const std::vector<TensorType>& types, const Attrs& attrs) {
  ir::GraphBuilder b;
  std::vector<ir::ValueRef> ins;
  for (size_t i = 0; i < types.size(); ++i) ins.push_back(b.input("in" + std::to_string(i), types[i]));
  for (ir::ValueRef out : b.op_multi(op, ins, attrs, "node")) b.output(out);
  return b.finish();
}

std::vector<TensorType> input_types(const ir::Graph& g, const ir::Node& node) {
  std::vector<TensorType> types;
  for (ir::ValueRef in : node.inputs) types.push_back(g.type(in));
  return types;
}

// Runs the node of one_node(op, types, attrs) through oneDNN and the interpreter on random
// inputs in [-1, 1) and checks each output within `tol` of the largest |value| of the
// interpreter's. Prints the implementation oneDNN chose, for the record.
void check_against_interpreter(const std::string& op, const std::vector<TensorType>& types, const Attrs& attrs,
                               double tol) {
  const ir::Graph g = one_node(op, types, attrs);
  const ir::Node& node = g.nodes.back();
  std::string label = op;
  for (const TensorType& t : types) label += fmt::format(" {}", ir::type_str(t));
  for (const auto& [name, value] : attrs) label += fmt::format(" {}={}", name, value);
  SCOPED_TRACE(label);
  const Bindings vars = random_bindings(g, 7);
  const std::vector<Tensor> want = interpret(g, vars);
  std::vector<Tensor> inputs, got;
  for (size_t i = 0; i < types.size(); ++i) inputs.push_back(vars.at("in" + std::to_string(i)));
  for (const TensorType& t : node.outputs) got.emplace_back(t);
  EXPECT_TRUE(onednn_supports(node, types)) << onednn_refusal(node, types);
  if (!onednn_supports(node, types)) return;
  onednn_run(node, inputs, got);
  for (size_t o = 0; o < got.size(); ++o) EXPECT_LE(relative_error(got[o], want[o]), tol) << "output " << o;
  std::cout << "[   impl   ] " << label << ": " << onednn_impl_name(node, types) << "\n";
}

// f32: summation order only. bf16 outputs: that can put the f32 value on the other side of
// a rounding boundary, one step (2^-8 relative) of an element no larger than the largest.
double tolerance(DType t) { return t == DType::f32 ? 1e-5 : 1.0 / 128; }

TEST(OnednnNormBackward, SoftmaxGradientMatchesTheInterpreter) {
  struct Case {
    Shape shape;
    std::string axis;
  };
  // Rows of 1 ({5,1}), one row, rank 1, primes, and a middle axis.
  const std::vector<Case> cases = {{{5, 1}, "-1"}, {{1, 7}, "-1"}, {{7}, "0"},     {{3, 13}, "1"},
                                   {{2, 3, 17}, "-1"}, {{2, 5, 3}, "1"}, {{4, 2, 1}, "-1"}};
  for (DType t : {DType::f32, DType::bf16})
    for (const char* log : {"False", "True"})
      for (const Case& c : cases) {
        const Attrs attrs = {{"axis", c.axis}, {"log", log}, {"dtype", std::string(ir::dtype_name(t))}};
        check_against_interpreter("_backward_softmax", {{t, c.shape}, {t, c.shape}}, attrs, tolerance(t));
      }
  // Gradients wider than the output: computed in f32, like the interpreter.
  check_against_interpreter("_backward_softmax", {{DType::f32, {3, 11}}, {DType::bf16, {3, 11}}},
                            {{"axis", "-1"}, {"dtype", "bfloat16"}}, tolerance(DType::bf16));
}

TEST(OnednnNormBackward, LayerNormGradientMatchesTheInterpreter) {
  struct Case {
    Shape shape;
    Attrs attrs;
  };
  // A channel of 1 (xhat is 0, sd is sqrt(eps)), one row, rank 1, primes; the last axis
  // named either way; MXNet's default eps and another.
  const std::vector<Case> cases = {{{5, 1}, {}},
                                   {{1, 7}, {}},
                                   {{7}, {{"axis", "0"}}},
                                   {{3, 13}, {{"eps", "1e-3"}}},
                                   {{2, 3, 17}, {{"axis", "2"}}},
                                   {{1, 1, 31}, {{"axis", "-1"}, {"eps", "1e-2"}}}};
  // (data, gamma) dtypes: oneDNN takes gamma in f32 only, so a bf16 gamma runs as f32.
  const std::pair<DType, DType> dtypes[] = {{DType::f32, DType::f32}, {DType::bf16, DType::f32}, {DType::bf16, DType::bf16}};
  for (const auto& [t, gamma] : dtypes)
    for (const Case& c : cases) {
      const Shape channels = {c.shape.back()};
      check_against_interpreter("_backward_LayerNorm", {{t, c.shape}, {t, c.shape}, {gamma, channels}}, c.attrs,
                                tolerance(t));
    }
}

// What oneDNN cannot compute is refused with the reason; the reference kernel runs it.
TEST(OnednnNormBackward, RefusesWhatItCannotDo) {
  struct Refused {
    std::string op;
    std::vector<TensorType> in;
    Attrs attrs;
    std::string reason;
  };
  const TensorType f32_5x3{DType::f32, {5, 3}};
  const std::vector<Refused> cases = {
      {"_backward_softmax", {f32_5x3, f32_5x3}, {{"axis", "-1"}, {"dtype", "float32"}, {"temperature", "2"}},
       "temperature"},
      {"_backward_softmax", {f32_5x3, f32_5x3}, {{"axis", "-1"}, {"dtype", "float32"}, {"negate", "True"}}, "softmin"},
      {"_backward_softmax", {{DType::f64, {5, 3}}, {DType::f64, {5, 3}}}, {{"axis", "-1"}, {"dtype", "float64"}},
       "f64"},
      {"_backward_LayerNorm", {f32_5x3, f32_5x3, {DType::f32, {5}}}, {{"axis", "0"}}, "last axis"},
      {"_backward_LayerNorm", {{DType::f64, {5, 3}}, {DType::f64, {5, 3}}, {DType::f64, {3}}}, {}, "f64"},
  };
  for (const Refused& c : cases) {
    const ir::Graph g = one_node(c.op, c.in, c.attrs);
    const ir::Node& node = g.nodes.back();
    EXPECT_FALSE(onednn_supports(node, c.in)) << c.op << " " << c.reason;
    EXPECT_NE(onednn_refusal(node, c.in).find(c.reason), std::string::npos) << onednn_refusal(node, c.in);
    EXPECT_EQ(onednn_impl_name(node, c.in), "");
  }
}

// x -> FullyConnected -> LayerNorm -> softmax (or log_softmax), f32 and bf16, differentiated
// with respect to every param under a random head gradient: the two backward ops run on
// oneDNN (bf16 natively or as f32, whichever this CPU has) and the gradients equal the
// interpreter's on the same graph.
TEST(OnednnNormBackward, CompiledBackwardGraphRunsThemOnOnednn) {
  for (DType t : {DType::f32, DType::bf16})
    for (const char* softmax : {"softmax", "log_softmax"}) {
      SCOPED_TRACE(fmt::format("{} {}", softmax, ir::dtype_name(t)));
      ir::GraphBuilder b;
      const ir::ValueRef fc =
          b.op("FullyConnected", {b.input("x", {t, {6, 9}}), b.param("w"), b.param("bias")}, {{"num_hidden", "11"}});
      const ir::ValueRef ln = b.op("LayerNorm", {fc, b.param("gamma"), b.param("beta")}, {});
      b.output(b.op(softmax, {ln}, {{"axis", "-1"}}));
      engine::ExecutorOptions eo;
      eo.backward = engine::BackwardOptions{};
      const engine::Executable exe = engine::Executable::compile(b.finish(), eo);
      const engine::CompileStats& st = exe.compile_stats();
      int backward_on_onednn = 0, onednn_nodes = 0;
      for (const ir::Node& node : exe.graph().nodes) {
        if (node.is_var() || !onednn_supports(node, input_types(exe.graph(), node))) continue;
        ++onednn_nodes;
        if (node.op == "_backward_softmax" || node.op == "_backward_LayerNorm") ++backward_on_onednn;
      }
      EXPECT_EQ(backward_on_onednn, 2);
      EXPECT_EQ(st.onednn_ops, onednn_nodes);
      ASSERT_EQ(st.gradient_of.size(), 4u);
      const Bindings vars = random_bindings(exe.graph(), 11);
      const std::vector<Tensor> want = interpret(exe.graph(), vars);
      const std::vector<Tensor> got = exe.run(vars);
      ASSERT_EQ(got.size(), want.size());
      for (size_t v = 0; v < st.gradient_of.size(); ++v) {
        const size_t o = st.forward_outputs + v;
        EXPECT_LE(relative_error(got[o], want[o]), t == DType::f32 ? 1e-5 : 0.02) << "gradient of " << st.gradient_of[v];
      }
    }
}

}  // namespace
}  // namespace ampfuse::runtime
