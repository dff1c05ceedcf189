// graph_to_dot on textual graphs: kernels as clusters with their size, node kinds as shapes,
// dtypes as colours and edge labels; the unfused plan; names that need escaping.
#include "models/default_model.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/graph_dot.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "tests/filecheck.h"

#include <gtest/gtest.h>

namespace ampfuse::engine {
namespace {

using models::build_default_model;

std::string dot_text(const std::string& ir, PlannerOptions opts = {}) {
  ir::Graph g = ir::parse_graph(ir);
  ir::infer_types(g);
  return graph_to_dot(g, plan_fusion(g, opts));
}

// bf16 in, cast up, relu, cast down (one kernel), a convolution (external), a view.
const char* kCastConvFlatten = R"(graph {
    %x = var input : bf16[1,4,8,8]
    %w = var param : bf16[8,4,3,3]
    %a = amp_cast(%x) {dtype=f32}
    %r = relu(%a)
    %c = amp_cast(%r) {dtype=bf16}
    %conv = Convolution(%c, %w) {kernel=[3,3], num_filter=8, no_bias=true}
    %f = Flatten(%conv)
    return %f
  })";

TEST(GraphDot, KernelsAreClustersAndKindsAreShapes) {
  const std::string d = dot_text(kCastConvFlatten);
  EXPECT_FILECHECK(d, R"(
    CHECK-LABEL: digraph ampfuse {
    CHECK: label="7 nodes: 1 fused kernels, 1 external ops, 1 views";
    CHECK: subgraph cluster_legend {
    CHECK-DAG: legend_f32 [label="f32", shape=box, style="filled", fillcolor="#9ecae1"];
    CHECK-DAG: legend_bf16 [label="bf16", shape=box, style="filled", fillcolor="#fdae6b"];
    CHECK-DAG: legend_f16 [label="f16", shape=box, style="filled", fillcolor="#a1d99b"];
    CHECK-DAG: legend_bool [label="bool", shape=box, style="filled", fillcolor="#fa9fb5"];
    CHECK: n0 [label="x\n[1,4,8,8]", shape=ellipse, style="filled", fillcolor="#fdae6b"];
    CHECK-NOT: n1 [
    CHECK: subgraph cluster_0 {
    CHECK-NEXT: label="kernel 0: 3 ops, 1024 bytes";
    CHECK: n2 [label="a\namp_cast", shape=box, style="rounded,filled", fillcolor="#9ecae1"];
    CHECK-NEXT: n3 [label="r\nrelu", shape=box, style="rounded,filled", fillcolor="#9ecae1"];
    CHECK-NEXT: n4 [label="c\namp_cast", shape=box, style="rounded,filled", fillcolor="#fdae6b"];
    CHECK-NEXT: }
    CHECK-NEXT: n5 [label=<conv<br/>Convolution<br/><font point-size="7">weight: w bf16 [8,4,3,3]</font>>, shape=box, style="filled,bold", fillcolor="#fdae6b"];
    CHECK-NEXT: n6 [label="f\nFlatten", shape=box, style="filled,dashed", fillcolor="#fdae6b"];
    CHECK-NOT: cluster_1
    CHECK: n0 -> n2 [label="bf16 [1,4,8,8]"];
    CHECK: n2 -> n3 [label="f32 [1,4,8,8]"];
    CHECK: n4 -> n5 [label="bf16 [1,4,8,8]"];
    CHECK-NEXT: n5 -> n6 [label="bf16 [1,8,6,6]"];
    CHECK-NEXT: out0 [label="output 0", shape=plaintext];
    CHECK-NEXT: n6 -> out0 [label="bf16 [1,288]"];
    CHECK-NEXT: })");
}

TEST(GraphDot, UnfusedPlanHasAClusterPerOp) {
  PlannerOptions unfused;
  unfused.fuse = false;
  const std::string d = dot_text(kCastConvFlatten, unfused);
  EXPECT_FILECHECK(d, R"(
    CHECK-NOT: 3 ops
    CHECK: subgraph cluster_0 {
    CHECK-NEXT: label="kernel 0: 1 ops, 1536 bytes";
    CHECK: subgraph cluster_1 {
    CHECK-NEXT: label="kernel 1: 1 ops, 2048 bytes";
    CHECK: subgraph cluster_2 {
    CHECK-NEXT: label="kernel 2: 1 ops, 1536 bytes";
    CHECK-NOT: cluster_3)");
}

TEST(GraphDot, ColoursFollowOutputDtypes) {
  const std::string d = dot_text(R"(graph {
    %x = var input : f32[4]
    %y = var input : f16[4]
    %i = var input : i32[4]
    %a = relu(%x)
    %b = relu(%y)
    %c = broadcast_greater(%a, %a)
    return %b, %c, %i
  })");
  EXPECT_FILECHECK(d, R"(
    CHECK: n0 [label="x\n[4]"{{.*}}fillcolor="#9ecae1"];
    CHECK: n1 [label="y\n[4]"{{.*}}fillcolor="#a1d99b"];
    CHECK: n2 [label="i\n[4]"{{.*}}fillcolor="#d9d9d9"];
    CHECK-DAG: [label="a\nrelu"{{.*}}fillcolor="#9ecae1"];
    CHECK-DAG: [label="b\nrelu"{{.*}}fillcolor="#a1d99b"];
    CHECK-DAG: [label="c\nbroadcast_greater"{{.*}}fillcolor="#{{[0-9a-f]+}}"];
    CHECK: -> out2 [label="i32 [4]"];)");
  // An all-f32 graph paints nothing bf16 outside the legend.
  const std::string f32 = dot_text(R"(graph {
    %x = var input : f32[4]
    %a = relu(%x)
    return %a
  })");
  EXPECT_FILECHECK(f32, R"(
    CHECK: legend_bool
    CHECK-NOT: fillcolor="#fdae6b"
    CHECK: n1 [label="a\nrelu")");
}

TEST(GraphDot, NamesAreEscaped) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4]
    %a = relu(%x)
    return %a
  })");
  ir::infer_types(g);
  g.nodes[1].name = "say \"hi\"\\now";
  const std::string d = graph_to_dot(g, plan_fusion(g));
  EXPECT_NE(d.find(R"([label="say \"hi\"\\now\nrelu")"), std::string::npos) << d;
}

TEST(GraphDot, DefaultModelShowsEveryKind) {
  const ir::Graph g = build_default_model(1);
  const std::string d = graph_to_dot(g, plan_fusion(g));
  EXPECT_FILECHECK(d, R"(
    CHECK: subgraph cluster_0 {
    CHECK-NEXT: label="kernel 0: {{[0-9]+}} ops, {{[0-9]+}} bytes";
    CHECK: subgraph cluster_1 {
    CHECK: -> out0)");
  for (const char* part : {R"([label=<conv0<br/>Convolution<br/><font point-size="7">weight: conv0_weight f32 [16,3,3,3]</font>)",
                           R"([label=<fc1<br/>FullyConnected<br/>)",
                           R"([label="data\n[1,3,32,32]", shape=ellipse, style="filled")"})
    EXPECT_NE(d.find(part), std::string::npos) << part << "\n" << d;
  // No weight has a node of its own: each is a line in its reader's label.
  EXPECT_EQ(d.find("shape=ellipse, style=\"filled,dotted\""), std::string::npos) << d;
}

}  // namespace
}  // namespace ampfuse::engine
