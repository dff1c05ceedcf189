// MXNet symbol JSON: import of every format version, its error messages, export, and the
// real model graphs of models/.
#include "ir/mxnet_json.h"
#include "ir/text_format.h"
#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sys/stat.h>

namespace ampfuse::ir {
namespace {

using ampfuse::testing::error_message;
using nlohmann::json;

std::string testdata(const std::string& name) { return std::string(AMPFUSE_TESTDATA_DIR) + "/mxnet/" + name; }

Graph load(const std::string& name, const MxnetImportOptions& opts = {}) {
  return load_mxnet_json_file(testdata(name), opts);
}

MxnetImportOptions shapes(std::map<std::string, Shape> s) {
  MxnetImportOptions opts;
  opts.input_shapes = std::move(s);
  return opts;
}

TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }
TensorType f16(Shape s) { return {DType::f16, std::move(s)}; }

Graph reimport(const Graph& g) { return import_mxnet_json(export_mxnet_json(g), "exported.json"); }

// ---- format variants ------------------------------------------------------------------

// MXNet 0.8: op parameters under "param", symbol attributes under "attr", 2-element
// entries, no node_row_ptr, and BatchNorm without its two auxiliary-state inputs.
TEST(MxnetImport, LegacyParamAndAttrAreMerged) {
  const Graph g = load("legacy_000800.json");
  ASSERT_EQ(g.nodes.size(), 10u);  // 8 in the file + bn_moving_mean, bn_moving_var
  const Node& fc = g.nodes[3];
  EXPECT_EQ(fc.op, "FullyConnected");
  EXPECT_EQ(fc.attrs.get_int("num_hidden"), 4);
  EXPECT_FALSE(fc.attrs.get_bool("no_bias"));
  EXPECT_TRUE(fc.attrs.get_bool("flatten"));  // the default, filled in
  // Symbol attributes as MXNet 1.9.1 loads (and re-saves) them: bare keys become "__key__";
  // the op's weight_lr_mult becomes its weight variable's __lr_mult__.
  EXPECT_EQ(fc.hints, (std::map<std::string, std::string>{{"__ctx_group__", "stage1"}}));
  EXPECT_EQ(g.nodes[1].hints, (std::map<std::string, std::string>{{"__lr_mult__", "1.2"}, {"__wd_mult__", "0.3"}}));
  EXPECT_EQ(fc.inputs, (std::vector<ValueRef>{{0, 0}, {1, 0}, {2, 0}}));

  const Node& data = g.nodes[0];
  EXPECT_TRUE(data.is_var());
  EXPECT_EQ(data.hints, (std::map<std::string, std::string>{{"__ctx_group__", "stage1"}, {"__lr_mult__", "0.2"}}));

  // As MXNet's upgrader does: "<node>_<slot>" variables just before their consumer, which
  // carry the node's attribute map.
  EXPECT_EQ(g.nodes[6].name, "bn_moving_mean");
  EXPECT_EQ(g.nodes[7].name, "bn_moving_var");
  EXPECT_TRUE(g.nodes[6].is_var() && g.nodes[7].is_var());
  EXPECT_EQ(g.nodes[6].hints.at("eps"), "0.001");
  const Node& bn = g.nodes[8];
  EXPECT_EQ(bn.op, "BatchNorm");
  EXPECT_EQ(bn.inputs, (std::vector<ValueRef>{{3, 0}, {4, 0}, {5, 0}, {6, 0}, {7, 0}}));
  EXPECT_DOUBLE_EQ(bn.attrs.get_float("eps"), 0.001);
  EXPECT_EQ(g.nodes[9].op, "Activation");
  EXPECT_EQ(g.nodes[9].inputs, (std::vector<ValueRef>{{8, 0}}));
  EXPECT_EQ(g.nodes[9].hints, (std::map<std::string, std::string>{{"__ctx_group__", "stage2"}}));
  EXPECT_EQ(g.outputs, (std::vector<ValueRef>{{9, 0}}));

  // No input shape: nothing to infer from, so nothing is typed.
  for (const Node& n : g.nodes) EXPECT_TRUE(n.outputs.empty()) << n.name;
}

TEST(MxnetImport, VariableRolesFollowTheSlotsTheyFeed) {
  const Graph g = load("legacy_000800.json");
  EXPECT_EQ(g.nodes[0].role, VarRole::input);  // data
  EXPECT_EQ(g.nodes[1].role, VarRole::param);  // fc_weight
  EXPECT_EQ(g.nodes[2].role, VarRole::param);  // fc_bias
  EXPECT_EQ(g.nodes[4].role, VarRole::param);  // bn_gamma
  EXPECT_EQ(g.nodes[6].role, VarRole::aux);    // bn_moving_mean
  EXPECT_EQ(g.nodes[7].role, VarRole::aux);    // bn_moving_var
}

// A weight also read as data (tied embeddings) is still a weight.
TEST(MxnetImport, VariableFeedingWeightAndDataSlotsIsParam) {
  const Graph g = import_mxnet_json(R"js({"nodes": [
      {"op": "null", "name": "x", "inputs": []},
      {"op": "null", "name": "w", "inputs": []},
      {"op": "FullyConnected", "name": "fc", "attrs": {"no_bias": "True", "num_hidden": "3"},
       "inputs": [[0, 0, 0], [1, 0, 0]]},
      {"op": "Activation", "name": "act", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]}],
    "heads": [[2, 0, 0], [3, 0, 0]]})js",
                                    "tied.json");
  EXPECT_EQ(g.nodes[0].role, VarRole::input);
  EXPECT_EQ(g.nodes[1].role, VarRole::param);
}

