// What the op registry declares once and what reads it: aliases resolved to canonical names
// when a graph is built (MXNet JSON, text IR, GraphBuilder).
#include "engine/passes/amp_pipeline.h"
#include "engine/passes/cast_fold.h"
#include "ir/builder.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "ir/verifier.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ampfuse::ir {
namespace {

using testing::error_message;

const OpRegistry& reg() { return OpRegistry::global(); }

// ---- aliases ----------------------------------------------------------------------------

TEST(OpRegistryAliases, ResolveToTheCanonicalOpWhichAloneIsFound) {
  EXPECT_EQ(&reg().resolve("cast"), &reg().get("Cast"));
  EXPECT_EQ(&reg().resolve("Cast"), &reg().get("Cast"));
  EXPECT_EQ(reg().resolve("crop").name, "slice");
  EXPECT_EQ(reg().resolve("broadcast_plus").name, "broadcast_add");
  EXPECT_EQ(reg().resolve("ElementWiseSum").name, "add_n");
  EXPECT_EQ(reg().find("cast"), nullptr);
  const std::vector<std::string> names = reg().names();
  EXPECT_EQ(std::count(names.begin(), names.end(), "cast"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "Cast"), 1);
  EXPECT_EQ(reg().get("Cast").aliases, std::vector<std::string>{"cast"});
}

TEST(OpRegistryAliases, GetRefusesAnAliasAndNamesTheCanonicalOp) {
  EXPECT_EQ(error_message([] { reg().get("cast"); }),
            "op 'cast' is an alias of 'Cast': graphs hold canonical op names (resolve aliases when building them)");
}

TEST(OpRegistryAliases, UnknownNamesSuggestTheClosestNameOrAlias) {
  EXPECT_EQ(error_message([] { reg().resolve("cast_"); }),
            "unknown op 'cast_' (did you mean 'cast' (an alias of 'Cast')?)");
  EXPECT_EQ(error_message([] { reg().resolve("Cas"); }), "unknown op 'Cas' (did you mean 'Cast'?)");
  EXPECT_EQ(error_message([] { reg().resolve("no_such_operator_at_all"); }), "unknown op 'no_such_operator_at_all'");
  // get() knows graphs hold no aliases, so it suggests canonical names only.
  EXPECT_EQ(error_message([] { reg().get("cast_"); }), "unknown op 'cast_' (did you mean 'Cast'?)");
}

OpDef plain_op(std::string name, std::vector<std::string> aliases = {}) {
  OpDef d;
  d.name = std::move(name);
  d.aliases = std::move(aliases);
  d.inputs = {{"data"}};
  return d;
}

TEST(OpRegistryAliases, ANameOrAliasIsTakenOnce) {
  OpRegistry r;
  r.add(plain_op("Foo", {"foo"}));
  EXPECT_EQ(error_message([&] { r.add(plain_op("foo")); }), "op 'foo' is registered twice");
  EXPECT_EQ(error_message([&] { r.add(plain_op("Bar", {"Foo"})); }),
            "alias 'Foo' of op 'Bar' is already a name or alias");
  EXPECT_EQ(error_message([&] { r.add(plain_op("Baz", {"foo"})); }),
            "alias 'foo' of op 'Baz' is already a name or alias");
  EXPECT_EQ(error_message([&] { r.add(plain_op("Qux", {"Qux"})); }),
            "alias 'Qux' of op 'Qux' is already a name or alias");
}

// A graph of MXNet's aliases, as a hand-written or converted file may hold them.
constexpr const char* kAliasJson = R"js({"nodes": [
    {"op": "null", "name": "x", "attrs": {"__shape__": "(2, 6)", "__dtype__": "12"}, "inputs": []},
    {"op": "cast", "name": "up", "attrs": {"dtype": "float32"}, "inputs": [[0, 0, 0]]},
    {"op": "crop", "name": "c", "attrs": {"begin": "(0, 1)", "end": "(2, 5)"}, "inputs": [[1, 0, 0]]},
    {"op": "broadcast_plus", "name": "p", "inputs": [[2, 0, 0], [2, 0, 0]]},
    {"op": "cast", "name": "down", "attrs": {"dtype": "bfloat16"}, "inputs": [[3, 0, 0]]}],
  "heads": [[4, 0, 0]]})js";

