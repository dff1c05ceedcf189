// The JIT's f32 -> bf16 and f32 -> f16 narrowing (codegen/dtype_lowering.cpp) over all 2^32
// f32 bit patterns, against ir/lowp.h's functions (which lowp_test.cpp checks against exact
// rounding): the interpreter and the fused kernels must store the same bits, NaN payloads
// included. One kernel, run on chunks of 2^26 consecutive patterns through the thread pool,
// for the process's JIT target (AMPFUSE_CPU).
#include "codegen/kernel_spec.h"
#include "codegen/llvm_target.h"
#include "ir/lowp.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ampfuse {
namespace {

constexpr int64_t kChunk = int64_t{1} << 26;

// fn(begin, end) over [0, n) on the runtime's thread pool, in chunks of at least 2^16.
void parallel(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  runtime::ThreadPool::global().parallel_for(n, fn, int64_t{1} << 16, 64);
}

// The mismatches of the JIT's narrowing to `out` over every f32 pattern and the first one.
void jit_narrowing_mismatches(ir::DType out, uint64_t* mismatches, uint32_t* first) {
  codegen::KernelSpec spec;
  spec.name = "narrow";
  spec.shape = {kChunk};
  spec.inputs.push_back({"x", ir::DType::f32, {1}});
  spec.outputs.push_back({"y", out, {1}});
  spec.compute = ir::DType::f32;
  ir::ScalarBuilder b(1);
  spec.body = b.finish({b.input(0)});
  runtime::KernelCache cache(nullptr);
  const std::shared_ptr<const runtime::CompiledKernel> kernel = cache.get(spec);
  auto in = std::make_unique_for_overwrite<uint32_t[]>(kChunk);
  // 64-byte aligned, then one element further on every other chunk: the kernel's streaming
  // loop (aligned outputs) and its plain loop each see half the patterns.
  std::unique_ptr<uint16_t[], decltype(&std::free)> buffer(
      static_cast<uint16_t*>(std::aligned_alloc(64, (kChunk + 32) * sizeof(uint16_t))), &std::free);
  ASSERT_TRUE(buffer) << "2^26 + 32 bf16";
  const auto reference = out == ir::DType::bf16 ? ir::f32_to_bf16_bits : ir::f32_to_f16_bits;
  std::atomic<uint64_t> bad{0};
  std::atomic<uint32_t> first_bad{0};
  for (int64_t base = 0; base < (int64_t{1} << 32); base += kChunk) {
    parallel(kChunk, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) in[i] = static_cast<uint32_t>(base + i);
    });
    uint16_t* got = buffer.get() + (base / kChunk) % 2;
    std::vector<void*> data = {in.get(), got};
    std::vector<int32_t> flags;
    runtime::run_kernel(*kernel, spec, data, {}, flags);
    parallel(kChunk, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        if (got[i] != reference(std::bit_cast<float>(in[i])) && bad.fetch_add(1) == 0) first_bad = in[i];
      }
    });
  }
  *first = first_bad.load();
  *mismatches = bad.load();
}

class ExhaustiveJit : public ::testing::TestWithParam<ir::DType> {};

TEST_P(ExhaustiveJit, F32NarrowingAllInputs) {
  uint64_t mismatches = 0;
  uint32_t first = 0;
  jit_narrowing_mismatches(GetParam(), &mismatches, &first);
  EXPECT_EQ(mismatches, 0u) << "first mismatch at f32 bits 0x" << std::hex << first << " ("
                            << codegen::jit_target().cpu << ")";
}

INSTANTIATE_TEST_SUITE_P(ToBf16AndF16, ExhaustiveJit, ::testing::Values(ir::DType::bf16, ir::DType::f16),
                         [](const ::testing::TestParamInfo<ir::DType>& p) { return std::string(ir::dtype_name(p.param)); });

}  // namespace
}  // namespace ampfuse
