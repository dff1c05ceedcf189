// Dropout in training inside fused kernels: _Dropout_train's scalar recipe draws its mask
// from philox_bits24 (ir/scalar_program.h), so the mask is never stored and fused kernels
// equal the interpreter bit for bit, forward and backward, whatever the kernel's order.
#include "engine/execution/executor.h"
#include "engine/passes/autodiff.h"
#include "engine/planning/fusion_plan.h"
#include "ir/builder.h"
#include "ir/op_registry.h"
#include "ir/philox.h"
#include "ir/scalar_derivative.h"
#include "runtime/interpreter.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>

namespace ampfuse {
namespace {

using ir::DType;
using ir::Shape;
using ir::TensorType;
using runtime::Tensor;

std::map<std::string, std::string> dropout_attrs(double p, uint64_t seed, uint64_t offset) {
  return {{"p", std::to_string(p)}, {"seed", std::to_string(seed)}, {"offset", std::to_string(offset)}};
}

// y = dropout(relu(x)) * w: the dropout in the middle of an elementwise chain.
ir::Graph chain(DType dtype, const Shape& s, double p = 0.3, uint64_t seed = 5, uint64_t offset = 2) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {dtype, s});
  const ir::ValueRef w = b.param("w", TensorType{dtype, s});
  const ir::ValueRef relu = b.op("relu", {x}, {}, "relu");
  const ir::ValueRef drop = b.op("_Dropout_train", {relu}, dropout_attrs(p, seed, offset), "drop");
  b.output(b.op("elemwise_mul", {drop, w}, {}, "mul"));
  return b.finish();
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.type() == b.type() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.size()) * ir::dtype_size(a.dtype())) == 0;
}

// Runs `g` compiled (every kernel compiled, none on the interpreter) and on the interpreter;
// expects the same bits. Returns the compiled outputs.
std::vector<Tensor> expect_fused_equals_interpreter(const ir::Graph& g, const runtime::Bindings& vars) {
  const std::vector<Tensor> want = runtime::interpret(g, vars);
  const engine::Executable exe = engine::Executable::compile(g);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  const std::vector<Tensor> got = exe.run(vars);
  EXPECT_EQ(got.size(), want.size());
  for (size_t k = 0; k < std::min(got.size(), want.size()); ++k) EXPECT_TRUE(same_bytes(got[k], want[k])) << "output " << k;
  return got;
}

// The fused kernel of the plan of `g` that computes node `name`, or nullptr (external).
const engine::FusedKernel* kernel_of(const ir::Graph& g, const engine::Plan& plan, const std::string& name) {
  for (const engine::PlanStep& step : plan.steps)
    if (const auto* k = std::get_if<engine::FusedKernel>(&step))
      for (int32_t n : k->nodes)
        if (g.nodes[n].name == name) return k;
  return nullptr;
}

int32_t node_named(const ir::Graph& g, const std::string& name) {
  for (int32_t n = 0; n < static_cast<int32_t>(g.nodes.size()); ++n)
    if (g.nodes[n].name == name) return n;
  return -1;
}

// The recipe is the definition now; check it against the formula written out directly
// (ir/philox.h and MXNet's f32 scale), in each compute type, on odd sizes.
TEST(FusedDropout, InterpreterComputesTheDocumentedFormula) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    SCOPED_TRACE(ir::dtype_name(dtype));
    const TensorType t{dtype, {7, 97}};
    ir::GraphBuilder b;
    b.output(b.op("_Dropout_train", {b.input("x", t)}, dropout_attrs(0.4, 77, 3)));
    const ir::Graph g = b.finish();
    const runtime::Bindings vars = runtime::random_bindings(g, 3);
    const Tensor y = runtime::interpret(g, vars)[0];
    const Tensor& x = vars.at("x");
    const uint32_t threshold = ir::dropout_keep_threshold(0.4);
    const float scale = 1.0f / (1.0f - 0.4f);
    Tensor want(t);
    size_t kept = 0;
    for (int64_t i = 0; i < x.size(); ++i) {
      const bool keep = ir::philox_bits24(77, 3, static_cast<uint64_t>(i)) < threshold;
      kept += keep;
      const double v = dtype == DType::f64 ? x.get_f64(i) * (keep ? static_cast<double>(scale) : 0.0)
                                           : static_cast<double>(static_cast<float>(x.get_f64(i)) * (keep ? scale : 0.0f));
      want.set_f64(i, v);
    }
    EXPECT_TRUE(same_bytes(y, want));
    EXPECT_GT(kept, 0u);
    EXPECT_LT(kept, static_cast<size_t>(x.size()));
  }
}

