// compute_in_f32: external ops the backend computes in f32 get explicit casts, which change
// nothing a graph computes (bit for bit on the interpreter) and fuse into the kernels around
// them in the executor.
#include "engine/execution/executor.h"
#include "engine/passes/compute_in_f32.h"

#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "ir/verifier.h"
#include "runtime/interpreter.h"
#include "tests/filecheck.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ampfuse::testing {
namespace {

constexpr const char* kBf16Conv = R"(graph {
  %x = var input : f32[1,2,7,7]
  %w = var param : bf16[3,2,3,3]
  %b = var param : bf16[3]
  %xl = amp_cast(%x) {dtype=bf16}
  %conv = Convolution(%xl, %w, %b) {kernel=[3,3], num_filter=3}
  %r = relu(%conv)
  %y = amp_cast(%r) {dtype=f32}
  return %y, %conv
})";

ir::Graph parsed(const char* text) {
  ir::Graph g = ir::parse_graph(text);
  ir::infer_types(g);
  return g;
}

bool every_convolution(const ir::Graph& g, int32_t n) { return g.nodes[n].op == "Convolution"; }

void expect_bitwise_equal(const std::vector<runtime::Tensor>& a, const std::vector<runtime::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].type(), b[k].type()) << "output " << k;
    EXPECT_EQ(0, std::memcmp(a[k].raw(), b[k].raw(), a[k].bytes())) << "output " << k;
  }
}

TEST(ComputeInF32, CastsGoAroundTheNodeAndTheResultKeepsItsName) {
  ir::Graph g = parsed(kBf16Conv);
  EXPECT_EQ(engine::compute_in_f32(g, every_convolution), 1);
  ir::verify(g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %xl = amp_cast(%x) {{.*}} : bf16[1,2,7,7]
    CHECK-NEXT: %xl_f32 = amp_cast(%xl) {dtype=f32} : f32[1,2,7,7]
    CHECK-NEXT: %w_f32 = amp_cast(%w) {dtype=f32} : f32[3,2,3,3]
    CHECK-NEXT: %b_f32 = amp_cast(%b) {dtype=f32} : f32[3]
    CHECK-NEXT: %conv_f32 = Convolution(%xl_f32, %w_f32, %b_f32) {{.*}} : f32[1,3,5,5]
    CHECK-NEXT: %conv = amp_cast(%conv_f32) {dtype=bf16} : bf16[1,3,5,5]
    CHECK-NEXT: %r = relu(%conv) : bf16[1,3,5,5]
    CHECK: return %y, %conv)");
}

TEST(ComputeInF32, ValuesAreTheSameBitForBit) {
  const ir::Graph g = parsed(kBf16Conv);
  ir::Graph rewritten = g;
  ASSERT_EQ(engine::compute_in_f32(rewritten, every_convolution), 1);
  for (uint64_t seed : {1, 2, 3}) {
    const runtime::Bindings vars = runtime::random_bindings(g, seed);
    expect_bitwise_equal(runtime::interpret(g, vars), runtime::interpret(rewritten, vars));
  }
}

TEST(ComputeInF32, NodesTheBackendRunsNativelyAndF32NodesStay) {
  ir::Graph g = parsed(kBf16Conv);
  const std::string before = ir::print_graph(g);
  EXPECT_EQ(engine::compute_in_f32(g, [](const ir::Graph&, int32_t) { return false; }), 0);
  EXPECT_EQ(ir::print_graph(g), before);

  ir::Graph f32 = parsed(R"(graph {
    %x = var input : f32[1,2,7,7]
    %w = var param : f32[3,2,3,3]
    %conv = Convolution(%x, %w) {kernel=[3,3], num_filter=3, no_bias=true}
    return %conv
  })");
  EXPECT_EQ(engine::compute_in_f32(f32, every_convolution), 0);
}

// A value read by two rewritten nodes is widened once; multi-output nodes keep their outputs.
TEST(ComputeInF32, SharedInputIsWidenedOnce) {
  ir::Graph g = parsed(R"(graph {
    %x = var input : bf16[1,2,7,7]
    %w = var param : bf16[3,2,3,3]
    %a = Convolution(%x, %w) {kernel=[3,3], num_filter=3, no_bias=true}
    %b = Convolution(%x, %w) {kernel=[3,3], num_filter=3, no_bias=true, stride=[2,2]}
    return %a, %b
  })");
  EXPECT_EQ(engine::compute_in_f32(g, every_convolution), 2);
  ir::verify(g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %x_f32 = amp_cast(%x)
    CHECK-NEXT: %w_f32 = amp_cast(%w)
    CHECK-NEXT: %a_f32 = Convolution(%x_f32, %w_f32)
    CHECK-NEXT: %a = amp_cast(%a_f32) {dtype=bf16}
    CHECK-NEXT: %b_f32 = Convolution(%x_f32, %w_f32)
    CHECK-NOT: amp_cast(%x)
    CHECK: return %a, %b)");
}

// An attribute naming the output's type widens with it (the verifier re-infers types); one
// naming another type stays.
TEST(ComputeInF32, OutputDtypeAttributeWidensWithTheOutput) {
  ir::Graph g = parsed(R"(graph {
    %dy = var input : bf16[2,5]
    %y = var input : bf16[2,5]
    %dx = _backward_softmax(%dy, %y) {axis=-1, dtype=bf16}
    %dx32 = _backward_softmax(%dy, %y) {axis=-1, dtype=f32}
    return %dx, %dx32
  })");
  EXPECT_EQ(engine::compute_in_f32(g, [](const ir::Graph&, int32_t) { return true; }), 2);
  ir::verify(g);
  EXPECT_FILECHECK(ir::print_graph(g), R"(
    CHECK: %dx_f32 = _backward_softmax(%dy_f32, %y_f32) {axis=-1, dtype=f32{{.*}} : f32[2,5]
    CHECK-NEXT: %dx = amp_cast(%dx_f32) {dtype=bf16} : bf16[2,5]
    CHECK-NEXT: %dx32_f32 = _backward_softmax(%dy_f32, %y_f32) {axis=-1, dtype=f32{{.*}} : f32[2,5]
    CHECK: return %dx, %dx32)");
}

// In the executor the widening of x fuses into the kernel that makes it and the rounding
// into the relu's kernel; the weight casts are steps of their own.
TEST(ComputeInF32, ExecutorFusesTheCastsAndEqualsTheInterpreter) {
  const ir::Graph g = parsed(kBf16Conv);
  const engine::Executable exe = engine::Executable::compile(g);
  if (exe.compile_stats().widened_external == 0) GTEST_SKIP() << "oneDNN has native bf16 convolutions here";
  EXPECT_EQ(exe.compile_stats().widened_external, 1);
  EXPECT_EQ(exe.compile_stats().external_ops, 1);
  // amp_cast(x) -> bf16 -> f32 is one kernel; the rounding of the result, relu and the cast
  // to f32 another; w and b one each.
  EXPECT_EQ(exe.compile_stats().kernels, 4);
  const runtime::Bindings vars = runtime::random_bindings(g, 5);
  const std::vector<runtime::Tensor> want = runtime::interpret(g, vars), got = exe.run(vars);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].type(), got[k].type());
    for (int64_t i = 0; i < want[k].size(); ++i)  // oneDNN sums in another order: one bf16 step at most
      EXPECT_NEAR(want[k].get_f64(i), got[k].get_f64(i), std::abs(want[k].get_f64(i)) / 128 + 1e-6) << k << ":" << i;
  }
}

}  // namespace
}  // namespace ampfuse::testing