TEST(MxnetImport, LegacyGraphInfersFromInputShape) {
  const Graph g = load("legacy_000800.json", shapes({{"data", {2, 3}}}));
  EXPECT_EQ(g.type({9, 0}), f32({2, 4}));
  EXPECT_EQ(g.nodes[1].outputs, std::vector<TensorType>{f32({4, 3})});  // fc_weight
  EXPECT_EQ(g.nodes[2].outputs, std::vector<TensorType>{f32({4})});     // fc_bias
  EXPECT_EQ(g.nodes[7].outputs, std::vector<TensorType>{f32({4})});     // bn_moving_var
}

// MXNet 0.9-0.12: one "attr" map holds op parameters and symbol attributes alike.
TEST(MxnetImport, AttrMapSplitsIntoParametersAndHints) {
  const Graph g = load("attr_001100.json");
  const Node& fc = g.nodes[2];
  EXPECT_TRUE(fc.attrs.get_bool("no_bias"));
  EXPECT_EQ(fc.attrs.get_int("num_hidden"), 2);
  EXPECT_EQ(fc.hints, (std::map<std::string, std::string>{{"__layout__", "NC"}, {"__lr_mult__", "0.5"}}));
  // A variable has no op parameters: whatever it carries is a hint.
  EXPECT_EQ(g.nodes[1].hints, (std::map<std::string, std::string>{{"num_hidden", "2"}}));
  EXPECT_EQ(g.nodes[4].inputs, (std::vector<ValueRef>{{3, 0}, {3, 1}}));
  EXPECT_EQ(g.outputs, (std::vector<ValueRef>{{4, 0}, {3, 1}}));
}

TEST(MxnetImport, MultiOutputNodesInferPerOutput) {
  const Graph g = load("attr_001100.json", shapes({{"data", {3, 5}}}));
  EXPECT_EQ(g.nodes[1].outputs, std::vector<TensorType>{f32({2, 5})});
  EXPECT_EQ(g.nodes[3].outputs, (std::vector<TensorType>{f32({3, 1}), f32({3, 1})}));
  EXPECT_EQ(g.type({4, 0}), f32({3, 1}));
}

// Gluon exports: __shape__ / __dtype__ on variables; 0 is an unknown extent before 2.0.
TEST(MxnetImport, ShapeAndDtypeHintsTypeVariables) {
  const Graph g = load("gluon_hints.json");
  EXPECT_EQ(g.nodes[0].outputs, std::vector<TensorType>{f16({2, 3})});
  EXPECT_EQ(g.nodes[1].outputs, std::vector<TensorType>{f16({4, 3})});  // "(4, 0)" completed
  EXPECT_EQ(g.nodes[2].outputs, std::vector<TensorType>{f16({4})});
  EXPECT_EQ(g.type({3, 0}), f16({2, 4}));
  // The type replaces the spent hints; the others stay.
  EXPECT_EQ(g.nodes[0].hints, (std::map<std::string, std::string>{}));
  EXPECT_EQ(g.nodes[1].hints, (std::map<std::string, std::string>{{"__lr_mult__", "1.0"}}));
  EXPECT_EQ(g.nodes[2].hints, (std::map<std::string, std::string>{{"__init__", "zeros"}}));
}

TEST(MxnetImport, OptionShapesOverrideHints) {
  const Graph g = load("gluon_hints.json", shapes({{"data", {5, 3}}}));
  EXPECT_EQ(g.nodes[0].outputs, std::vector<TensorType>{f16({5, 3})});  // dtype still from the hint
  EXPECT_EQ(g.type({3, 0}), f16({5, 4}));
}

