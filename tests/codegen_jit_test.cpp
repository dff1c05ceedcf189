// The runtime side of generated code: the ORC JIT, the thread pool and the kernel cache.
#include "codegen/llvm_emitter.h"
#include "codegen_test_util.h"
#include "runtime/jit.h"
#include "runtime/memory_maps.h"
#include "runtime/thread_pool.h"
#include "test_util.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

namespace ampfuse::testing {
namespace {

ir::ScalarProgram affine_body(double scale, double shift) {
  ScalarBuilder b(1);
  return b.finish({b.add(b.mul(b.input(0), b.constant(scale)), b.constant(shift))});
}

// Calls a compiled kernel directly on f32 data, bypassing the launcher.
std::vector<float> call(codegen::KernelFn fn, std::vector<float> x) {
  std::vector<float> y(x.size());
  void* data[] = {x.data(), y.data()};
  const int64_t shape[] = {static_cast<int64_t>(x.size())}, strides[] = {1, 1};
  const codegen::KernelArgs args{data, shape, strides, nullptr, nullptr, 0};
  fn(0, static_cast<int64_t>(x.size()), &args);
  return y;
}

TEST(Jit, CompilesAModuleToCallableCode) {
  const KernelSpec spec = dense_spec("affine", affine_body(2, 1), {DType::f32}, {DType::f32}, {3});
  const int64_t before = runtime::Jit::global().modules();
  const runtime::JitCode code = runtime::Jit::global().compile(codegen::build_kernel_module(spec, "jit_test_affine"));
  EXPECT_EQ(call(reinterpret_cast<codegen::KernelFn>(code.address), {1, 2, -3}), (std::vector<float>{3, 5, -5}));
  EXPECT_EQ(runtime::Jit::global().modules(), before + 1);
}

TEST(Jit, ResolvesTheCLibraryForF64Functions) {
  ScalarBuilder b(1);
  const KernelSpec spec = dense_spec("exp64", b.finish({b.unary(ScalarOp::exp, b.input(0))}), {DType::f64},
                                     {DType::f64}, {3});
  const runtime::JitCode code = runtime::Jit::global().compile(codegen::build_kernel_module(spec, "jit_test_exp64"));
  auto fn = reinterpret_cast<codegen::KernelFn>(code.address);
  double x[] = {0.5, -3.25, 700.0}, y[3] = {};
  void* data[] = {x, y};
  const int64_t shape[] = {3}, strides[] = {1, 1};
  const codegen::KernelArgs args{data, shape, strides, nullptr, nullptr, 0};
  fn(0, 3, &args);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], std::exp(x[i])) << x[i];
}

TEST(Jit, MissingSymbolIsAnError) {
  const KernelSpec spec = dense_spec("affine", affine_body(1, 0), {DType::f32}, {DType::f32}, {3});
  codegen::LlvmModule m = codegen::build_kernel_module(spec, "jit_test_present");
  m.symbol = "jit_test_absent";
  EXPECT_ERROR(runtime::Jit::global().compile(std::move(m)), "jit_test_absent");
}

TEST(Jit, CompilesFromSeveralThreadsAtOnce) {
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &results] {
      const KernelSpec spec = dense_spec("affine", affine_body(t, 0.5), {DType::f32}, {DType::f32}, {2});
      const runtime::JitCode code =
          runtime::Jit::global().compile(codegen::build_kernel_module(spec, fmt::format("jit_test_thread{}", t)));
      results[t] = call(reinterpret_cast<codegen::KernelFn>(code.address), {1, 2});
    });
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(results[t], (std::vector<float>{t + 0.5f, 2 * t + 0.5f})) << t;
}

