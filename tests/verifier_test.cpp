// The verifier: valid graphs pass; each broken invariant is named with its node.
#include "ir/verifier.h"

#include "ir/builder.h"
#include "ir/text_format.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

namespace ampfuse::ir {
namespace {

using ampfuse::testing::error_message;

// x:f32[2,4] -> relu -> SliceChannel(2) -> elemwise_add(split:0, split:1); outputs y, split:1.
//   nodes: 0 x, 1 r, 2 split, 3 y
Graph small_graph(bool infer = true) {
  GraphBuilder b;
  ValueRef x = b.input("x", {DType::f32, {2, 4}});
  ValueRef r = b.op("relu", {x}, {}, "r");
  auto split = b.op_multi("SliceChannel", {r}, {{"num_outputs", "2"}}, "split");
  b.output(b.op("elemwise_add", {split[0], split[1]}, {}, "y"));
  b.output(split[1]);
  return b.finish(infer);
}

// data -> Convolution(weight, no bias) -> _plus_scalar;  nodes: 0 data, 1 w, 2 conv, 3 plus
Graph conv_graph(bool infer = true) {
  GraphBuilder b;
  ValueRef data = b.input("data", {DType::f32, {1, 3, 6, 6}});
  ValueRef conv = b.op("Convolution", {data, b.param("w")},
                       {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"no_bias", "True"}}, "conv");
  b.output(b.op("_plus_scalar", {conv}, {{"scalar", "0.5"}}, "plus"));
  return b.finish(infer);
}

std::string verify_error(const Graph& g) {
  return error_message([&] { verify(g); });
}

TEST(VerifierTest, AcceptsValidGraphs) {
  EXPECT_NO_THROW(verify(small_graph()));
  EXPECT_NO_THROW(verify(small_graph(/*infer=*/false)));
  EXPECT_NO_THROW(verify(conv_graph()));
  EXPECT_NO_THROW(verify(conv_graph(/*infer=*/false)));  // the weight has no type yet
  EXPECT_NO_THROW(verify(Graph{}));
  // Repeated op names are legal (MXNet graphs have them); only variable names are unique.
  EXPECT_NO_THROW(verify(parse_graph("graph { %x = var input  %r = relu(%x)  %r~2 = relu(%r)  return %r~2 }")));
}

TEST(VerifierTest, UnknownOp) {
  Graph g = conv_graph();
  g.nodes[2].op = "Convolutoin";
  EXPECT_EQ(verify_error(g), "node 2 'conv' (Convolutoin): unknown op 'Convolutoin' (did you mean 'Convolution'?)");
}

TEST(VerifierTest, InputCountFollowsTheOpsAttributes) {
  Graph g = small_graph();
  g.nodes[3].inputs.pop_back();
  EXPECT_EQ(verify_error(g), "node 3 'y' (elemwise_add): has 1 input, elemwise_add expects 2");

  Graph c = conv_graph();
  c.nodes[2].attrs.set("no_bias", false);  // now the bias slot counts
  EXPECT_EQ(verify_error(c), "node 2 'conv' (Convolution): has 2 inputs, Convolution expects 3");
}

TEST(VerifierTest, InputsMustComeFromEarlierNodes) {
  Graph g = small_graph();
  g.nodes[1].inputs[0] = {3, 0};
  EXPECT_EQ(verify_error(g),
            "node 1 'r' (relu): input 0 refers to node 3 'y' (elemwise_add), which does not come before it "
            "(a cycle or a misordered graph)");
  g.nodes[1].inputs[0] = {1, 0};
  EXPECT_EQ(verify_error(g),
            "node 1 'r' (relu): input 0 refers to node 1 'r' (relu), which does not come before it "
            "(a cycle or a misordered graph)");
  g.nodes[1].inputs[0] = {-1, 0};
  EXPECT_EQ(verify_error(g),
            "node 1 'r' (relu): input 0 refers to node -1, which does not exist (the graph has 4 nodes)");
}

TEST(VerifierTest, InputsMustNameAnExistingOutput) {
  Graph g = small_graph();
  g.nodes[3].inputs[1] = {2, 2};
  EXPECT_EQ(verify_error(g),
            "node 3 'y' (elemwise_add): input 1 refers to output 2 of node 2 'split' (SliceChannel), "
            "which has 2 outputs");
  g = small_graph();
  g.nodes[1].inputs[0] = {0, 1};
  EXPECT_EQ(verify_error(g), "node 1 'r' (relu): input 0 refers to output 1 of node 0 'x' (var), which has 1 output");
}

TEST(VerifierTest, GraphOutputsMustExist) {
  Graph g = small_graph();
  g.outputs[1] = {9, 0};
  EXPECT_EQ(verify_error(g), "graph output 1 refers to node 9, which does not exist (the graph has 4 nodes)");
  g.outputs[1] = {2, -1};
  EXPECT_EQ(verify_error(g),
            "graph output 1 refers to output -1 of node 2 'split' (SliceChannel), which has 2 outputs");
}

TEST(VerifierTest, AttributesMustFitTheSchema) {
  Graph g = small_graph();
  g.nodes[2].attrs.set("num_outputs", std::string("2"));
  EXPECT_EQ(verify_error(g),
            "node 2 'split' (SliceChannel): attribute 'num_outputs' of SliceChannel must be int, not \"2\"");

  g = small_graph();
  g.nodes[2].attrs.set("parts", int64_t{2});
  EXPECT_EQ(verify_error(g), "node 2 'split' (SliceChannel): SliceChannel has no attribute 'parts'");

  g = small_graph();
  g.nodes[2].attrs.erase("num_outputs");
  EXPECT_EQ(verify_error(g), "node 2 'split' (SliceChannel): SliceChannel needs attribute 'num_outputs'");

  GraphBuilder b;
  b.output(b.op("Activation", {b.input("x", {DType::f32, {3}})}, {{"act_type", "relu"}}, "act"));
  Graph a = b.finish();
  a.nodes[1].attrs.set("act_type", std::string("relux"));
  EXPECT_EQ(verify_error(a), "node 1 'act' (Activation): attribute 'act_type' of Activation: 'relux' is not one of "
                             "relu, sigmoid, tanh, softrelu, softsign, log_sigmoid, mish");
}

// Code that reads a node's attributes finds every declared one, with its declared kind:
// what complete_attrs would still add or widen is a defect of the graph.
TEST(VerifierTest, AttributesMustBeComplete) {
  Graph g = small_graph();
  g.nodes[2].attrs.erase("axis");
  EXPECT_EQ(verify_error(g), "node 2 'split' (SliceChannel): attribute 'axis' is missing (its default is 1)");

  Graph c = conv_graph();
  c.nodes[3].attrs.set("scalar", int64_t{2});
  EXPECT_EQ(verify_error(c),
            "node 3 'plus' (_plus_scalar): attribute 'scalar' holds 2 where _plus_scalar declares a float");
}

TEST(VerifierTest, VariableNamesAreUnique) {
  Graph g = conv_graph();
  g.nodes[1].name = "data";
  EXPECT_EQ(verify_error(g), "node 1 'data' (var): variable name 'data' is used by node 0 'data' (var) too");
}

TEST(VerifierTest, VariablesHaveNoInputsOrAttributes) {
  Graph g = conv_graph();
  g.nodes[1].inputs = {{0, 0}};
  EXPECT_EQ(verify_error(g), "node 1 'w' (var): variable has 1 input");
  g = conv_graph();
  g.nodes[1].attrs.set("lr_mult", 2.0);
  EXPECT_EQ(verify_error(g),
            "node 1 'w' (var): variable has attributes (lr_mult ...); variables keep extra strings as hints");
}

TEST(VerifierTest, OutputTypeCountFollowsTheOp) {
  Graph g = small_graph();
  g.nodes[2].outputs.pop_back();
  EXPECT_EQ(verify_error(g), "node 2 'split' (SliceChannel): has 1 output type but SliceChannel produces 2 outputs");
}

TEST(VerifierTest, TypesMustMatchReinference) {
  Graph g = conv_graph();
  g.nodes[2].outputs[0].shape = {1, 8, 3, 3};
  EXPECT_EQ(verify_error(g), "node 2 'conv' (Convolution): output 0 is f32[1,8,3,3], but inference gives f32[1,8,4,4]");

  g = conv_graph();
  g.nodes[3].outputs[0].dtype = DType::f16;
  EXPECT_EQ(verify_error(g),
            "node 3 'plus' (_plus_scalar): output 0 is f16[1,8,4,4], but inference gives f32[1,8,4,4]");

  g = small_graph();
  g.nodes[2].outputs[1].shape = {2, 3};
  EXPECT_EQ(verify_error(g), "node 2 'split' (SliceChannel): output 1 is f32[2,3], but inference gives f32[2,2]");
}

TEST(VerifierTest, VariableTypesMustSuitTheirConsumers) {
  Graph g = conv_graph();
  g.nodes[1].outputs[0].shape = {8, 3, 5, 5};  // a weight for another kernel size
  const std::string msg = verify_error(g);
  EXPECT_TRUE(msg.starts_with("type inference from the variables' types: node 2 'conv' (Convolution)")) << msg;
}

TEST(VerifierTest, TypesAreAllOrNothing) {
  Graph g = small_graph();
  g.nodes[1].outputs.clear();
  EXPECT_EQ(verify_error(g),
            "node 1 'r' (relu): has no type, but other nodes have "
            "(types come from infer_types, for all nodes at once)");
  g = conv_graph();
  g.nodes[1].outputs.clear();
  EXPECT_EQ(verify_error(g),
            "node 1 'w' (var): has no type, but other nodes have (types come from infer_types, for all nodes at once)");
}

}  // namespace
}  // namespace ampfuse::ir