TEST(OpRegistryAliases, MxnetImportStoresCanonicalNamesAndExportWritesThem) {
  const Graph g = import_mxnet_json(kAliasJson, "aliases.json");
  EXPECT_EQ(g.nodes[1].op, "Cast");
  EXPECT_EQ(g.nodes[2].op, "slice");
  EXPECT_EQ(g.nodes[3].op, "broadcast_add");
  EXPECT_EQ(g.nodes[4].op, "Cast");
  EXPECT_EQ(g.type({4, 0}), (TensorType{DType::bf16, {2, 4}}));
  const nlohmann::json j = nlohmann::json::parse(export_mxnet_json(g));
  EXPECT_EQ(j["nodes"][1]["op"], "Cast");
  EXPECT_EQ(j["nodes"][2]["op"], "slice");
  EXPECT_EQ(j["nodes"][3]["op"], "broadcast_add");
  EXPECT_EQ(import_mxnet_json(export_mxnet_json(g), "exported.json"), g);
}

TEST(OpRegistryAliases, MxnetImportOfAnUnknownOpSuggestsAnAlias) {
  std::string text = kAliasJson;
  text.replace(text.find("\"crop\""), 6, "\"crops\"");
  EXPECT_EQ(error_message([&] { import_mxnet_json(text, "typo.json"); }),
            "typo.json: node 2 'c' (crops): unknown op 'crops' (did you mean 'crop' (an alias of 'slice')?)");
}

TEST(OpRegistryAliases, TextParserAndBuilderStoreCanonicalNames) {
  const Graph parsed = parse_graph(R"(graph {
    %x = var input : f32[2,3]
    %y = cast(%x) {dtype=f16}
    %z = swapaxes(%y) {dim1=0, dim2=1}
    return %z
  })");
  EXPECT_EQ(parsed.nodes[1].op, "Cast");
  EXPECT_EQ(parsed.nodes[2].op, "SwapAxis");
  EXPECT_NE(print_graph(parsed).find("= Cast(%x)"), std::string::npos) << print_graph(parsed);

  GraphBuilder b;
  const ValueRef x = b.input("x", {DType::f32, {2, 3}});
  b.output(b.op("cast", {x}, {{"dtype", "float16"}}));
  EXPECT_EQ(b.finish().nodes[1].op, "Cast");
}

TEST(OpRegistryAliases, TextParserReportsAnUnknownOpWithItsPosition) {
  EXPECT_EQ(error_message([] { parse_graph("graph {\n  %x = var input : f32[2]\n  %y = cast_(%x)\n  return %y\n}"); }),
            "<text>:3:8: unknown op 'cast_' (did you mean 'cast' (an alias of 'Cast')?)");
}

TEST(OpRegistryAliases, AGraphHoldingAnAliasDoesNotVerify) {
  Graph g = parse_graph("graph {\n  %x = var input : f32[2]\n  %y = Cast(%x) {dtype=f16}\n  return %y\n}");
  g.nodes[1].op = "cast";  // what a pass constructing nodes by hand might do
  EXPECT_NE(error_message([&] { verify(g); }).find("op 'cast' is an alias of 'Cast'"), std::string::npos);
}

// Before aliases were canonical, `cast` nodes were no casts to cast_fold and the AMP
// statistics: a round trip spelled with them must fold and count as one spelled with Cast.
TEST(OpRegistryAliases, CastAliasIsFoldedAndCountedLikeCast) {
  const std::string round_trip = R"(graph {
    %x = var input : bf16[2,6]
    %up = cast(%x) {dtype=f32}
    %back = cast(%up) {dtype=bf16}
    %r = relu(%back)
    return %r
  })";
  std::string spelled_canonical = round_trip;
  for (size_t at; (at = spelled_canonical.find("= cast(")) != std::string::npos;) spelled_canonical[at + 2] = 'C';
  EXPECT_EQ(parse_graph(round_trip), parse_graph(spelled_canonical));

  // bf16 -> f32 -> bf16 is exact: both casts go and relu reads x in bf16.
  engine::AmpOptions opts;
  opts.target = DType::bf16;
  engine::AmpStats stats;
  const Graph converted = engine::convert_for_amp(parse_graph(round_trip), opts, &stats);
  EXPECT_EQ(stats.casts_removed, 2) << print_graph(converted);
  EXPECT_EQ(stats.casts_final, 0);
  EXPECT_EQ(stats.lp16_nodes, 1);
  EXPECT_EQ(stats.fp32_nodes, 0);

  Graph folded = parse_graph(round_trip);
  EXPECT_EQ(engine::cast_fold(folded), 2);
}

}  // namespace
}  // namespace ampfuse::ir
