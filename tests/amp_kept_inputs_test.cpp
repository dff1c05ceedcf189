// amp_convert and the inputs it must leave as they are: index slots (Embedding's ids,
// labels) and the inputs of an amp_multicast already in the graph. Expected graphs are
// what MXNet 1.9.1's amp.convert_symbol makes of the same symbols (run with
// tojson(remove_amp_cast=False)), except where a comment says how ampfuse differs.
#include "engine/lower.h"
#include "engine/passes/amp_convert.h"
#include "engine/passes/amp_options.h"
#include "ir/lowp.h"
#include "ir/op_registry.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

namespace ampfuse::testing {
namespace {

using engine::AmpOptions;
using ir::DType;

AmpOptions options(DType target) {
  AmpOptions o;
  o.target = target;
  return o;
}

ir::Graph convert(const char* text, const AmpOptions& o) { return engine::convert_for_amp(ir::parse_graph(text), o); }

// ---- index slots ------------------------------------------------------------------------

TEST(AmpIndexInputs, RegistryDeclaresIdsAndLabels) {
  const ir::OpRegistry& r = ir::OpRegistry::global();
  EXPECT_TRUE(r.get("Embedding").inputs.at(0).index);
  EXPECT_FALSE(r.get("Embedding").inputs.at(1).index);  // the table itself is float data
  EXPECT_TRUE(r.get("SoftmaxOutput").inputs.at(1).index);
  EXPECT_FALSE(r.get("SoftmaxOutput").inputs.at(0).index);
  EXPECT_FALSE(r.get("FullyConnected").inputs.at(0).index);
  // Every table index (what random inputs draw below a vocabulary) is an index slot.
  for (const std::string& name : r.names()) {
    const ir::OpDef& def = r.get(name);
    if (def.table_index) {
      EXPECT_TRUE(def.inputs.at(def.table_index->slot).index) << name;
    }
  }
}

TEST(AmpIndexInputs, RegistryRefusesATableIndexThatIsNoIndexSlot) {
  ir::OpDef d = ir::OpRegistry::global().get("Embedding");
  d.name = "EmbeddingWithFloatIds";
  d.aliases.clear();
  d.inputs[0].index = false;
  ir::OpRegistry scratch;
  EXPECT_ERROR(scratch.add(d), "op 'EmbeddingWithFloatIds' declares table index input 0 ('data') but not as an index "
                               "slot: declare it with .index = true");
  d.inputs[0].index = true;
  EXPECT_NO_THROW(scratch.add(d));
}

// Sockeye's tied embeddings: the target embedding's weight is also the output layer's.
// MXNet leaves the Embedding and its ids in f32 (bf16 lists it as fp32; f16 as neutral,
// which MXNet never casts). ampfuse's bf16 Embedding is fp32 as MXNet's list says; its fp16
// one is neutral and reads the weight cast the FullyConnected makes anyway (one f16 copy of
// the table, exact rows of it). In both the ids keep their type: in f16, id 12345 would be
// 12344 (in bf16, 12352).
const char* kTiedEmbedding = R"(graph {
  %ids = var input : f32[2,3]
  %embed_weight = var param : f32[13000,8]
  %embed = Embedding(%ids, %embed_weight) {input_dim=13000, output_dim=8}
  %logits = FullyConnected(%embed, %embed_weight) {num_hidden=13000, no_bias=true, flatten=false}
  return %logits, %embed
})";

TEST(AmpIndexInputs, TiedEmbeddingKeepsItsIdsInF32) {
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(ir::dtype_name(t));
    const ir::Graph g = convert(kTiedEmbedding, options(t));
    const std::string low(ir::mxnet_dtype_name(t));
    // bf16: an f32 Embedding of the f32 table; fp16: a neutral one of the f16 copy.
    const std::string table = t == DType::bf16 ? "%embed_weight" : "%embed_weight_amp_cast_" + low;
    EXPECT_FILECHECK(ir::print_graph(g), fmt::format(R"(
      CHECK-NOT: amp_cast(%ids)
      CHECK-DAG: %embed = Embedding(%ids, {1})
      CHECK-DAG: %embed_weight_amp_cast_{0} = amp_cast(%embed_weight)
      CHECK-NOT: amp_cast(%ids)
      CHECK: %logits = FullyConnected({{{{.*}}}}, %embed_weight_amp_cast_{0}))",
                                                     low, table));
  }
}