// Code is owned: the JIT removes an object (unmapping its memory) once nothing holds it, at
// its next load, so that a process loading ever new kernels keeps a bounded number of maps.
TEST(Jit, CodeLeavesTheProcessAfterItsLastOwner) {
  runtime::Jit& jit = runtime::Jit::global();
  const KernelSpec spec = dense_spec("affine", affine_body(3, 1), {DType::f32}, {DType::f32}, {3});
  const std::string object = jit.emit_object(codegen::build_kernel_module(spec, "jit_test_owned"));
  const int64_t objects_before = jit.loaded_objects();
  const int64_t maps_before = runtime::process_map_count();
  for (int i = 0; i < 1000; ++i) {
    const runtime::JitCode code = jit.load_object(object, "jit_test_owned");
    ASSERT_EQ(call(reinterpret_cast<codegen::KernelFn>(code.address), {1}), std::vector<float>{4}) << i;
  }
  EXPECT_LE(jit.loaded_objects(), objects_before + 1) << "the last one is removed at the next load";
  EXPECT_LT(runtime::process_map_count(), maps_before + 20);
  // Held, they stay: about two maps each (code and constants).
  std::vector<runtime::JitCode> held;
  for (int i = 0; i < 200; ++i) held.push_back(jit.load_object(object, "jit_test_owned"));
  EXPECT_EQ(jit.loaded_objects(), objects_before + 200);
  EXPECT_GE(runtime::process_map_count(), maps_before + 100);
  for (const runtime::JitCode& code : held)
    ASSERT_EQ(call(reinterpret_cast<codegen::KernelFn>(code.address), {2}), std::vector<float>{7});
  held.clear();
  const runtime::JitCode last = jit.load_object(object, "jit_test_owned");
  EXPECT_EQ(jit.loaded_objects(), objects_before + 1);
  EXPECT_LT(runtime::process_map_count(), maps_before + 20);
}

TEST(JitThreadPool, CoversTheRangeExactlyOnceInAlignedChunks) {
  runtime::ThreadPool pool(4);
  for (int64_t n : {int64_t{1}, int64_t{63}, int64_t{1000}, int64_t{100003}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::mutex m;
    std::vector<std::pair<int64_t, int64_t>> chunks;
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
          std::lock_guard lock(m);
          chunks.emplace_back(begin, end);
        },
        16, 64);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n = " << n << ", element " << i;
    EXPECT_LE(chunks.size(), 4u);
    for (auto [begin, end] : chunks) EXPECT_EQ(begin % 64, 0) << "n = " << n;
  }
}

TEST(JitThreadPool, UsesEveryThreadForLargeRanges) {
  runtime::ThreadPool pool(3);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.parallel_for(3000, [&](int64_t, int64_t) {
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id())) << "the caller runs a chunk itself";
}

TEST(JitThreadPool, SmallRangesRunInlineAndEmptyOnesNotAtAll) {
  runtime::ThreadPool pool(4);
  std::vector<std::pair<int64_t, int64_t>> calls;
  std::thread::id where;
  pool.parallel_for(
      500,
      [&](int64_t b, int64_t e) {
        calls.emplace_back(b, e);
        where = std::this_thread::get_id();
      },
      1000);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], (std::pair<int64_t, int64_t>{0, 500}));
  EXPECT_EQ(where, std::this_thread::get_id());
  pool.parallel_for(0, [&](int64_t, int64_t) { ADD_FAILURE() << "called for an empty range"; });
}

// Kernels run on OpenMP's threads, the ones oneDNN runs on (runtime/thread_pool.h).
TEST(JitThreadPool, RunsOnOpenMpThreads) {
  runtime::ThreadPool pool(2);
  std::mutex m;
  std::set<int> team_sizes;
  pool.parallel_for(100000, [&](int64_t, int64_t) {
    std::lock_guard lock(m);
    team_sizes.insert(omp_get_num_threads());
  }, 1000);
  EXPECT_EQ(team_sizes, std::set<int>{2});
  EXPECT_FALSE(omp_in_parallel());
}

TEST(JitThreadPool, NestedCallsRunInline) {
  runtime::ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) {
    pool.parallel_for(e - b, [&](int64_t ib, int64_t ie) { total += ie - ib; });
  });
  EXPECT_EQ(total.load(), 1000);
}

TEST(JitThreadPool, RethrowsAChunkExceptionAndStaysUsable) {
  runtime::ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(1000,
                                 [](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> total{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 1000);
}

TEST(JitThreadPool, CallersFromSeveralThreadsAtOnceEachGetTheirRange) {
  runtime::ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t)
    callers.emplace_back([&] {
      for (int r = 0; r < 50; ++r) pool.parallel_for(1000, [&](int64_t b, int64_t e) { total += e - b; });
    });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 3 * 50 * 1000);
}