// Inference types the weight from the data (f32 by the options); its f16 hint disagrees.
TEST(MxnetImport, DtypeHintThatContradictsInferenceFails) {
  const std::string text = R"js({"nodes": [
      {"op": "null", "name": "data", "attrs": {"__dtype__": "2"}, "inputs": []},
      {"op": "null", "name": "w", "attrs": {"__dtype__": "2", "__shape__": "(4, 0)"}, "inputs": []},
      {"op": "FullyConnected", "name": "fc", "attrs": {"no_bias": "True", "num_hidden": "4"},
       "inputs": [[0, 0, 0], [1, 0, 0]]}],
    "heads": [[2, 0, 0]], "attrs": {"mxnet_version": ["int", 10500]}})js";
  MxnetImportOptions opts = shapes({{"data", {2, 3}}});
  EXPECT_EQ(import_mxnet_json(text, "f16.json", opts).nodes[1].outputs[0], f16({4, 3}));
  opts.input_dtypes["data"] = DType::f32;
  EXPECT_EQ(error_message([&] { import_mxnet_json(text, "f16.json", opts); }),
            "f16.json: node 1 'w' (null): __dtype__ '2' (float16) does not match the inferred type f32[4,3]");
}

TEST(MxnetImport, InferOffKeepsOnlyGivenTypes) {
  MxnetImportOptions opts = shapes({{"data", {2, 3}}});
  opts.infer = false;
  const Graph g = load("gluon_hints.json", opts);
  EXPECT_EQ(g.nodes[0].outputs, std::vector<TensorType>{f16({2, 3})});
  EXPECT_TRUE(g.nodes[1].outputs.empty());
  EXPECT_EQ(g.nodes[1].hints.at("__shape__"), "(4, 0)");  // kept until inference can check it
  EXPECT_TRUE(g.nodes[3].outputs.empty());
}

// As MXNet's loader, "heads" is required: the outputs are not guessed from the ops nobody
// reads (which would run a fragment of a damaged file as a model).
TEST(MxnetImport, HeadsAreRequired) {
  EXPECT_EQ(error_message([] { load("no_heads.json"); }),
            testdata("no_heads.json") +
                ": no \"heads\": a symbol file lists the graph outputs there, as [node, output, version] entries");
  const Graph g = load("three_activations.json");  // the same nodes with heads
  EXPECT_EQ(g.outputs, (std::vector<ValueRef>{{2, 0}, {3, 0}}));
}

std::string one_variable(const std::string& dtype_flag) {
  return fmt::format(R"js({{"nodes": [{{"op": "null", "name": "x", "attrs": {{"__dtype__": "{}", "__shape__": "(2,)"}},
                         "inputs": []}}], "heads": [[0, 0, 0]]}})js",
                     dtype_flag);
}

TEST(MxnetImport, DtypeHintsUseMxnetTypeFlags) {
  const std::pair<const char*, DType> flags[] = {{"0", DType::f32}, {"1", DType::f64}, {"2", DType::f16},
                                                 {"3", DType::u8},  {"4", DType::i32}, {"5", DType::i8},
                                                 {"6", DType::i64}, {"7", DType::boolean}, {"12", DType::bf16}};
  for (const auto& [flag, dtype] : flags) {
    const Graph g = import_mxnet_json(one_variable(flag), "flags.json");
    EXPECT_EQ(g.nodes[0].outputs, (std::vector<TensorType>{{dtype, {2}}})) << "flag " << flag;
  }
  EXPECT_EQ(error_message([] { import_mxnet_json(one_variable("8"), "flags.json"); }),
            "flags.json: node 0 'x' (null): __dtype__ '8' is an MXNet type ampfuse does not support "
            "(it reads the type flags 0-7 and 12)");
}

std::string dense_with_weight_hint(int version, const std::string& weight_shape) {
  return fmt::format(R"js({{"nodes": [
      {{"op": "null", "name": "data", "attrs": {{"__shape__": "(2, 3)"}}, "inputs": []}},
      {{"op": "null", "name": "w", "attrs": {{"__shape__": "{}"}}, "inputs": []}},
      {{"op": "FullyConnected", "name": "fc", "attrs": {{"no_bias": "True", "num_hidden": "4"}},
        "inputs": [[0, 0, 0], [1, 0, 0]]}}],
    "heads": [[2, 0, 0]], "attrs": {{"mxnet_version": ["int", {}]}}}})js",
                     weight_shape, version);
}

