// The textual IR: the printed form, exact round trips, and parse errors with locations.
#include "ir/text_format.h"

#include "ir/builder.h"
#include "ir/op_registry.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace ampfuse::ir {
namespace {

TensorType f32(Shape s) { return {DType::f32, std::move(s)}; }

void expect_round_trip(const Graph& g) {
  const std::string text = print_graph(g);
  const Graph back = parse_graph(text);
  EXPECT_TRUE(back == g) << "printed:\n" << text << "reprinted:\n" << print_graph(back);
}

TEST(TextFormatTest, PrintsTheDocumentedSyntax) {
  GraphBuilder b;
  ValueRef x = b.input("x", f32({2, 4}));
  ValueRef act = b.op("Activation", {x}, {{"act_type", "relu"}}, "act");
  auto split = b.op_multi("SliceChannel", {act}, {{"num_outputs", "2"}}, "split");
  ValueRef y = b.op("elemwise_add", {split[0], split[1]}, {}, "y");
  b.output(y);
  b.output(split[1]);
  EXPECT_EQ(print_graph(b.finish()),
            "graph {\n"
            "  %x = var input : f32[2,4]\n"
            "  %act = Activation(%x) {act_type=\"relu\"} : f32[2,4]\n"
            "  %split = SliceChannel(%act) {axis=1, num_outputs=2, squeeze_axis=false} : (f32[2,2], f32[2,2])\n"
            "  %y = elemwise_add(%split, %split:1) : f32[2,2]\n"
            "  return %y, %split:1\n"
            "}\n");
}

TEST(TextFormatTest, ReadsHandWrittenText) {
  const Graph g = parse_graph(R"(
    # a comment, and blank lines, are ignored
    graph {
      %x = var input : f32[2, 4]   // spaces inside types are fine
      %w = var param
      %s = _plus_scalar(%x) {scalar = 2}
      %split = SliceChannel(%s) {num_outputs=2}
      return %split:0, %split:1
    })");
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].outputs, std::vector<TensorType>{f32({2, 4})});
  EXPECT_EQ(g.nodes[1].role, VarRole::param);
  EXPECT_TRUE(g.nodes[1].outputs.empty());
  // An int literal where the schema declares a float is widened.
  EXPECT_EQ(g.nodes[2].attrs.get("scalar"), AttrValue(2.0));
  // Defaults are filled in.
  EXPECT_EQ(g.nodes[3].attrs.get("axis"), AttrValue(int64_t{1}));
  EXPECT_EQ(g.nodes[3].inputs, (std::vector<ValueRef>{ValueRef{2, 0}}));
  EXPECT_EQ(g.outputs, (std::vector<ValueRef>{{3, 0}, {3, 1}}));
}

TEST(TextFormatTest, RoundTripsAnInferredGraph) {
  GraphBuilder b;
  ValueRef data = b.input("data", f32({2, 3, 8, 8}));
  ValueRef conv = b.op("Convolution", {data, b.param("conv_w")},
                       {{"kernel", "(3, 3)"}, {"num_filter", "4"}, {"no_bias", "True"}, {"pad", "(1, 1)"}}, "conv");
  ValueRef bias_conv = b.op("Convolution", {conv, b.param("c2_w"), b.param("c2_b")},
                            {{"kernel", "(1, 1)"}, {"num_filter", "4"}}, "c2");
  ValueRef act = b.op("Activation", {bias_conv}, {{"act_type", "softrelu"}});
  ValueRef sliced = b.op("slice", {act}, {{"begin", "(None, 1, 0, -8)"}, {"end", "(None, None, 8, 8)"}});
  ValueRef half = b.op("Cast", {sliced}, {{"dtype", "float16"}});
  ValueRef clipped = b.op("clip", {half}, {{"a_min", "-0.30000000000000004"}, {"a_max", "inf"}});
  ValueRef scaled = b.op("_mul_scalar", {clipped}, {{"scalar", "1e-300"}});
  auto parts = b.op_multi("SliceChannel", {scaled}, {{"num_outputs", "3"}, {"axis", "1"}});
  ValueRef sum = b.op("elemwise_add", {parts[0], parts[2]});
  ValueRef fc = b.op("FullyConnected", {b.op("Cast", {sum}, {{"dtype", "float32"}}), b.param("fc_w"), b.param("fc_b")},
                     {{"num_hidden", "5"}});
  b.output(fc);
  b.output(parts[1]);
  const Graph g = b.finish();
  expect_round_trip(g);
  EXPECT_EQ(print_graph(parse_graph(print_graph(g))), print_graph(g));
}

