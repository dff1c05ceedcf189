// MXNet symbol JSON import: the graph MXNet binds. A symbol is what its heads reach;
// variables that share a name are one array; a variable read through a cast is still what
// the slot behind the cast makes it. (MXNet 1.9.1: mx.sym.load of these files lists only
// reached arguments, and binding {"data": [1, 2]} to duplicate_variable.json gives [2, 4].)
#include "ir/mxnet_json.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

namespace ampfuse::ir {
namespace {

std::string testdata(const std::string& name) { return std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/" + name; }

std::vector<std::string> node_names(const Graph& g) {
  std::vector<std::string> names;
  for (const Node& n : g.nodes) names.push_back(n.name);
  return names;
}

// The head is the logits: SoftmaxOutput, its label and a side branch with an input of its
// own are not part of the symbol, and need no shapes.
TEST(MxnetImportReach, NodesNoHeadReachesAreDropped) {
  MxnetImportOptions opts;
  opts.input_shapes = {{"data", {2, 5}}};
  std::set<std::string> unreached;
  opts.unreached_variables = &unreached;
  const Graph g = load_mxnet_json_file(testdata("unreached_label.json"), opts);
  EXPECT_EQ(node_names(g), (std::vector<std::string>{"data", "fc_weight", "fc_bias", "fc"}));
  EXPECT_EQ(g.outputs, (std::vector<ValueRef>{{3, 0}}));
  EXPECT_EQ(g.type({3, 0}), (TensorType{DType::f32, {2, 3}}));
  EXPECT_EQ(unreached, (std::set<std::string>{"other", "softmax_label"}));
}

// As MXNet's bind accepts shapes of arguments it does not use, the options may name the
// dropped variables; a name the file does not have at all is still an error.
TEST(MxnetImportReach, OptionsMayNameDroppedVariablesOnly) {
  MxnetImportOptions opts;
  opts.input_shapes = {{"data", {2, 5}}, {"softmax_label", {2}}, {"other", {7}}};
  EXPECT_EQ(load_mxnet_json_file(testdata("unreached_label.json"), opts).nodes.size(), 4u);
  opts.input_shapes["lable"] = {2};
  EXPECT_ERROR(load_mxnet_json_file(testdata("unreached_label.json"), opts),
               "input_shapes names 'lable', which is not a variable of the graph (its inputs: data)");
}

// The negative case beside it: dropped nodes are still read and checked, as MXNet's
// loader checks them.
TEST(MxnetImportReach, DroppedNodesAreStillChecked) {
  EXPECT_ERROR(import_mxnet_json(R"js({"nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "relu", "name": "used", "inputs": [[0, 0, 0]]},
      {"op": "NoSuchOp", "name": "unused", "inputs": [[0, 0, 0]]}],
    "heads": [[1, 0, 0]]})js",
                                 "dropped.json"),
               "dropped.json: node 2 'unused' (NoSuchOp): unknown op 'NoSuchOp'");
}

TEST(MxnetImportReach, VariablesWithOneNameAreOneVariable) {
  MxnetImportOptions opts;
  opts.input_shapes = {{"data", {2}}};
  const Graph g = load_mxnet_json_file(testdata("duplicate_variable.json"), opts);
  ASSERT_EQ(node_names(g), (std::vector<std::string>{"data", "sum"}));
  EXPECT_EQ(g.nodes[1].inputs, (std::vector<ValueRef>{{0, 0}, {0, 0}}));
  runtime::Tensor data(TensorType{DType::f32, {2}});
  data.set_f64(0, 1.0);
  data.set_f64(1, 2.0);
  const runtime::Tensor sum = runtime::interpret(g, {{"data", data}}).at(0);
  EXPECT_EQ(sum.get_f64(0), 2.0);  // MXNet 1.9.1 binds both to the one array: [2, 4]
  EXPECT_EQ(sum.get_f64(1), 4.0);
}

// One array has one shape: hints that disagree are refused (err_duplicate_variable_hints.json
// in MxnetImportError); hints that one of them alone carries describe it.
TEST(MxnetImportReach, HintsOfOneNameMerge) {
  const Graph g = import_mxnet_json(R"js({"nodes": [
      {"op": "null", "name": "data", "inputs": []},
      {"op": "null", "name": "data", "attrs": {"__shape__": "(3,)"}, "inputs": []},
      {"op": "elemwise_add", "name": "sum", "inputs": [[0, 0, 0], [1, 0, 0]]}],
    "heads": [[2, 0, 0]]})js",
                                    "dup.json");
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.type({1, 0}), (TensorType{DType::f32, {3}}));
}

// A converted model reads its weights through amp_cast, Cast and amp_multicast: they are
// weights (and statistics) all the same, and only the data is an input.
TEST(MxnetImportReach, RolesLookThroughCasts) {
  MxnetImportOptions opts;
  opts.infer = false;
  const Graph g = load_mxnet_json_file(testdata("casts_before_slots.json"), opts);
  std::map<std::string, VarRole> roles;
  for (const Node& n : g.nodes)
    if (n.is_var()) roles[n.name] = n.role;
  EXPECT_EQ(roles, (std::map<std::string, VarRole>{{"data", VarRole::input},
                                                   {"fc_weight", VarRole::param},
                                                   {"fc_bias", VarRole::param},
                                                   {"bn_gamma", VarRole::param},
                                                   {"bn_beta", VarRole::param},
                                                   {"bn_moving_mean", VarRole::aux},
                                                   {"bn_moving_var", VarRole::aux}}));
}

}  // namespace
}  // namespace ampfuse::ir