// MXNet 2.0 reads shapes as NumPy does: -1 is unknown and 0 a real, empty extent.
TEST(MxnetImport, ZeroExtentIsUnknownOnlyBeforeVersion2) {
  EXPECT_EQ(import_mxnet_json(dense_with_weight_hint(10500, "(4, 0)"), "v1.json").nodes[1].outputs[0], f32({4, 3}));
  EXPECT_EQ(import_mxnet_json(dense_with_weight_hint(20000, "(4, -1)"), "v2.json").nodes[1].outputs[0], f32({4, 3}));
  const std::string msg = error_message([] { import_mxnet_json(dense_with_weight_hint(20000, "(4, 0)"), "v2.json"); });
  EXPECT_TRUE(msg.starts_with("v2.json: node 2 'fc' (FullyConnected): ")) << msg;
  EXPECT_NE(msg.find("[4,0]"), std::string::npos) << msg;
}

TEST(MxnetImport, ShapeOptionForAMissingVariableIsAnError) {
  EXPECT_EQ(error_message([] { load("legacy_000800.json", shapes({{"dta", {2, 3}}})); }),
            testdata("legacy_000800.json") +
                ": input_shapes names 'dta', which is not a variable of the graph (its inputs: data)");
}

TEST(MxnetImport, InferenceFailureNamesInputsWithoutShape) {
  // Nothing relates b to a, so nothing can type it.
  const std::string two_inputs = R"js({"nodes": [
      {"op": "null", "name": "a", "inputs": []},
      {"op": "null", "name": "b", "inputs": []},
      {"op": "Activation", "name": "relu_a", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
      {"op": "Activation", "name": "relu_b", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]}],
    "heads": [[2, 0, 0], [3, 0, 0]]})js";
  const std::string msg = error_message([&] { import_mxnet_json(two_inputs, "two.json", shapes({{"a", {2}}})); });
  EXPECT_TRUE(msg.starts_with("two.json: ")) << msg;
  EXPECT_TRUE(msg.ends_with(" (inputs given no shape: b)")) << msg;
  // Given both, it infers.
  EXPECT_EQ(import_mxnet_json(two_inputs, "two.json", shapes({{"a", {2}}, {"b", {3}}})).type({3, 0}), f32({3}));
}

TEST(MxnetImport, FileThatCannotBeOpened) {
  EXPECT_EQ(error_message([] { load("no_such_file.json"); }), testdata("no_such_file.json") + ": no such file");
}

// What is not a regular file is named as such (and a FIFO is not opened: that would block).
TEST(MxnetImport, DirectoryDeviceOrFifoIsNotASymbolFile) {
  EXPECT_EQ(error_message([] { load_mxnet_json_file(AMPFUSE_TESTDATA_DIR); }),
            std::string(AMPFUSE_TESTDATA_DIR) + ": not a regular file (a directory)");
  EXPECT_EQ(error_message([] { load_mxnet_json_file("/dev/null"); }), "/dev/null: not a regular file (a device)");
  testing::ScopedTempDir dir;
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_message([&] { load_mxnet_json_file(fifo); }), fifo + ": not a regular file (a FIFO)");
}

// JSON text has no NUL byte; one (a truncated download, a binary file) is named by offset
// rather than reported as the end of the input.
TEST(MxnetImport, NulByteIsNamedByItsOffset) {
  const std::string text = std::string(R"({"nodes": [)") + '\0' + "]}";
  EXPECT_EQ(error_message([&] { import_mxnet_json(text, "nul.json"); }),
            "nul.json: a NUL byte at offset 11: a symbol file is JSON text");
  EXPECT_EQ(error_message([&] { import_mxnet_json(std::string(1, '\0'), "nul.json"); }),
            "nul.json: a NUL byte at offset 0: a symbol file is JSON text");
}

TEST(MxnetImport, EmptyTextIsInvalidJson) {
  const std::string msg = error_message([] { import_mxnet_json("", "empty.json"); });
  EXPECT_TRUE(msg.starts_with("empty.json: invalid JSON at byte 1: ")) << msg;
}

// ---- errors: each file under tests/data/mxnet/err_*.json and the message it gives ---------

struct ErrorCase {
  const char* file;
  // The message after "<path>: ". `exact`: all of it; otherwise its start, and `contains`
  // somewhere in it (for text that comes from the op registry, not from the importer).
  std::string message;
  bool exact = true;
  std::string contains = "";
};

void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.file; }

class MxnetImportError : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(MxnetImportError, NamesFileNodeAndProblem) {
  const ErrorCase& c = GetParam();
  const std::string msg = error_message([&] { load(c.file); });
  const std::string expected = testdata(c.file) + ": " + c.message;
  if (c.exact) {
    EXPECT_EQ(msg, expected);
  } else {
    EXPECT_TRUE(msg.starts_with(expected)) << msg << "\nexpected it to start with: " << expected;
    EXPECT_NE(msg.find(c.contains), std::string::npos) << msg << "\nexpected it to contain: " << c.contains;
  }
}