TEST(FusedDropout, ChainIsOneKernelEqualToTheInterpreter) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (const Shape& s : {Shape{1}, Shape{7}, Shape{97}, Shape{3, 5, 7}}) {
      SCOPED_TRACE(fmt::format("{} {}", ir::dtype_name(dtype), ir::shape_str(s)));
      const ir::Graph g = chain(dtype, s);
      const engine::Plan plan = engine::plan_fusion(g);
      const engine::FusedKernel* k = kernel_of(g, plan, "drop");
      ASSERT_NE(k, nullptr) << engine::print_plan(g, plan);
      EXPECT_EQ(k, kernel_of(g, plan, "relu"));
      EXPECT_EQ(k, kernel_of(g, plan, "mul"));
      expect_fused_equals_interpreter(g, runtime::random_bindings(g, 17));
    }
  }
}

// Over 2^20 elements: several threads' chunks, each starting at its own flat index; and the
// fraction kept is 1 - p (1.06M draws: the fraction's standard deviation is under 0.0005).
TEST(FusedDropout, LargeTensorKeepsAFractionOneMinusP) {
  const Shape s = {1025, 1031};
  const ir::Graph g = chain(DType::f32, s, 0.3, 11, 0);
  runtime::Bindings vars = runtime::random_bindings(g, 5);
  for (const char* name : {"x", "w"}) {
    Tensor ones(TensorType{DType::f32, s});
    for (int64_t i = 0; i < ones.size(); ++i) ones.set_f64(i, 1);
    vars[name] = ones;
  }
  const Tensor y = expect_fused_equals_interpreter(g, vars).at(0);
  int64_t kept = 0;
  for (int64_t i = 0; i < y.size(); ++i) kept += y.get_f64(i) != 0;
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(y.size()), 0.7, 0.003);
}

TEST(FusedDropout, MaskIsAFunctionOfSeedAndOffset) {
  const Shape s = {33, 65};
  const auto run = [&](uint64_t seed, uint64_t offset) {
    const ir::Graph g = chain(DType::f32, s, 0.5, seed, offset);
    return runtime::to_f64_vector(engine::Executable::compile(g).run(runtime::random_bindings(g, 1))[0]);
  };
  const std::vector<double> a = run(7, 3);
  EXPECT_EQ(run(7, 3), a);
  EXPECT_NE(run(7, 4), a);
  EXPECT_NE(run(8, 3), a);
}

TEST(FusedDropout, PZeroKeepsEverythingAndPOneDropsEverything) {
  const Shape s = {5, 13};
  const ir::Graph keep_all = chain(DType::f32, s, 0.0);
  const runtime::Bindings vars = runtime::random_bindings(keep_all, 2);
  ir::GraphBuilder b;  // relu(x) * w without the dropout
  b.output(b.op("elemwise_mul", {b.op("relu", {b.input("x", {DType::f32, s})}), b.param("w", TensorType{DType::f32, s})}));
  EXPECT_TRUE(same_bytes(expect_fused_equals_interpreter(keep_all, vars).at(0), runtime::interpret(b.finish(), vars)[0]));
  const ir::Graph drop_all = chain(DType::f32, s, 1.0);
  for (double v : runtime::to_f64_vector(expect_fused_equals_interpreter(drop_all, vars).at(0))) EXPECT_EQ(v, 0.0);
}

