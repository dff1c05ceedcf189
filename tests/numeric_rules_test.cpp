// The numeric rules defined once in ir/ and the code that must follow them: the compute
// type (ir::compute_type) as the interpreter and the fusion planner use it, and float ->
// integer conversion (ir/int_conversion.h) in the definition itself, the interpreter and the
// LLVM-compiled kernels, on edge cases whose results are written out by hand
// (int_conversion_cases.h; the CUDA emitter's check is in cuda_host_emulation_test.cpp).
#include "engine/planning/fusion_plan.h"
#include "int_conversion_cases.h"
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

// ---- float -> integer conversion ------------------------------------------------------------

template <class I>
int64_t defined(double x, bool from_f32) {
  return from_f32 ? ir::saturating_float_to_int<I>(static_cast<float>(x)) : ir::saturating_float_to_int<I>(x);
}

TEST(IntConversion, TheDefinitionGivesTheWrittenOutResults) {
  for (bool from_f32 : {true, false}) {
    for (const IntConversionCase& c : int_conversion_cases()) {
      SCOPED_TRACE(::testing::Message() << "x = " << c.x << (from_f32 ? " (f32)" : " (f64)"));
      EXPECT_EQ(defined<int8_t>(c.x, from_f32), c.i8);
      EXPECT_EQ(defined<uint8_t>(c.x, from_f32), c.u8);
      EXPECT_EQ(defined<int32_t>(c.x, from_f32), c.i32);
      EXPECT_EQ(defined<int64_t>(c.x, from_f32), c.i64);
    }
  }
}

TEST(IntConversion, RangesAreThoseOfTheIntegerTypes) {
  for (DType t : kSaturatingDTypes) {
    const ir::IntegerRange r = ir::integer_range(t);
    EXPECT_EQ(static_cast<size_t>(r.bits), ir::dtype_size(t) * 8) << ir::dtype_name(t);
    EXPECT_TRUE(ir::saturates_from_float(t));
  }
  EXPECT_EQ(ir::integer_range(DType::u8).min, 0);
  EXPECT_FALSE(ir::integer_range(DType::u8).is_signed);
  EXPECT_EQ(ir::integer_range(DType::i64).max, INT64_MAX);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64, DType::boolean})
    EXPECT_FALSE(ir::saturates_from_float(t)) << ir::dtype_name(t);
}

// Tensor::set_f64 is how the interpreter's reference kernels store integers.
TEST(IntConversion, TensorStoresFollowTheDefinition) {
  for (DType to : kSaturatingDTypes) {
    Tensor t({to, {static_cast<int64_t>(int_conversion_cases().size())}});
    for (size_t i = 0; i < int_conversion_cases().size(); ++i)
      t.set_f64(static_cast<int64_t>(i), int_conversion_cases()[i].x);
    EXPECT_TRUE(converted_as_defined(t, to));
  }
}

TEST(IntConversion, InterpreterAndLlvmKernelsFollowTheDefinition) {
  runtime::KernelCache cache;
  for (DType from : {DType::f32, DType::f64}) {
    const Tensor x = int_conversion_inputs(from);
    for (const IntConversionSpec& s : int_conversion_specs(from)) {
      SCOPED_TRACE(fmt::format("{} from {} to {}", s.spec.name, ir::dtype_name(from), ir::dtype_name(s.to)));
      EXPECT_TRUE(converted_as_defined(run_reference(s.spec, {&x})[0], s.to)) << "interpreter";
      EXPECT_TRUE(converted_as_defined(run_jit(cache, s.spec, {&x}).outputs[0], s.to)) << "LLVM";
    }
  }
}

}  // namespace
}  // namespace ampfuse::testing