const std::string kEntryShape = "an entry is [node, output] or [node, output, version] of integers";
const std::string kNotTopological =
    "which does not come before it: the nodes form a cycle or are not in topological order";

INSTANTIATE_TEST_SUITE_P(
    MxnetImportErrors, MxnetImportError,
    ::testing::Values(
        // 101 bytes, cut inside a string: the parser runs out one byte past the end.
        ErrorCase{"err_truncated.json", "invalid JSON at byte 102: ", false, "missing closing quote"},
        ErrorCase{"err_top_level_array.json", "the top level is array, not an object: not an MXNet symbol file"},
        ErrorCase{"err_no_nodes.json", "no \"nodes\" list: not an MXNet symbol file"},
        ErrorCase{"err_node_not_object.json", "node 1 is 42, not an object"},
        ErrorCase{"err_op_missing.json", "node 1 has no \"op\""},
        ErrorCase{"err_entry_length.json", "node 1 'relu' (Activation): input 0 is [0]: " + kEntryShape},
        ErrorCase{"err_entry_not_integer.json", "node 1 'relu' (Activation): input 0 is [\"0\",0,0]: " + kEntryShape},
        ErrorCase{"err_dangling.json", "node 1 'relu' (Activation): input 0 refers to node 7, but the file has 2 nodes"},
        ErrorCase{"err_self_reference.json", "node 1 'relu' (Activation): input 0 refers to node 1, " + kNotTopological},
        ErrorCase{"err_later_node.json", "node 1 'relu' (Activation): input 0 refers to node 2, " + kNotTopological},
        ErrorCase{"err_input_count.json",
                  "node 2 'fc' (FullyConnected): needs 3 inputs (data, weight, bias) but the file gives 2"},
        ErrorCase{"err_output_index.json",
                  "node 2 'relu' (Activation): input 0 reads output 2 of node 1 'split' (SliceChannel), which has 2 outputs"},
        ErrorCase{"err_bad_attr_value.json", "node 2 'fc' (FullyConnected): ", false, "'ten'"},
        ErrorCase{"err_unknown_attr.json", "node 1 'relu' (Activation): ", false, "'alpha'"},
        ErrorCase{"err_attr_not_string.json",
                  "node 2 'fc' (FullyConnected): attribute 'num_hidden' is 10, but MXNet writes every attribute value "
                  "as a string"},
        ErrorCase{"err_attr_conflict.json",
                  "node 1 'act' (Activation): attribute 'act_type' is given twice, as 'tanh' and as 'relu' (in \"param\")"},
        ErrorCase{"err_unknown_op.json", "node 2 'mystery' (NoSuchOp): ", false, "unknown op 'NoSuchOp'"},
        // Found by the fuzzer (fuzz/corpus/mxnet_json/regression_op_name_line_break.json): names
        // from the file holding line breaks made the error several lines; they are escaped.
        ErrorCase{"err_line_break_in_names.json", "node 2 'my\\rstery' (No\\nSuchOp): ", false,
                  "unknown op 'No\\nSuchOp'"},
        // The unknown op at node 1 does not get a word in: INT8 is refused first, once.
        ErrorCase{"err_int8.json",
                  "INT8 quantized graphs are not supported: node 2 'data_quantize' uses _contrib_quantize_v2"},
        ErrorCase{"err_variable_with_inputs.json", "node 1 'weird' (null): a variable (op \"null\") cannot have inputs"},
        ErrorCase{"err_duplicate_variable_hints.json",
                  "node 0 'data' (null) and node 1 'data' (null) are one variable (MXNet binds variables by name), "
                  "but their '__shape__' hints differ: '(2,)' and '(3,)'"},
        ErrorCase{"err_heads_range.json", "heads entry 1 refers to node 5, but the file has 2 nodes"},
        ErrorCase{"err_arg_nodes.json", "arg_nodes entry 1 names node 1 'relu' (Activation), which is not a variable"},
        ErrorCase{"err_inconsistent_shapes.json", "node 3 'sum' (elemwise_add): ", false, "[2,4]"},
        ErrorCase{"err_shape_hint_mismatch.json",
                  "node 1 'fc_weight' (null): __shape__ '(5, 0)' does not match the inferred type f32[4,3]"},
        ErrorCase{"err_bad_dtype_hint.json",
                  "node 0 'data' (null): __dtype__ '9' is an MXNet type ampfuse does not support (it reads the type "
                  "flags 0-7 and 12)"},
        ErrorCase{"err_bad_shape_hint.json", "node 0 'data' (null): ", false, "'(2, x)'"}));

// ---- export -----------------------------------------------------------------------------

