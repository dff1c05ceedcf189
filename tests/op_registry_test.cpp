// What the op registry declares once and what reads it: aliases resolved to canonical names
// when a graph is built (MXNet JSON, text IR, GraphBuilder), the cast query, the access maps
// of remapping ops and the planner fusing them (crop, SwapAxis), the channels-last rules and
// the table index, and declarations that contradict their op rejected at registration.
#include "engine/lower.h"
#include "engine/passes/cast_fold.h"
#include "engine/planning/fusion_plan.h"
#include "fuzz/differential.h"
#include "ir/builder.h"
#include "ir/mxnet_json.h"
#include "ir/op_registry.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "ir/verifier.h"
#include "tests/filecheck.h"
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

// ---- what OpDefs declare ------------------------------------------------------------------

TEST(OpRegistryDeclarations, CastsAreDeclared) {
  EXPECT_TRUE(reg().get("Cast").is_cast);
  EXPECT_TRUE(reg().get("amp_cast").is_cast);
  for (const char* op : {"amp_multicast", "relu", "identity", "transpose"}) EXPECT_FALSE(reg().get(op).is_cast) << op;
  const Graph g = parse_graph(R"(graph {
    %x = var input : f32[4]
    %a = amp_cast(%x) {dtype=f16}
    %r = relu(%a)
    return %r
  })");
  EXPECT_FALSE(is_cast(g.nodes[0]));  // a variable
  EXPECT_TRUE(is_cast(g.nodes[1]));
  EXPECT_FALSE(is_cast(g.nodes[2]));
}