TEST(TextFormatTest, RoundTripsAGraphWithoutTypes) {
  GraphBuilder b;
  ValueRef x = b.input("x", f32({4}));
  ValueRef w = b.param("w");  // no type: inference would derive it
  ValueRef bn_mean = b.aux("mean");
  b.output(b.op("elemwise_mul", {b.op("elemwise_add", {x, w}), bn_mean}));
  const Graph g = b.finish(/*infer=*/false);
  ASSERT_TRUE(g.nodes[1].outputs.empty());
  expect_round_trip(g);
  EXPECT_NE(print_graph(g).find("%mean = var aux\n"), std::string::npos);
}

Node var_node(std::string name, std::optional<TensorType> type = std::nullopt) {
  Node n;
  n.op = kVarOp;
  n.name = std::move(name);
  if (type) n.outputs.push_back(*type);
  return n;
}

Node op_node(std::string op, std::string name, std::vector<ValueRef> inputs, Attrs attrs = {}) {
  Node n;
  n.op = std::move(op);
  n.name = std::move(name);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  return n;
}

TEST(TextFormatTest, NumbersRepeatedNamesAndQuotesOddOnes) {
  Graph g;
  const int32_t x = g.add(var_node("a b", f32({3})));
  const int32_t r1 = g.add(op_node("relu", "relu", {{x, 0}}));
  const int32_t r2 = g.add(op_node("relu", "relu", {{r1, 0}}));
  const int32_t r3 = g.add(op_node("relu", "relu", {{r2, 0}}));
  const int32_t odd = g.add(op_node("relu", "we\"ird\\~2", {{r3, 0}}));
  const int32_t empty = g.add(op_node("relu", "", {{odd, 0}}));
  const int32_t odd2 = g.add(op_node("elemwise_add", "we\"ird\\~2", {{empty, 0}, {r1, 0}}));
  g.outputs = {{odd2, 0}, {r2, 0}};
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("%relu~2 = relu(%relu)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%relu~3 = relu(%relu~2)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%\"we\\\"ird\\\\~2\"~2 = elemwise_add(%\"\", %relu)"), std::string::npos) << text;
  EXPECT_NE(text.find("return %\"we\\\"ird\\\\~2\"~2, %relu~2\n"), std::string::npos) << text;
  expect_round_trip(g);
}

TEST(TextFormatTest, RoundTripsHints) {
  GraphBuilder b;
  ValueRef x = b.input("x", f32({1, 2, 3, 3}));
  Graph g = [&] {
    b.output(b.op("relu", {x}, {}, "r"));
    return b.finish();
  }();
  g.nodes[0].hints = {{"__shape__", "(1, 2, 3, 3)"}, {"lr_mult", "0.1"}};
  g.nodes[1].hints = {{"__layout__", "NCHW"}, {"odd \"key\"", "line\nbreak\ttab\x01"}};
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("%x = var input hints={\"__shape__\":\"(1, 2, 3, 3)\", \"lr_mult\":\"0.1\"} : f32[1,2,3,3]"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(R"(hints={"__layout__":"NCHW", "odd \"key\"":"line\nbreak\ttab\x01"} : f32[1,2,3,3])"),
            std::string::npos)
      << text;
  expect_round_trip(g);
}

// A registry of its own, for attribute kinds and open attributes that no built-in op
// needs to have.
const OpRegistry& zoo_registry() {
  static const OpRegistry* r = [] {
    auto* reg = new OpRegistry;
    OpDef zoo;
    zoo.name = "attr_zoo";
    zoo.inputs = {{"data"}};
    zoo.attrs = {
        {"b", AttrKind::Bool, false, {}},
        {"i", AttrKind::Int, int64_t{0}, {}},
        {"f", AttrKind::Float, 0.0, {}},
        {"s", AttrKind::String, std::string(""), {}},
        {"il", AttrKind::IntList, std::vector<int64_t>{}, {}},
        {"fl", AttrKind::FloatList, std::vector<double>{}, {}},
        {"dt", AttrKind::DType, DType::f32, {}},
        {"opt", AttrKind::Int, AttrValue(std::monostate{}), {}},
    };
    reg->add(zoo);
    OpDef custom;
    custom.name = "Custom";
    custom.inputs = {{"data"}};
    custom.open_attrs = true;
    custom.attrs = {{"op_type", AttrKind::String, std::nullopt, {}}};
    reg->add(custom);
    return reg;
  }();
  return *r;
}