// The rows read are the table's rows at the given ids (rounded where the Embedding runs in
// f16): not their neighbours'.
TEST(AmpIndexInputs, TiedEmbeddingReadsTheRowsOfLargeIds) {
  ir::Graph f32 = ir::parse_graph(kTiedEmbedding);
  ir::infer_types(f32);
  runtime::Bindings vars = runtime::random_bindings(f32, 7);
  runtime::Tensor ids(ir::TensorType{DType::f32, {2, 3}});
  const double chosen[] = {12345, 12999, 2049, 257, 0, 4097};  // none exact in bf16, most not in f16
  for (int64_t i = 0; i < 6; ++i) ids.set_f64(i, chosen[i]);
  vars["ids"] = ids;
  const runtime::Tensor want = runtime::interpret(f32, vars).at(1);
  for (DType t : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(ir::dtype_name(t));
    const runtime::Tensor got = runtime::interpret(convert(kTiedEmbedding, options(t)), vars).at(1);
    ASSERT_EQ(got.shape(), want.shape());
    for (int64_t i = 0; i < want.size(); ++i) {
      const float w = static_cast<float>(want.get_f64(i));
      const float rounded = t == DType::bf16 ? w : ir::round_to_f16(w);  // bf16: an f32 Embedding
      ASSERT_EQ(got.get_f64(i), rounded) << "element " << i << " (id " << chosen[i / 8] << ")";
    }
  }
}

// Moved to lp16, an Embedding reads its table in low precision and still its ids as given.
TEST(AmpIndexInputs, LowPrecisionEmbeddingStillKeepsIds) {
  AmpOptions o = options(DType::bf16);
  o.lp16_ops = {"Embedding"};
  const ir::Graph g = convert(R"(graph {
    %ids = var input : f32[4]
    %w = var param : f32[300,8]
    %e = Embedding(%ids, %w) {input_dim=300, output_dim=8}
    return %e
  })",
                              o);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK-NOT: amp_cast(%ids)
    CHECK: %w_amp_cast_bfloat16 = amp_cast(%w) {dtype=bf16}
    CHECK: %e = Embedding(%ids, %w_amp_cast_bfloat16) {{.*}} : bf16[4,8]
    CHECK-NEXT: %e_output_amp_cast_float32 = amp_cast(%e) {dtype=f32})");
}

// The negative case beside it: a data slot that is no index is cast as before.
TEST(AmpIndexInputs, OrdinaryDataSlotsAreStillCast) {
  const ir::Graph g = convert(R"(graph {
    %x = var input : f32[4,8]
    %w = var param
    %fc = FullyConnected(%x, %w) {num_hidden=4, no_bias=true}
    return %fc
  })",
                              options(DType::f16));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %x_amp_cast_float16 = amp_cast(%x) {dtype=f16}
    CHECK: %fc = FullyConnected(%x_amp_cast_float16, %w_amp_cast_float16))");
}

// A label read by an op moved to lp16 stays as given too.
TEST(AmpIndexInputs, LabelsAreNotCast) {
  AmpOptions o = options(DType::bf16);
  o.lp16_ops = {"SoftmaxOutput"};
  const ir::Graph g = convert(R"(graph {
    %x = var input : f32[4,10]
    %label = var input : f32[4]
    %out = SoftmaxOutput(%x, %label)
    return %out
  })",
                              o);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %x_amp_cast_bfloat16 = amp_cast(%x)
    CHECK-NOT: amp_cast(%label)
    CHECK: %out = SoftmaxOutput(%x_amp_cast_bfloat16, %label))");
}

// ---- an amp_multicast already in the graph -------------------------------------------------

// amp_multicast(amp_cast(a, low), b): MXNet leaves it alone, so the multicast runs in f32
// (b is f32) and b is not rounded.
TEST(AmpExistingMulticast, ReadsItsInputsAsTheyAre) {
  for (DType graph_low : {DType::bf16, DType::f16})
    for (DType t : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(fmt::format("{} cast in the graph, target {}", ir::dtype_name(graph_low), ir::dtype_name(t)));
      const ir::Graph g = convert(fmt::format(R"(graph {{
        %a = var input : f32[3]
        %b = var input : f32[3]
        %ca = amp_cast(%a) {{dtype={0}}}
        %mc = amp_multicast(%ca, %b) {{num_outputs=2}}
        return %mc:0, %mc:1
      }})",
                                              ir::dtype_name(graph_low))
                                      .c_str(),
                                  options(t));
      EXPECT_FILECHECK(ir::print_graph(g), R"(
        CHECK-NOT: amp_cast(%b)
        CHECK: %mc = amp_multicast(%ca, %b) {{.*}} : (f32[3], f32[3])
        CHECK-NEXT: return %mc, %mc:1)");
      // And the values: b passes unrounded.
      runtime::Bindings vars;
      for (const char* name : {"a", "b"}) {
        runtime::Tensor v(ir::TensorType{DType::f32, {3}});
        for (int64_t i = 0; i < 3; ++i) v.set_f64(i, 1.0 + 1e-4 * static_cast<double>(i + 1));
        vars[name] = v;
      }
      const std::vector<runtime::Tensor> out = runtime::interpret(g, vars);
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(out.at(1).get_f64(i), vars["b"].get_f64(i));
    }
}