// A kernel may compute a node at a permutation of its iteration index; the element index
// must stay the node's own row-major index.
TEST(FusedDropout, PermutedKernelsKeepEachElementsIndex) {
  const Shape s = {6, 97};
  {  // The dropout before a transpose: computed in row-major order, stored transposed.
    ir::GraphBuilder b;
    const ir::ValueRef drop = b.op("_Dropout_train", {b.op("relu", {b.input("x", {DType::f32, s})}, {}, "relu")},
                                   dropout_attrs(0.5, 1, 0), "drop");
    b.output(b.op("transpose", {drop}, {}, "t"));
    const ir::Graph g = b.finish();
    const engine::Plan plan = engine::plan_fusion(g);
    EXPECT_NE(kernel_of(g, plan, "drop"), nullptr);
    EXPECT_EQ(kernel_of(g, plan, "drop"), kernel_of(g, plan, "t"));
    expect_fused_equals_interpreter(g, runtime::random_bindings(g, 4));
  }
  {  // After a transpose: the relu's kernel runs in the other order, so the dropout does
     // not join it, and starts a kernel in its own order.
    ir::GraphBuilder b;
    const ir::ValueRef t = b.op("transpose", {b.op("relu", {b.input("x", {DType::f32, s})}, {}, "relu")}, {}, "t");
    b.output(b.op("_Dropout_train", {t}, dropout_attrs(0.5, 1, 0), "drop"));
    const ir::Graph g = b.finish();
    const engine::Plan plan = engine::plan_fusion(g);
    ASSERT_NE(kernel_of(g, plan, "drop"), nullptr);
    EXPECT_NE(kernel_of(g, plan, "drop"), kernel_of(g, plan, "relu"));
    expect_fused_equals_interpreter(g, runtime::random_bindings(g, 4));
  }
  {  // A transpose that only moves an extent-1 dim keeps row-major order: one kernel.
    ir::GraphBuilder b;
    const ir::ValueRef t = b.op("transpose", {b.op("relu", {b.input("x", {DType::f32, {1, 97}})}, {}, "relu")}, {}, "t");
    b.output(b.op("_Dropout_train", {t}, dropout_attrs(0.5, 1, 0), "drop"));
    const ir::Graph g = b.finish();
    const engine::Plan plan = engine::plan_fusion(g);
    EXPECT_EQ(kernel_of(g, plan, "drop"), kernel_of(g, plan, "relu"));
    expect_fused_equals_interpreter(g, runtime::random_bindings(g, 4));
  }
  const ir::AccessMap swap{{1, 0}, {1, 1}, {0, 0}};
  EXPECT_TRUE(engine::keeps_row_major_order(ir::AccessMap::identity(2), {6, 97}));
  EXPECT_FALSE(engine::keeps_row_major_order(swap, {6, 97}));
  EXPECT_TRUE(engine::keeps_row_major_order(swap, {1, 97}));
}

// With axes the mask index is not the output's row-major index: the node stays external,
// on its reference kernel.
TEST(FusedDropout, VariationalDropoutRunsExternally) {
  ir::GraphBuilder b;
  auto attrs = dropout_attrs(0.5, 1, 0);
  attrs["axes"] = "(1,)";
  b.output(b.op("_Dropout_train", {b.op("relu", {b.input("x", {DType::f32, {4, 6, 5}})}, {}, "relu")}, attrs, "drop"));
  const ir::Graph g = b.finish();
  EXPECT_EQ(engine::fusion_role(g.nodes[node_named(g, "drop")]), engine::FusionRole::external);
  EXPECT_EQ(kernel_of(g, engine::plan_fusion(g), "drop"), nullptr);
  expect_fused_equals_interpreter(g, runtime::random_bindings(g, 4));
}

// The gradient is _Dropout_train of the head gradient (the same mask): it fuses too.
TEST(FusedDropout, BackwardFusesAndEqualsTheInterpreter) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(ir::dtype_name(dtype));
    const engine::BackwardGraph bg = engine::build_backward(chain(dtype, {9, 31}), {.wrt = {}, .with_inputs = true});
    const engine::Plan plan = engine::plan_fusion(bg.graph);
    int dropouts = 0;
    for (int32_t n = 0; n < static_cast<int32_t>(bg.graph.nodes.size()); ++n) {
      if (bg.graph.nodes[n].op != "_Dropout_train") continue;
      ++dropouts;
      EXPECT_NE(kernel_of(bg.graph, plan, bg.graph.nodes[n].name), nullptr) << bg.graph.nodes[n].name;
    }
    EXPECT_EQ(dropouts, 2);  // forward and backward
    expect_fused_equals_interpreter(bg.graph, runtime::random_bindings(bg.graph, 8));
  }
}

TEST(FusedDropout, RandomBitsHaveNoDerivative) {
  ir::ScalarBuilder b(1);
  const auto bits = b.philox_bits24(1, 2);
  EXPECT_FALSE(ir::scalar_tangent(b, bits, bits, 0));
  // The recipe's derivative in x is the mask alone.
  const ir::OpDef& def = ir::OpRegistry::global().get("_Dropout_train");
  ir::Attrs attrs = ir::complete_attrs(def, {});
  ir::ScalarBuilder r(1);
  const ir::ScalarBuilder::Val y = def.recipe(r, attrs).at(0);
  EXPECT_TRUE(ir::scalar_tangent(r, 0, y, 0));
  EXPECT_TRUE(ir::uses_element_index(r.finish({y})));
  ir::ScalarBuilder plain(1);
  EXPECT_FALSE(ir::uses_element_index(plain.finish({plain.input(0)})));
}

}  // namespace
}  // namespace ampfuse