TEST(KernelCache, NewSizesDoNotCompile) {
  runtime::KernelCache cache;
  for (const Shape& shape : std::vector<Shape>{{2, 3}, {64, 100}, {7, 1000}}) {
    const KernelSpec spec = dense_spec("affine", affine_body(2, 1), {DType::bf16}, {DType::f32}, shape);
    const Tensor x = random_tensor(DType::bf16, shape, 1);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x}).outputs[0], run_reference(spec, {&x})[0]));
  }
  const runtime::KernelCacheStats s = cache.stats();
  EXPECT_EQ(s.compilations, 1);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.failures, 0);
  EXPECT_GT(s.compile_seconds, 0.0);
}

TEST(KernelCache, NewStructureCompiles) {
  runtime::KernelCache cache;
  const auto a = cache.get(dense_spec("a", affine_body(2, 1), {DType::f32}, {DType::f32}, {8}));
  const auto b = cache.get(dense_spec("b", affine_body(2, 1), {DType::f16}, {DType::f32}, {8}));
  const auto c = cache.get(dense_spec("c", affine_body(3, 1), {DType::f32}, {DType::f32}, {8}));
  EXPECT_EQ(cache.stats().compilations, 3);
  EXPECT_NE(a->fn, b->fn);
  EXPECT_NE(a->key, c->key);
  EXPECT_EQ(cache.get(dense_spec("a2", affine_body(2, 1), {DType::f32}, {DType::f32}, {9}))->fn, a->fn);
}

TEST(KernelCache, ConcurrentRequestsCompileOnce) {
  runtime::KernelCache cache;
  const KernelSpec spec = dense_spec("shared", affine_body(5, 2), {DType::f32}, {DType::f32}, {16});
  std::vector<codegen::KernelFn> fns(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { fns[t] = cache.get(spec)->fn; });
  for (std::thread& t : threads) t.join();
  for (codegen::KernelFn fn : fns) EXPECT_EQ(fn, fns[0]);
  EXPECT_EQ(cache.stats().compilations, 1);
  EXPECT_EQ(cache.stats().hits, 7);
}

TEST(KernelCache, HitCostsMicroseconds) {
  runtime::KernelCache cache;
  // A realistic fused kernel: the C8 chain over [N,C,H,W] with a broadcast bias.
  ScalarBuilder b(3);
  const auto a = b.input(0);
  const auto d = b.add(b.mul(a, b.input(1)), b.constant(0.5));
  const auto g = b.sub(b.mul(b.max(d, b.constant(0)), b.constant(1.5)), b.add(a, b.input(2)));
  KernelSpec spec =
      dense_spec("c8", b.finish({g}), {DType::bf16, DType::bf16, DType::f32}, {DType::bf16}, {8, 64, 28, 28});
  spec.inputs[2].strides = {0, 1, 0, 0};
  cache.get(spec);
  constexpr int kLookups = 2000;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kLookups; ++i) cache.get(spec);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  // Typically 2-5 us; the bound leaves room for sanitizers and a loaded machine.
  EXPECT_LT(us / kLookups, 200.0);
  EXPECT_EQ(cache.stats().compilations, 1);
  EXPECT_EQ(cache.stats().hits, kLookups);
}

// A failed compile is not remembered as permanent (the failure may be passing: memory, a
// full disk): the next request compiles again.
TEST(KernelCache, AFailedCompileIsTriedAgainByTheNextRequest) {
  int attempts = 0;
  runtime::KernelCache cache([&](const KernelSpec& spec, std::string key) {
    if (++attempts == 1) fail("out of memory (simulated)");
    return runtime::jit_compile(spec, std::move(key));
  });
  const KernelSpec spec = dense_spec("flaky", affine_body(2, 1), {DType::f32}, {DType::f32}, {8});
  EXPECT_ERROR(cache.get(spec), "kernel 'flaky': compilation failed: out of memory (simulated)");
  bool compiled_now = false;
  const auto kernel = cache.get(spec, &compiled_now);
  EXPECT_TRUE(compiled_now);
  EXPECT_NE(kernel->fn, nullptr);
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(cache.stats().failures, 1);
  EXPECT_EQ(cache.stats().compilations, 1);
  EXPECT_EQ(cache.get(spec)->fn, kernel->fn);
  EXPECT_EQ(attempts, 2) << "a success is cached";
}