TEST(OpRegistryDeclarations, RemapOpsDeclareTheirAccessMaps) {
  for (const char* op : {"transpose", "SwapAxis", "slice", "slice_axis", "broadcast_to", "broadcast_axis"})
    EXPECT_TRUE(static_cast<bool>(reg().get(op).remap_access)) << op;
  // Views alias instead; the *_like ops read a second input's shape only; the rest compute.
  for (const char* op : {"Reshape", "Concat", "slice_like", "broadcast_like", "relu", "Convolution"})
    EXPECT_FALSE(static_cast<bool>(reg().get(op).remap_access)) << op;

  // slice [1:7:3] of dim 1 of a [4,8]: output (i, j) reads input (i, 1 + 3j).
  const Attrs a = parse_attrs(reg().get("slice"), {{"begin", "(0, 1)"}, {"end", "(4, 7)"}, {"step", "(1, 3)"}});
  const AccessMap sliced = reg().get("slice").remap_access(a, {4, 8}, {4, 2});
  EXPECT_EQ(sliced.iter_dim, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(sliced.scale, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(sliced.offset, (std::vector<int64_t>{0, 1}));

  // SwapAxis dims 0 and 2 of [2,3,4]: input dim 0 walks with output dim 2 and vice versa.
  const Attrs s = parse_attrs(reg().get("SwapAxis"), {{"dim1", "0"}, {"dim2", "-1"}});
  const AccessMap swapped = reg().get("SwapAxis").remap_access(s, {2, 3, 4}, {4, 3, 2});
  EXPECT_EQ(swapped.iter_dim, (std::vector<int32_t>{2, 1, 0}));
  EXPECT_TRUE(AccessMap::identity(3).is_identity());
  EXPECT_FALSE(swapped.is_identity());

  // broadcast_to [3,1] -> [3,5]: dim 1 repeats.
  const AccessMap repeated = reg().get("broadcast_to").remap_access({}, {3, 1}, {3, 5});
  EXPECT_EQ(repeated.iter_dim, (std::vector<int32_t>{0, -1}));
  EXPECT_EQ(repeated.scale, (std::vector<int64_t>{1, 0}));
}

TEST(OpRegistryDeclarations, ChannelsLastRules) {
  using Channels = ChannelsLastRule::Channels;
  const auto rule = [](const char* op) { return reg().get(op).channels_last; };
  ASSERT_TRUE(rule("Convolution") && rule("Deconvolution"));
  EXPECT_TRUE(rule("Convolution")->starts_region);
  EXPECT_EQ(rule("Deconvolution")->channels, Channels::layout_attr);
  ASSERT_TRUE(rule("Pooling"));
  EXPECT_EQ(rule("Pooling")->channels, Channels::layout_attr);
  EXPECT_EQ(rule("Pooling")->attr, "layout");
  EXPECT_FALSE(rule("Pooling")->starts_region);
  ASSERT_TRUE(rule("BatchNorm"));
  EXPECT_EQ(rule("BatchNorm")->channels, Channels::axis_attr);
  EXPECT_EQ(rule("BatchNorm")->attr, "axis");
  EXPECT_FALSE(rule("BatchNorm")->every_input);  // gamma, beta and the statistics are per channel
  ASSERT_TRUE(rule("Concat"));
  EXPECT_EQ(rule("Concat")->attr, "dim");
  EXPECT_TRUE(rule("Concat")->every_input);
  ASSERT_TRUE(rule("amp_multicast"));
  EXPECT_TRUE(rule("amp_multicast")->output_per_input);
  for (const char* op : {"relu", "Cast", "broadcast_add", "LeakyReLU", "where"}) {
    ASSERT_TRUE(rule(op)) << op;
    EXPECT_EQ(rule(op)->channels, Channels::anywhere) << op;
    EXPECT_TRUE(rule(op)->every_input) << op;
  }
  for (const char* op : {"transpose", "FullyConnected", "softmax", "LayerNorm", "Reshape", "SliceChannel"})
    EXPECT_FALSE(rule(op)) << op;
}

TEST(OpRegistryDeclarations, EmbeddingIndexesItsTable) {
  ASSERT_TRUE(reg().get("Embedding").table_index);
  EXPECT_EQ(reg().get("Embedding").table_index->slot, 0u);
  EXPECT_EQ(reg().get("Embedding").table_index->size_attr, "input_dim");
  EXPECT_FALSE(reg().get("FullyConnected").table_index);
}

TEST(OpRegistryDeclarations, DeclarationsContradictingTheSchemaAreRejected) {
  OpRegistry r;
  OpDef two = plain_op("two_inputs");
  two.inputs = {{"lhs"}, {"rhs"}};
  two.remap_access = [](const Attrs&, const Shape& in, const Shape&) { return AccessMap::identity(in.size()); };
  EXPECT_EQ(error_message([&] { r.add(two); }),
            "op 'two_inputs' declares a remap access map but does not have exactly one input");

  OpDef axis = plain_op("axis_less");
  axis.channels_last = ChannelsLastRule{ChannelsLastRule::Channels::axis_attr, "axis"};
  EXPECT_EQ(error_message([&] { r.add(axis); }),
            "op 'axis_less' names attribute 'axis' in its channels-last rule but has no such attribute");

  OpDef table = plain_op("table");
  table.table_index = TableIndex{1, "input_dim"};
  EXPECT_EQ(error_message([&] { r.add(table); }),
            "op 'table' declares table index input 1 sized by 'input_dim', which it does not have");
}

// ---- the planner reads the access maps -----------------------------------------------------

std::string plan_of(const Graph& g) { return engine::print_plan(g, engine::plan_fusion(g)); }

// MXNet's `crop` is `slice` (the legacy two-input `Crop` is another op): once the alias is
// resolved it fuses as a slice, its map folded into the kernel's load.
TEST(OpRegistryFusion, CropFusesAsASliceAndMatchesTheInterpreter) {
  Graph g = parse_graph(R"(graph {
    %x = var input : f32[5,9,7]
    %c = crop(%x) {begin=[1,2,0], end=[4,9,7], step=[1,3,1]}
    %r = relu(%c)
    %h = amp_cast(%r) {dtype=f16}
    return %h
  })");
  infer_types(g);
  EXPECT_FILECHECK(plan_of(g), R"(
    CHECK: kernel 0 [3,3,7] nodes: %c=slice %r=relu %h=amp_cast
    CHECK-SAME: in: %x(mapped)  out: %h
    CHECK-NOT: kernel 1)");
  const fuzz::DifferentialResult r = fuzz::compare_fused_with_interpreter(g, 1, 0);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.kernels, 1);
}

TEST(OpRegistryFusion, SwapAxisFusesAsAPermutationAndMatchesTheInterpreter) {
  Graph g = parse_graph(R"(graph {
    %x = var input : bf16[4,3,6]
    %w = amp_cast(%x) {dtype=f32}
    %s = SwapAxis(%w) {dim1=0, dim2=2}
    %y = _mul_scalar(%s) {scalar=1.5}
    return %y
  })");
  infer_types(g);
  EXPECT_FILECHECK(plan_of(g), R"(
    CHECK: kernel 0 [4,3,6] nodes: %w=amp_cast %s=SwapAxis %y=_mul_scalar
    CHECK-SAME: out: %y(permuted)
    CHECK-NOT: kernel 1)");
  const fuzz::DifferentialResult r = fuzz::compare_fused_with_interpreter(g, 2, 0);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.kernels, 1);
}

// slice_like declares no access map: it runs as an external op, not as a remapping.
TEST(OpRegistryFusion, OpsWithoutAnAccessMapStayExternal) {
  Graph g = parse_graph(R"(graph {
    %x = var input : f32[4,6]
    %l = var input : f32[2,3]
    %s = slice_like(%x, %l)
    %r = relu(%s)
    return %r
  })");
  infer_types(g);
  EXPECT_FILECHECK(plan_of(g), R"(
    CHECK: external %s=slice_like
    CHECK: kernel 0 [2,3] nodes: %r=relu)");
}

}  // namespace
}  // namespace ampfuse::ir