TEST(MxnetExport, WritesTheMxnet19Format) {
  const Graph g = load("legacy_000800.json", shapes({{"data", {2, 3}}}));
  const json j = json::parse(export_mxnet_json(g));
  EXPECT_EQ(j.at("attrs"), json::parse(R"js({"mxnet_version": ["int", 10900]})js"));
  ASSERT_EQ(j.at("nodes").size(), 10u);
  EXPECT_EQ(j["nodes"][0], json::parse(R"js({"op": "null", "name": "data", "inputs": [],
      "attrs": {"__ctx_group__": "stage1", "__dtype__": "0", "__lr_mult__": "0.2", "__shape__": "(2, 3)"}})js"));
  // As MXNet 1.9.1 re-saves the file: no pre-1.0 key left on an op, which MXNet would refuse.
  EXPECT_EQ(j["nodes"][1]["attrs"], json::parse(R"js({"__dtype__": "0", "__lr_mult__": "1.2", "__shape__": "(4, 3)",
      "__wd_mult__": "0.3"})js"));
  EXPECT_EQ(j["nodes"][3]["attrs"], json::parse(R"js({"__ctx_group__": "stage1", "flatten": "True", "no_bias": "False",
      "num_hidden": "4"})js"));
  EXPECT_EQ(j["nodes"][8]["inputs"], json::parse("[[3, 0, 0], [4, 0, 0], [5, 0, 0], [6, 0, 0], [7, 0, 0]]"));
  EXPECT_EQ(j["nodes"][8]["attrs"]["eps"], "0.001");
  EXPECT_EQ(j["nodes"][8]["attrs"]["fix_gamma"], "True");
  EXPECT_EQ(j.at("arg_nodes"), json::parse("[0, 1, 2, 4, 5, 6, 7]"));
  EXPECT_EQ(j.at("node_row_ptr"), json::parse("[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"));
  EXPECT_EQ(j.at("heads"), json::parse("[[9, 0, 0]]"));
  for (const auto& node : j["nodes"]) {
    EXPECT_TRUE(node.at("op").is_string() && node.at("name").is_string());
    const json attrs = node.value("attrs", json::object());
    for (const auto& [key, value] : attrs.items()) EXPECT_TRUE(value.is_string()) << node["name"] << " " << key;
  }
}

// A graph built elsewhere may hold the pre-1.0 spellings in its hints: export writes them
// as MXNet would, through the casts AMP put between a weight and its op.
TEST(MxnetExport, PreOneZeroSymbolAttributesAreWrittenAsMxnetSavesThem) {
  Graph g = ir::parse_graph(R"(graph {
    %data = var input : f32[2,3]
    %fc_weight = var param hints={"lr_mult":"0.5"} : f32[4,3]
    %fc_bias = var param hints={"bias_lr_mult":"3"} : f32[4]
    %w16 = amp_cast(%fc_weight) {dtype=f16}
    %d16 = amp_cast(%data) {dtype=f16}
    %b16 = amp_cast(%fc_bias) {dtype=f16}
    %fc = FullyConnected(%d16, %w16, %b16) {num_hidden=4} hints={"ctx_group":"dev1","weight_lr_mult":"1.2","data_wd_mult":"0","nothing_lr_mult":"5"}
    return %fc
  })");
  const json j = json::parse(export_mxnet_json(g));
  // The weight, behind its cast; the op's weight_lr_mult replaces the weight's own lr_mult,
  // as MXNet 1.9.1's loader does.
  EXPECT_EQ(j["nodes"][1]["attrs"]["__lr_mult__"], "1.2");
  EXPECT_FALSE(j["nodes"][1]["attrs"].contains("lr_mult"));
  EXPECT_EQ(j["nodes"][0]["attrs"]["__wd_mult__"], "0");    // data_wd_mult: input "data"
  // On a variable MXNet keeps the prefixed key as it is.
  EXPECT_EQ(j["nodes"][2]["attrs"]["bias_lr_mult"], "3");
  EXPECT_FALSE(j["nodes"][2]["attrs"].contains("__lr_mult__"));
  // The op keeps its parameters and the renamed key only; "nothing" names no input: dropped.
  EXPECT_EQ(j["nodes"][6]["attrs"], json::parse(R"js({"__ctx_group__": "dev1", "flatten": "True", "no_bias": "False",
      "num_hidden": "4"})js"));
  // Applying it again changes nothing: the re-imported graph exports the same text.
  EXPECT_EQ(export_mxnet_json(reimport(g)), export_mxnet_json(g));
}

TEST(MxnetExport, NodeRowPtrCountsEveryOutput) {
  const json j = json::parse(export_mxnet_json(load("attr_001100.json")));
  EXPECT_EQ(j.at("node_row_ptr"), json::parse("[0, 1, 2, 3, 5, 6]"));  // split has 2 outputs
  EXPECT_EQ(j.at("heads"), json::parse("[[4, 0, 0], [3, 1, 0]]"));
}

