// The fusion planner on textual graphs: what joins a kernel, what is loaded through a map,
// what is stored, and the cases that must not fuse (cycles, broadcasts of inner values);
// and a network of 150k nodes.
#include "engine/planning/fusion_plan.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "models/layered_model.h"
#include "tests/filecheck.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace ampfuse::engine {
namespace {

std::string plan_text(const std::string& ir, PlannerOptions opts = {}) {
  ir::Graph g = ir::parse_graph(ir);
  ir::infer_types(g);
  return print_plan(g, plan_fusion(g, opts));
}

TEST(FusionPlan, ElementwiseChainIsOneKernel) {
  const std::string p = plan_text(R"(graph {
    %x = var input : bf16[4,8]
    %y = var input : bf16[4,8]
    %a = amp_cast(%x) {dtype=f32}
    %b = amp_cast(%y) {dtype=f32}
    %c = elemwise_mul(%a, %b)
    %d = _plus_scalar(%c) {scalar=0.5}
    %e = relu(%d)
    %f = elemwise_sub(%e, %a)
    %g = amp_cast(%f) {dtype=bf16}
    return %g
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [4,8] nodes: %a=amp_cast %b=amp_cast %c=elemwise_mul %d=_plus_scalar %e=relu %f=elemwise_sub %g=amp_cast
    CHECK-SAME: in: %x %y  out: %g  bytes: 192
    CHECK-NOT: kernel 1)");
}

TEST(FusionPlan, CastThenTransposeIsOnePassWithPermutedStore) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,3,4,5]
    %c = amp_cast(%x) {dtype=bf16}
    %t = transpose(%c) {axes=[0,2,3,1]}
    return %t
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [2,3,4,5] nodes: %c=amp_cast %t=transpose
    CHECK-SAME: in: %x  out: %t(permuted)
    CHECK-NOT: kernel 1)");
}

TEST(FusionPlan, TransposeOfAnInputIsAMappedLoad) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,3,4]
    %t = transpose(%x) {axes=[2,0,1]}
    %c = amp_cast(%t) {dtype=bf16}
    return %c
  })");
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [4,2,3] nodes: %t=transpose %c=amp_cast
    CHECK-SAME: in: %x(mapped)  out: %c
    CHECK-NOT: kernel 1)");
}

TEST(FusionPlan, BroadcastInputsAreMappedButInnerValuesDoNotBroadcast) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[4,8]
    %bias = var input : f32[8]
    %small = relu(%bias)
    %y = broadcast_add(%x, %small)
    return %y
  })");
  // %small is computed over [8]; reading it broadcast over [4,8] inside the same kernel
  // would recompute it 4 times, so it is its own kernel and the add loads it with stride 0.
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [8] nodes: %small=relu
    CHECK: kernel 1 [4,8] nodes: %y=broadcast_add
    CHECK-SAME: in: %x %small(mapped))");
}

TEST(FusionPlan, NoCycleThroughAnExternalOp) {
  const std::string p = plan_text(R"(graph {
    %x = var input : f32[2,6]
    %w = var param : f32[6,6]
    %a = relu(%x)
    %b = sigmoid(%a)
    %fc = FullyConnected(%a, %w) {num_hidden=6, no_bias=true}
    %c = elemwise_add(%b, %fc)
    return %c
  })");
  // %c reads %fc, which reads kernel 0: putting %c into kernel 0 would be a cycle.
  EXPECT_FILECHECK(p, R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu %b=sigmoid
    CHECK-SAME: out: %a %b
    CHECK-NEXT: external %fc=FullyConnected
    CHECK-NEXT: kernel 1 [2,6] nodes: %c=elemwise_add)");
}

TEST(FusionPlan, ViewsAliasAndUnfusedPlansHaveOneNodePerKernel) {
  const char* ir = R"(graph {
    %x = var input : f32[2,6]
    %a = relu(%x)
    %r = Reshape(%a) {shape=[3,4]}
    %b = sigmoid(%r)
    %c = exp(%b)
    return %c
  })";
  EXPECT_FILECHECK(plan_text(ir), R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu
    CHECK-NEXT: view %r=Reshape
    CHECK-NEXT: kernel 1 [3,4] nodes: %b=sigmoid %c=exp)");
  EXPECT_FILECHECK(plan_text(ir, {.fuse = false}), R"(
    CHECK: kernel 0 [2,6] nodes: %a=relu  in
    CHECK: view %r=Reshape
    CHECK: kernel 1 [3,4] nodes: %b=sigmoid  in
    CHECK: kernel 2 [3,4] nodes: %c=exp  in)");
}

// What every plan must be: each computed node in exactly one step, every value a step
// reads computed by an earlier step (or a variable), and every value read outside its
// step stored by that step and loaded by the reader.
void expect_valid_plan(const ir::Graph& g, const Plan& plan) {
  std::vector<int> step_of(g.nodes.size(), -1);
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const auto* k = std::get_if<FusedKernel>(&plan.steps[s]);
    for (int32_t n : k ? k->nodes : std::vector<int32_t>{step_node(plan.steps[s])}) {
      ASSERT_EQ(step_of[n], -1) << g.nodes[n].name << " is in two steps";
      step_of[n] = static_cast<int>(s);
    }
  }
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].is_var()) continue;
    ASSERT_GE(step_of[n], 0) << g.nodes[n].name << " is in no step";
    for (ir::ValueRef in : g.nodes[n].inputs) {
      if (g.nodes[in.node].is_var() || step_of[in.node] == step_of[n]) continue;
      ASSERT_LT(step_of[in.node], step_of[n]) << g.nodes[n].name << " runs before its input " << value_name(g, in);
      const std::vector<ir::ValueRef> stored = step_writes(g, plan.steps[step_of[in.node]]);
      const std::vector<ir::ValueRef> loaded = step_reads(g, plan.steps[step_of[n]]);
      EXPECT_NE(std::find(stored.begin(), stored.end(), in), stored.end()) << value_name(g, in) << " is not stored";
      EXPECT_NE(std::find(loaded.begin(), loaded.end(), in), loaded.end()) << value_name(g, in) << " is not loaded";
    }
  }
}

// Planning time grows about linearly with the graph (bench/planner_bench.cpp measures it);
// at this size the planner used to take minutes.
TEST(FusionPlan, PlansANetworkOf150kNodes) {
#if defined(__SANITIZE_ADDRESS__)
  constexpr int64_t kNodes = 30000;  // the same blocks, fewer of them: ASan is ~10x slower
#else
  constexpr int64_t kNodes = 150000;
#endif
  const ir::Graph g = models::build_layered_model(kNodes);
  const Plan plan = plan_fusion(g);
  expect_valid_plan(g, plan);
  // Convolutions and matrix products run alone; everything else of a block around them fuses.
  int64_t heavy = 0, external = 0;
  for (const ir::Node& n : g.nodes) heavy += n.op == "Convolution" || n.op == "FullyConnected";
  for (const PlanStep& s : plan.steps) external += std::holds_alternative<ExternalStep>(s);
  EXPECT_EQ(external, heavy);
}

}  // namespace
}  // namespace ampfuse::engine