Graph zoo_graph(Attrs a) {
  Graph g;
  const int32_t x = g.add(var_node("x"));
  g.outputs = {{g.add(op_node("attr_zoo", "zoo", {{x, 0}}, complete_attrs(*zoo_registry().find("attr_zoo"), a))), 0}};
  return g;
}

TEST(TextFormatTest, RoundTripsEveryAttributeKind) {
  Attrs a;
  a.set("b", true);
  a.set("i", std::numeric_limits<int64_t>::min());
  a.set("f", 0.1 + 0.2);  // needs all 17 digits
  a.set("s", std::string("say \"hi\" \\ to\na\ttab # not a comment"));
  a.set("il", std::vector<int64_t>{kNoneIndex, 2, -3, std::numeric_limits<int64_t>::max()});
  a.set("fl", std::vector<double>{0.5, -2.0, 1e-300, 4.9406564584124654e-324, -INFINITY, 1.7976931348623157e308});
  a.set("dt", DType::bf16);
  a.set("opt", std::monostate{});
  const Graph g = zoo_graph(a);
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("f=0.30000000000000004"), std::string::npos) << text;
  EXPECT_NE(text.find("il=[none,2,-3,9223372036854775807]"), std::string::npos) << text;
  EXPECT_NE(text.find("opt=none"), std::string::npos) << text;
  EXPECT_NE(text.find("dt=bf16"), std::string::npos) << text;
  const Graph back = parse_graph(text, "<zoo>", zoo_registry());
  EXPECT_TRUE(back == g) << text << print_graph(back);

  Attrs other;  // the other values of each kind: false, empty lists, the empty string
  other.set("f", -INFINITY);
  other.set("i", int64_t{-7});
  other.set("opt", int64_t{3});
  const Graph g2 = zoo_graph(other);
  EXPECT_TRUE(parse_graph(print_graph(g2), "<zoo>", zoo_registry()) == g2) << print_graph(g2);
}

TEST(TextFormatTest, NanSurvivesTheRoundTrip) {
  // NaN != NaN, so Graph::operator== cannot see this one: compare the reprinted text.
  Attrs a;
  a.set("f", NAN);
  a.set("fl", std::vector<double>{1.0, NAN});
  const std::string text = print_graph(zoo_graph(a));
  const Graph back = parse_graph(text, "<zoo>", zoo_registry());
  EXPECT_TRUE(std::isnan(back.nodes[1].attrs.get_float("f")));
  EXPECT_TRUE(std::isnan(back.nodes[1].attrs.get_floats("fl")[1]));
  EXPECT_EQ(print_graph(back), text);
}