// Multicasts of converted values: MXNet reads them as they come, without casts. Two bf16
// FullyConnected outputs meet in bf16 (cast back to f32 only as graph outputs); a bf16 one
// and an f32 variable meet in f32.
TEST(AmpExistingMulticast, FollowsTheTypesItsInputsGet) {
  const ir::Graph g = convert(R"(graph {
    %a = var input : f32[2,4]
    %b = var input : f32[2,4]
    %fc_weight = var param
    %fc2_weight = var param
    %fc = FullyConnected(%a, %fc_weight) {num_hidden=4, no_bias=true}
    %fc2 = FullyConnected(%b, %fc2_weight) {num_hidden=4, no_bias=true}
    %mc = amp_multicast(%fc, %fc2) {num_outputs=2}
    %mcb = amp_multicast(%fc, %b) {num_outputs=2}
    return %mc:0, %mc:1, %mcb:0, %mcb:1
  })",
                              options(DType::bf16));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %mc = amp_multicast(%fc, %fc2) {{.*}} : (bf16[2,4], bf16[2,4])
    CHECK-NEXT: %mcb = amp_multicast(%fc, %b) {{.*}} : (f32[2,4], f32[2,4])
    CHECK-NOT: amp_cast(%b)
    CHECK-DAG: %mc_output0_amp_cast_float32 = amp_cast(%mc) {dtype=f32}
    CHECK-DAG: %mc_output1_amp_cast_float32 = amp_cast(%mc:1) {dtype=f32}
    CHECK: return %mc_output0_amp_cast_float32, %mc_output1_amp_cast_float32, %mcb, %mcb:1)");
  EXPECT_EQ(ir::print_graph(g).find("amp_cast(%fc)"), std::string::npos) << ir::print_graph(g);
}

// A multicast with cast_narrow runs in the narrowest type of what it reads, with no cast
// in front: the rounding of b is the multicast's own, as in the f32 graph.
TEST(AmpExistingMulticast, CastNarrowKeepsItsOwnRounding) {
  const ir::Graph g = convert(R"(graph {
    %a = var input : f32[2,4]
    %b = var input : f32[2,4]
    %w = var param
    %fc = FullyConnected(%a, %w) {num_hidden=4, no_bias=true}
    %mc = amp_multicast(%fc, %b) {num_outputs=2, cast_narrow=true}
    return %mc:1
  })",
                              options(DType::f16));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK-NOT: amp_cast(%b)
    CHECK: %mc = amp_multicast(%fc, %b) {{.*}} : (f16[2,4], f16[2,4]))");
}

// A bf16 value of the graph and an f16 one of the conversion have no common type: the
// multicast reads the converted input in its original f32, as before, and stays in f32.
TEST(AmpExistingMulticast, MixedLowTypesFallBackToTheOriginalOnes) {
  const ir::Graph g = convert(R"(graph {
    %a = var input : f32[2,4]
    %x = var input : f32[2,4]
    %w = var param
    %ca = amp_cast(%a) {dtype=bf16}
    %fc = FullyConnected(%x, %w) {num_hidden=4, no_bias=true}
    %mc = amp_multicast(%ca, %fc) {num_outputs=2}
    return %mc:0, %mc:1
  })",
                              options(DType::f16));
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %fc = FullyConnected({{.*}} : f16[2,4]
    CHECK-NEXT: %fc_output_amp_cast_float32 = amp_cast(%fc) {dtype=f32}
    CHECK-NEXT: %mc = amp_multicast(%ca, %fc_output_amp_cast_float32) {{.*}} : (f32[2,4], f32[2,4]))");
}

}  // namespace
}  // namespace ampfuse::testing