TEST(MxnetExport, UntypedVariablesKeepTheirHintsOnly) {
  MxnetImportOptions opts;
  opts.infer = false;
  const json j = json::parse(export_mxnet_json(load("gluon_hints.json", opts)));
  EXPECT_EQ(j["nodes"][0]["attrs"], json::parse(R"js({"__dtype__": "2", "__shape__": "(2, 3)"})js"));
  EXPECT_EQ(j["nodes"][1]["attrs"], json::parse(R"js({"__dtype__": "2", "__lr_mult__": "1.0", "__shape__": "(4, 0)"})js"));
  const json legacy = json::parse(export_mxnet_json(load("legacy_000800.json")));
  EXPECT_FALSE(legacy["nodes"][0]["attrs"].contains("__shape__"));
}

TEST(MxnetExport, ReimportGivesAnEqualGraph) {
  const std::pair<const char*, MxnetImportOptions> cases[] = {
      {"legacy_000800.json", {}},
      {"legacy_000800.json", shapes({{"data", {2, 3}}})},
      {"attr_001100.json", shapes({{"data", {3, 5}}})},
      {"gluon_hints.json", {}},
      {"three_activations.json", shapes({{"x", {4}}})},
  };
  for (const auto& [file, opts] : cases) {
    const Graph g = load(file, opts);
    EXPECT_EQ(reimport(g), g) << file << " as exported:\n" << export_mxnet_json(g);
  }
}

// Every attribute kind survives the trip through MXNet's strings.
TEST(MxnetExport, AttributeSpellingsRoundTrip) {
  const std::string text = R"js({"nodes": [
      {"op": "null", "name": "data", "attrs": {"__shape__": "(1, 2, 6, 6)"}, "inputs": []},
      {"op": "null", "name": "w", "inputs": []},
      {"op": "Convolution", "name": "conv",
       "attrs": {"kernel": "(3, 3)", "no_bias": "True", "num_filter": "4", "pad": "(1, 1)", "stride": "(2, 2)"},
       "inputs": [[0, 0, 0], [1, 0, 0]]},
      {"op": "Pooling", "name": "pool", "attrs": {"global_pool": "True", "kernel": "(1, 1)", "pool_type": "avg"},
       "inputs": [[2, 0, 0]]},
      {"op": "Cast", "name": "cast", "attrs": {"dtype": "float16"}, "inputs": [[3, 0, 0]]},
      {"op": "clip", "name": "clip", "attrs": {"a_max": "6.5", "a_min": "-1e-05"}, "inputs": [[4, 0, 0]]}],
    "heads": [[5, 0, 0]]})js";
  const Graph g = import_mxnet_json(text, "kinds.json");
  EXPECT_EQ(g.type({5, 0}), f16({1, 4, 1, 1}));
  const json j = json::parse(export_mxnet_json(g));
  EXPECT_EQ(j["nodes"][2]["attrs"]["kernel"], "(3, 3)");
  EXPECT_EQ(j["nodes"][2]["attrs"]["no_bias"], "True");
  EXPECT_EQ(j["nodes"][3]["attrs"]["pool_type"], "avg");
  EXPECT_EQ(j["nodes"][4]["attrs"]["dtype"], "float16");
  EXPECT_EQ(j["nodes"][5]["attrs"]["a_min"], "-1e-05");
  EXPECT_EQ(reimport(g), g);
}

TEST(MxnetExport, HintThatShadowsAnAttributeIsAnError) {
  Graph g = load("three_activations.json");
  g.nodes[1].hints["act_type"] = "tanh";
  EXPECT_EQ(error_message([&] { export_mxnet_json(g); }),
            "node 1 'relu' (Activation): attribute 'act_type' is also a hint, and a file can hold only one of them");
}

// ---- the real models of models/ ----------------------------------------------------

std::string model_path(const std::string& file) { return std::string(AMPFUSE_MODELS_DIR) + "/" + file; }

bool models_present() { return std::filesystem::is_directory(AMPFUSE_MODELS_DIR); }

struct ModelCase {
  const char* file;
  std::map<std::string, Shape> inputs;  // from SOURCES.md
  Shape output;                         // worked out by hand from the graph's last layers
};

void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.file; }

class MxnetImportModel : public ::testing::TestWithParam<ModelCase> {};