TEST(KernelCache, InvalidSpecIsAnErrorAndNotACompile) {
  runtime::KernelCache cache;
  KernelSpec spec = dense_spec("broken", affine_body(1, 0), {DType::f32}, {DType::f32}, {4});
  spec.inputs[0].strides = {1, 1};
  EXPECT_ERROR(cache.get(spec), "kernel 'broken': input 0 'in0' has 2 strides for rank 1");
  EXPECT_EQ(cache.stats().compilations, 0);
  EXPECT_EQ(cache.stats().failures, 0);
}

runtime::KernelCache::Compiler jit_without_disk() {
  return [](const KernelSpec& spec, std::string key) { return runtime::jit_compile(spec, std::move(key)); };
}

TEST(KernelCache, KeepsTheMostRecentlyUsedUpToItsCapacity) {
  runtime::KernelCache cache(jit_without_disk(), 2);
  const KernelSpec a = dense_spec("a", affine_body(2, 1), {DType::f32}, {DType::f32}, {4});
  const KernelSpec b = dense_spec("b", affine_body(3, 1), {DType::f32}, {DType::f32}, {4});
  const KernelSpec c = dense_spec("c", affine_body(4, 1), {DType::f32}, {DType::f32}, {4});
  cache.get(a);
  const auto b_kernel = cache.get(b);
  cache.get(a);  // a is now the most recently used: c pushes b out
  cache.get(c);
  EXPECT_EQ(cache.size(), 2);
  EXPECT_EQ(cache.stats().evictions, 1);
  bool compiled_now = true;
  cache.get(a, &compiled_now);
  EXPECT_FALSE(compiled_now);
  cache.get(b, &compiled_now);
  EXPECT_TRUE(compiled_now) << "b was let go of";
  EXPECT_EQ(cache.stats().compilations, 4);
  EXPECT_EQ(cache.stats().evictions, 2);  // c, the least recently used then
  // An evicted kernel that a caller still holds keeps its code, through later loads.
  cache.get(c);
  EXPECT_EQ(call(b_kernel->fn, {1, 2}), (std::vector<float>{4, 7}));
}

// Threads asking a cache smaller than their kernels: evictions, removals of released code and
// loads race, and every call still runs the right kernel (the TSan build runs this).
TEST(KernelCache, ThreadsThroughASmallCacheRunTheRightKernels) {
  runtime::KernelCache cache(jit_without_disk(), 2);
  constexpr int kThreads = 4, kKernels = 6, kRounds = 12;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int k = (t + r) % kKernels;
        const auto kernel = cache.get(dense_spec("k", affine_body(k + 10, 0), {DType::f32}, {DType::f32}, {2}));
        if (call(kernel->fn, {1, 2}) != std::vector<float>{k + 10.0f, 2 * (k + 10.0f)}) ++wrong;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cache.size(), 2);
  EXPECT_GT(cache.stats().evictions, 0);
}

TEST(KernelCache, EvictedKernelsLeaveTheProcess) {
  runtime::Jit& jit = runtime::Jit::global();
  runtime::KernelCache cache(jit_without_disk(), 3);
  const int64_t before = jit.loaded_objects();
  for (int i = 0; i < 30; ++i) {
    const auto kernel = cache.get(dense_spec("k", affine_body(i + 2, 1), {DType::f32}, {DType::f32}, {2}));
    ASSERT_EQ(call(kernel->fn, {1, 0}), (std::vector<float>{i + 3.0f, 1})) << i;
  }
  EXPECT_EQ(cache.stats().evictions, 27);
  // The cache's 3, and the one let go of by the last compile (removed at the next load).
  EXPECT_LE(jit.loaded_objects(), before + 4);
}

}  // namespace
}  // namespace ampfuse::testing
