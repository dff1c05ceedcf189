// The numeric rules defined once in ir/ and the code that must follow them: the compute
// type (ir::compute_type) as the interpreter and the fusion planner use it.
#include "codegen_test_util.h"
#include "engine/planning/fusion_plan.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"

#include <gtest/gtest.h>

namespace ampfuse::testing {
namespace {

// ---- compute type -------------------------------------------------------------------------

TEST(ComputeType, F64ForF64IntegersAndBoolElseF32) {
  EXPECT_EQ(ir::compute_type({DType::f32}), DType::f32);
  EXPECT_EQ(ir::compute_type({DType::bf16, DType::f16, DType::f32}), DType::f32);
  EXPECT_EQ(ir::compute_type({DType::bf16, DType::f64}), DType::f64);
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean}) {
    EXPECT_EQ(ir::compute_type({t}), DType::f64) << ir::dtype_name(t);
    EXPECT_EQ(ir::compute_type({DType::f16, t}), DType::f64) << ir::dtype_name(t);
  }
  EXPECT_EQ(ir::compute_type({}), DType::f32);
}

// i32 16777217 = 2^24 + 1 survives an f64 computation and not an f32 one.
TEST(ComputeType, TheInterpreterComputesIntegersInF64) {
  Tensor x({DType::i32, {1}});
  x.data<int32_t>()[0] = 16777217;
  ScalarBuilder b(1);
  const ir::ScalarProgram identity = b.finish({b.input(0)});
  EXPECT_EQ(runtime::eval_scalar_program(identity, {&x}, {{DType::i32, {1}}})[0].data<int32_t>()[0], 16777217);
  // Through an f32 output the value rounds once, on the store: 2^24.
  EXPECT_EQ(runtime::eval_scalar_program(identity, {&x}, {{DType::f32, {1}}})[0].data<float>()[0], 16777216.0f);
}

TEST(ComputeType, ThePlannerGivesEachKernelItsNodesComputeType) {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f16[8]
    %i = var input : i32[8]
    %r = relu(%x)
    %c = Cast(%i) {dtype=f32}
    return %r, %c
  })");
  ir::infer_types(g);
  EXPECT_EQ(engine::node_compute_type(g, 2), DType::f32);
  EXPECT_EQ(engine::node_compute_type(g, 3), DType::f64);
  const engine::Plan plan = engine::plan_fusion(g);
  ASSERT_EQ(plan.steps.size(), 2u);  // different compute types never share a kernel
  for (const engine::PlanStep& step : plan.steps) {
    const auto& k = std::get<engine::FusedKernel>(step);
    EXPECT_EQ(k.compute, engine::node_compute_type(g, k.nodes[0]));
  }
}

}  // namespace
}  // namespace ampfuse::testing