TEST(TextFormatTest, IntListsWidenToDeclaredFloatLists) {
  const Graph g = parse_graph("graph { %x = var input  %z = attr_zoo(%x) {fl=[1, 2], il=[]}  return %z }", "<zoo>",
                              zoo_registry());
  EXPECT_EQ(g.nodes[1].attrs.get("fl"), AttrValue(std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(g.nodes[1].attrs.get("il"), AttrValue(std::vector<int64_t>{}));
}

TEST(TextFormatTest, RoundTripsOpenAttributes) {
  Graph g;
  const int32_t x = g.add(var_node("x"));
  Attrs a;
  a.set("op_type", std::string("my_op"));
  a.set("weird key", std::string("(1, 2)"));
  g.outputs = {{g.add(op_node("Custom", "c", {{x, 0}}, a)), 0}};
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("{op_type=\"my_op\", \"weird key\"=\"(1, 2)\"}"), std::string::npos) << text;
  EXPECT_TRUE(parse_graph(text, "<zoo>", zoo_registry()) == g);
}

TEST(TextFormatTest, RoundTripsTheEmptyGraph) {
  EXPECT_EQ(print_graph(Graph{}), "graph {\n  return\n}\n");
  expect_round_trip(Graph{});
}

// --- errors ---

std::string parse_error(std::string_view text) {
  return testing::error_message([&] { parse_graph(text); });
}

TEST(TextFormatTest, MalformedTextIsReportedWithItsLocation) {
  EXPECT_EQ(parse_error("graph {\n  %x var input\n  return %x\n}"), "<text>:2:6: expected '=' but found 'var'");
  EXPECT_EQ(parse_error("graph {\n  %x = var input\n"),
            "<text>:3:1: expected a definition '%name = ...' or 'return' but found the end of the text");
  EXPECT_EQ(parse_error("graph { return } extra"), "<text>:1:18: unexpected 'extra' after the end of the graph");
  EXPECT_EQ(parse_error("graph { %x = var input : f32[2] @ return %x }"), "<text>:1:33: unexpected character '@'");
  EXPECT_EQ(parse_error("graph { %x = var input hints={\"a\":\"b\n\"} return %x }"),
            "<text>:1:35: unterminated string");
  EXPECT_EQ(parse_error("graph { %x = var input hints={\"a\":\"\\q\"} return %x }"),
            "<text>:1:36: unknown escape '\\q' in string");
  EXPECT_EQ(parse_error("graph { %x = var weight return %x }"),
            "<text>:1:18: unknown variable role 'weight' (expected input, param or aux)");
  EXPECT_EQ(parse_error("graph { %x = var input : f33[2] return %x }"), "<text>:1:26: unknown element type 'f33'");
  EXPECT_EQ(parse_error("graph { %x = var input : f32[2,-1] return %x }"), "<text>:1:32: negative extent -1");
  EXPECT_EQ(parse_error("graph { %x = var input : f32[99999999999999999999] return %x }"),
            "<text>:1:30: integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(parse_error("graph { %x~1 = var input return %x }"),
            "<text>:1:11: expected a number of 2 or more after '~' in '%x~'");
}

TEST(TextFormatTest, ErrorsNameTheSource) {
  const std::string msg = testing::error_message([] { parse_graph("graph {", "model.ir"); });
  EXPECT_EQ(msg, "model.ir:1:8: expected a definition '%name = ...' or 'return' but found the end of the text");
}

TEST(TextFormatTest, UnknownOpSuggestsACloseName) {
  EXPECT_EQ(parse_error("graph {\n %x = var input\n %c = Convolutoin(%x) {kernel=[1,1], num_filter=1}\n return %c\n}"),
            "<text>:3:7: unknown op 'Convolutoin' (did you mean 'Convolution'?)");
}

TEST(TextFormatTest, ReferencesMustBeDefinedEarlier) {
  EXPECT_EQ(parse_error("graph { %x = var input  %y = relu(%z)  return %y }"), "<text>:1:35: undefined value '%z'");
  EXPECT_EQ(parse_error("graph { %y = relu(%y)  return %y }"), "<text>:1:19: undefined value '%y'");
  EXPECT_EQ(parse_error("graph { %x = var input  return %x~2 }"), "<text>:1:32: undefined value '%x~2'");
  EXPECT_EQ(parse_error("graph { %x = var input  %s = SliceChannel(%x) {num_outputs=2}  return %s:2 }"),
            "<text>:1:74: '%s' has 2 outputs, so there is no output 2");
  EXPECT_EQ(parse_error("graph { %x = var input  return %x:1 }"),
            "<text>:1:35: '%x' has 1 output, so there is no output 1");
}

TEST(TextFormatTest, RepeatedNamesMustBeNumbered) {
  EXPECT_EQ(parse_error("graph { %x = var input  %x = relu(%x)  return %x }"),
            "<text>:1:25: '%x' is defined already; node 2 called \"x\" is written '%x~2'");
  EXPECT_EQ(parse_error("graph { %x = var input  %x~3 = relu(%x)  return %x }"),
            "<text>:1:25: '%x~3' is defined already; node 2 called \"x\" is written '%x~2'");
  EXPECT_EQ(parse_error("graph { %x~2 = var input  return %x }"),
            "<text>:1:9: '%x~2' is the first node called \"x\": write it without '~2'");
}

TEST(TextFormatTest, InputAndTypeCountsFollowTheOp) {
  EXPECT_EQ(parse_error("graph { %x = var input  %y = elemwise_add(%x)  return %y }"),
            "<text>:1:30: node 'y' (elemwise_add): 1 input given, 2 expected");
  // Convolution's count depends on no_bias.
  EXPECT_EQ(parse_error("graph { %x = var input  %w = var param\n"
                        "  %c = Convolution(%x, %w) {kernel=[1,1], num_filter=2}  return %c }"),
            "<text>:2:8: node 'c' (Convolution): 2 inputs given, 3 expected");
  EXPECT_EQ(parse_error("graph { %x = var input  %s = SliceChannel(%x) {num_outputs=2} : f32[1]  return %s }"),
            "<text>:1:65: node 's' (SliceChannel): 1 type given for 2 outputs");
}

TEST(TextFormatTest, AttributesAreCheckedAgainstTheSchema) {
  const std::string head = "graph { %x = var input  %a = Activation(%x) ";
  EXPECT_EQ(parse_error(head + "{act_type=\"relux\"}  return %a }"),
            "<text>:1:30: node 'a' (Activation): attribute 'act_type' of Activation: 'relux' is not one of relu, "
            "sigmoid, tanh, softrelu, softsign, log_sigmoid, mish");
  // Found by the fuzzer (fuzz/corpus/text_ir/regression_choice_line_break.ir): a value with a
  // line break was printed raw, so the error took two lines.
  EXPECT_EQ(parse_error(head + "{act_type=\"re\\nlu\"}  return %a }"),
            "<text>:1:30: node 'a' (Activation): attribute 'act_type' of Activation: 're\\nlu' is not one of relu, "
            "sigmoid, tanh, softrelu, softsign, log_sigmoid, mish");
  EXPECT_EQ(parse_error(head + "{act_type=3}  return %a }"),
            "<text>:1:30: node 'a' (Activation): attribute 'act_type' of Activation must be string, not 3");
  EXPECT_EQ(parse_error(head + "{act_type=\"relu\", slope=1}  return %a }"),
            "<text>:1:30: node 'a' (Activation): Activation has no attribute 'slope'");
  EXPECT_EQ(parse_error(head + " return %a }"),
            "<text>:1:30: node 'a' (Activation): Activation needs attribute 'act_type'");
  EXPECT_EQ(parse_error(head + "{act_type=\"relu\", act_type=\"tanh\"}  return %a }"),
            "<text>:1:63: node 'a' (Activation): attribute 'act_type' is given twice");
  EXPECT_EQ(parse_error(head + "{act_type=relu}  return %a }"),
            "<text>:1:55: 'relu' is not a value (strings are quoted: \"relu\")");
  EXPECT_EQ(parse_error(head + "{act_type=1.2.3}  return %a }"), "<text>:1:55: malformed number '1.2.3'");
  EXPECT_EQ(parse_error("graph { %x = var input  %s = slice(%x) {begin=[0.5, none], end=[1]}  return %s }"),
            "<text>:1:53: 'none' can only be an entry of an int list");
}

// Every prefix of a valid text, and every one-byte corruption of it, must either parse or
// throw ampfuse::Error: never crash or throw anything else.
TEST(TextFormatTest, DamagedTextNeverCrashes) {
  GraphBuilder b;
  ValueRef x = b.input("x", f32({2, 4}));
  auto split = b.op_multi("SliceChannel", {b.op("_plus_scalar", {x}, {{"scalar", "-1.5e-3"}})}, {{"num_outputs", "2"}});
  b.output(b.op("slice", {split[1]}, {{"begin", "(None, 0)"}, {"end", "(2, None)"}}, "s\"q"));
  const std::string text = print_graph(b.finish());
  auto survives = [](const std::string& t) {
    try {
      parse_graph(t);
    } catch (const Error&) {
    }
  };
  for (size_t n = 0; n <= text.size(); ++n) EXPECT_NO_THROW(survives(text.substr(0, n))) << text.substr(0, n);
  std::mt19937 rng(7);
  const std::string alphabet = "%~:=,{}()[]\"\\#/-+.e0123456789 \nabfinonex";
  for (int i = 0; i < 2000; ++i) {
    std::string t = text;
    t[rng() % t.size()] = alphabet[rng() % alphabet.size()];
    EXPECT_NO_THROW(survives(t)) << t;
  }
}

}  // namespace
}  // namespace ampfuse::ir
