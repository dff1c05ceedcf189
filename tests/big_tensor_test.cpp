// Kernels index with 64 bits: a fused bf16 kernel over 2^31 + 17 elements (4 GiB a tensor)
// computes its last elements, past every 32-bit index, right. It needs ~9 GiB, so it runs
// only from its own ctest entry `bigmem.fused_bf16` (label bigmem, run alone; `make bigmem`),
// which sets AMPFUSE_BIGMEM=1, and skips with a message on a machine with less than 16 GiB
// available (MemAvailable in /proc/meminfo). The entry gtest discovers skips, so the suite
// run stays small.
#include "codegen/kernel_spec.h"
#include "engine/execution/executor.h"
#include "ir/builder.h"
#include "ir/lowp.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace ampfuse::engine {
namespace {

using ir::DType;

constexpr int64_t kRows = 5, kCols = 429496733;  // 5 * 429496733 = 2^31 + 17
static_assert(kRows * kCols == (int64_t{1} << 31) + 17);
constexpr int64_t kNeededGiB = 16;

int64_t mem_available_gib() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (f >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib / (1024 * 1024);
  return 0;
}

// x's element i: a small integer, exact in bf16, whose pattern does not repeat with period
// 2^31 or 2^32 (2^31 mod 251 != 0), so a kernel reading element i mod 2^32 (or a sign-extended
// 32-bit offset) reads a different value.
float x_value(int64_t i) { return static_cast<float>(i % 251 - 125); }
float b_value(int64_t row) { return 0.5f * static_cast<float>(row); }

TEST(BigTensor, FusedBf16KernelPast2To31Elements) {
  if (!std::getenv("AMPFUSE_BIGMEM"))
    GTEST_SKIP() << "4 GiB tensors: run by the ctest entry bigmem.fused_bf16 (make bigmem)";
  if (const int64_t gib = mem_available_gib(); gib < kNeededGiB)
    GTEST_SKIP() << "needs " << kNeededGiB << " GiB available, this machine has " << gib << " GiB";

  // y = bf16(f32(x) * 2 + f32(b)), b broadcast along the rows: one kernel whose loop runs
  // over the broadcast's strides, so its offsets pass 2^31 (the wide-index path), and whose
  // flat element count does too.
  ir::GraphBuilder gb;
  const ir::ValueRef x = gb.input("x", {DType::bf16, {kRows, kCols}});
  const ir::ValueRef b = gb.input("b", {DType::bf16, {kRows, 1}});
  const ir::ValueRef xf = gb.op("Cast", {x}, {{"dtype", "float32"}});
  const ir::ValueRef x2 = gb.op("_mul_scalar", {xf}, {{"scalar", "2"}});
  const ir::ValueRef bf = gb.op("Cast", {b}, {{"dtype", "float32"}});
  const ir::ValueRef sum = gb.op("broadcast_add", {x2, bf});
  gb.output(gb.op("Cast", {sum}, {{"dtype", "bfloat16"}}));
  const ir::Graph g = gb.finish(true);

  const Executable exe = Executable::compile(g);
  ASSERT_TRUE(exe.compile_stats().fallbacks.empty());
  // b's cast may be a small kernel of its own; the big one holds everything else.
  int big = 0;
  for (const codegen::KernelSpec* spec : exe.kernel_specs()) {
    if (ir::num_elements(spec->shape) < kRows * kCols) continue;
    ++big;
    const codegen::KernelSignature sig = codegen::signature(*spec);
    EXPECT_TRUE(sig.flat() || sig.wide_index) << "a strided kernel over 2^31 + 17 elements must index with 64 bits";
  }
  EXPECT_EQ(big, 1);

  runtime::Tensor xt({DType::bf16, {kRows, kCols}});
  uint16_t* xd = xt.data<uint16_t>();
  for (int64_t i = 0; i < xt.size(); ++i) xd[i] = ir::f32_to_bf16_bits(x_value(i));
  runtime::Tensor bt({DType::bf16, {kRows, 1}});
  for (int64_t r = 0; r < kRows; ++r) bt.data<uint16_t>()[r] = ir::f32_to_bf16_bits(b_value(r));

  const std::vector<runtime::Tensor> out = exe.run({{"x", xt}, {"b", bt}});
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].size(), kRows * kCols);
  const uint16_t* yd = out[0].data<uint16_t>();
  auto expect_element = [&](int64_t i) {
    const float want = ir::round_to_bf16(x_value(i) * 2.0f + b_value(i / kCols));
    ASSERT_EQ(ir::bf16_bits_to_f32(yd[i]), want) << "element " << i << " (row " << i / kCols << ")";
  };
  const int64_t n = kRows * kCols;
  for (int64_t i = n - 1000; i < n; ++i) expect_element(i);  // the last elements
  for (int64_t i = (int64_t{1} << 31) - 100; i < n; ++i) expect_element(i);  // across 2^31 to the end
  for (int64_t i = 0; i < n; i += 1000003) expect_element(i);  // strided samples, every row
  for (int64_t r = 0; r < kRows; ++r) expect_element(r * kCols + kCols - 1);
}

}  // namespace
}  // namespace ampfuse::engine