TEST_P(MxnetImportModel, InfersTheOutputShape) {
  if (!models_present()) GTEST_SKIP() << "no model folder at " << AMPFUSE_MODELS_DIR;
  const ModelCase& c = GetParam();
  const Graph g = load_mxnet_json_file(model_path(c.file), shapes(c.inputs));
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(type_str(g.type(g.outputs[0])), type_str(f32(c.output)));
  for (const Node& n : g.nodes) EXPECT_FALSE(n.outputs.empty()) << n.name;
}

TEST_P(MxnetImportModel, ExportReimportsEqual) {
  if (!models_present()) GTEST_SKIP() << "no model folder at " << AMPFUSE_MODELS_DIR;
  const ModelCase& c = GetParam();
  const Graph typed = load_mxnet_json_file(model_path(c.file), shapes(c.inputs));
  EXPECT_EQ(reimport(typed), typed);
  const Graph untyped = load_mxnet_json_file(model_path(c.file));
  EXPECT_EQ(reimport(untyped), untyped);
}

INSTANTIATE_TEST_SUITE_P(
    MxnetImportModels, MxnetImportModel,
    ::testing::Values(
        // This ResNet-152 is the ImageNet-11k one: fc1 has num_hidden=11221.
        ModelCase{"resnet152-mxnet-symbolic-symbol.json", {{"data", {1, 3, 224, 224}}}, {1, 11221}},
        // The other ImageNet classifiers end in FullyConnected or a 1x1 convolution with 1000 outputs.
        ModelCase{"densenet169-imagenet-legacy-symbol.json", {{"data", {1, 3, 224, 224}}}, {1, 1000}},
        ModelCase{"squeezenet_v1.1-mms-legacy-symbol.json", {{"data", {1, 3, 224, 224}}}, {1, 1000}},
        // 224 / 2^4 = 14 after pool4; pool5 (3x3, stride 1, pad 1) and fc6 (3x3, dilation 6,
        // pad 6) keep 14x14; global pooling, fc8 as a 1x1 convolution, flatten.
        ModelCase{"vgg_small-mkldnn-test-symbol.json", {{"data", {1, 3, 224, 224}}}, {1, 1000}},
        ModelCase{"cifar_resnet20_v2-gluoncv-symbol.json", {{"data", {1, 3, 32, 32}}}, {1, 10}},
        // fc3 has 10 hidden units; BatchNorm and SoftmaxOutput keep the shape.
        ModelCase{"mlp_legacy_000800-test-symbol.json", {{"data", {2, 5}}}, {2, 10}},
        // (35, 1) tokens -> embedding (35, 1, 200) -> LSTM -> reshape (35, 200) -> pred (35, 10000).
        ModelCase{"lstm_ptb_fusedrnn-mms-symbol.json", {{"data", {35, 1}}, {"softmax_label", {35}}}, {35, 10000}},
        // Decoder output (1, 100, 512) -> reshape (-3, 0) = (100, 512) -> logits over 19581
        // target words. target_label only feeds the loss, through reshape (-1,), so it has to
        // be given too.
        ModelCase{"sockeye_transformer-parabank2-symbol.json",
                  {{"source", {1, 100, 3}}, {"target", {1, 100}}, {"target_label", {1, 100}}},
                  {100, 19581}}));

struct Int8Case {
  const char* file;
  std::string first_unsupported;  // "node N 'name' uses op"
};

void PrintTo(const Int8Case& c, std::ostream* os) { *os << c.file; }

class MxnetImportInt8Model : public ::testing::TestWithParam<Int8Case> {};

TEST_P(MxnetImportInt8Model, IsRefusedWithOneMessage) {
  if (!models_present()) GTEST_SKIP() << "no model folder at " << AMPFUSE_MODELS_DIR;
  const Int8Case& c = GetParam();
  EXPECT_EQ(error_message([&] { load_mxnet_json_file(model_path(c.file)); }),
            model_path(c.file) + ": INT8 quantized graphs are not supported: " + c.first_unsupported);
}

INSTANTIATE_TEST_SUITE_P(
    MxnetImportInt8Models, MxnetImportInt8Model,
    ::testing::Values(
        Int8Case{"mobilenet1.0_int8-gluoncv-symbol.json", "node 1 'data_quantize' uses _contrib_quantize_v2"},
        Int8Case{"fcn_resnet101_voc_int8-gluoncv-symbol.json", "node 1 'data_quantize' uses _contrib_quantize_v2"},
        Int8Case{"ssd_512_resnet50_v1_voc_int8-gluoncv-symbol.json",
                 "node 1 'data_quantize' uses _contrib_quantize_v2"},
        Int8Case{"ssd_300_vgg16_atrous_voc_int8-gluoncv-symbol.json",
                 "node 3 'ssd0_vggatrousextractor0_broadcast_mul0_0_quantize' uses _contrib_quantize_v2"}));

}  // namespace
}  // namespace ampfuse::ir
