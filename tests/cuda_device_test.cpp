// The CUDA backend on a GPU: every case of cuda_test_specs.h and every kernel of the
// differential fuzzer's graphs run on device 0 against the reference evaluator
// (runtime::eval_scalar_program), bit for bit for exact ops and within
// codegen::kCudaTranscendentalUlp otherwise, flags included; then whole plans through the
// device executor (engine/execution/executor.h): the checks of tests/executor_checks.h
// that tests/device_executor_test.cpp runs on the emulated device. Without a driver or a
// device each test skips with the driver's reason.
#include "codegen/cuda_emitter.h"
#include "cuda_test_specs.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/kernel_lowering.h"
#include "fuzz/random_graph.h"
#include "engine/execution/executor.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/device_api.h"
#include "tests/executor_checks.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace ampfuse::testing {
namespace {

namespace cu = runtime::cuda;

#define REQUIRE_GPU()                                         \
  do {                                                        \
    const std::string why_ = cu::cuda_available();            \
    if (!why_.empty()) GTEST_SKIP() << why_;                   \
  } while (0)

::testing::AssertionResult check_on_gpu(const KernelSpec& spec, const std::vector<double>& params, bool exact,
                                        uint64_t seed) {
  return check_kernel(spec, params, exact, seed, [](const KernelSpec& sp, std::span<const void* const> in,
                                                    std::span<void* const> out, std::span<const double> p,
                                                    std::span<int32_t> flags) {
    cu::run_cuda_kernel(sp, in, out, p, flags);
  });
}

TEST(CudaDevice, ReportsTheDevice) {
  REQUIRE_GPU();
  const cu::DeviceProperties& p = cu::cuda_device();
  std::printf("  %s: sm_%d, %d SMs, %d threads/SM, peak %.0f GB/s (memory clock x bus width)\n", p.name.c_str(),
              p.arch, p.multiprocessors, p.max_threads_per_multiprocessor, p.peak_bandwidth_gbs());
  EXPECT_GE(p.arch, 50);
  EXPECT_GT(p.multiprocessors, 0);
}

TEST(CudaDevice, CasesMatchTheReference) {
  REQUIRE_GPU();
  for (const auto& [name, c] : cuda_cases()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(check_on_gpu(c.spec, c.params, c.exact, 1));
  }
}

// Odd sizes around the vector width, misaligned bases (slices) and a grid smaller than the
// work: the packed loop, the alignment fallback and the tail.
TEST(CudaDevice, TailsAndMisalignedPointers) {
  REQUIRE_GPU();
  const CudaCase base = cuda_cases().at("lowp");
  for (int64_t n : {1, 7, 8, 9, 15, 17, 1023, 65537}) {
    KernelSpec spec = base.spec;
    spec.shape = {n};
    EXPECT_TRUE(check_on_gpu(spec, {}, true, static_cast<uint64_t>(n))) << n;
  }
  // Offsetting a pointer by one element (what a slice does) must take the scalar path.
  KernelSpec spec = base.spec;
  spec.shape = {1001};
  const auto kernel = cu::cuda_kernel(spec);
  std::vector<uint16_t> a(1002, 0x3C00), b(1002, 0x3F80), o0(1002, 0), o1(1002, 0);  // 1.0 in f16 and bf16
  cu::DeviceBuffer da(2004), db(2004), d0(2004), d1(2004);
  da.upload(a.data(), 2004);
  db.upload(b.data(), 2004);
  d0.zero();
  d1.zero();
  const std::vector<uint64_t> ptrs = {da.ptr() + 2, db.ptr() + 2, d0.ptr() + 2, d1.ptr() + 2};
  cu::launch_cuda_kernel(*kernel, spec, ptrs);
  cu::cuda_synchronize();
  d0.download(o0.data(), 2004);
  d1.download(o1.data(), 2004);
  EXPECT_EQ(o0[0], 0);
  EXPECT_EQ(o1[0], 0);
  for (int i = 1; i <= 1001; ++i) {
    ASSERT_EQ(o0[i], 0x4000) << i;  // 1 + 1 = 2.0 in f16
    ASSERT_EQ(o1[i], 0x4040) << i;  // 2.0 * 1.5 = 3.0 in bf16
  }
}

// The flag is set only by a block that saw a non-finite value and is never cleared.
TEST(CudaDevice, FlagIsSetOnlyWhenSomethingIsNonFinite) {
  REQUIRE_GPU();
  KernelSpec spec = cuda_cases().at("flags").spec;
  spec.shape = {1 << 20};
  std::vector<float> x(1 << 20, 1.0f);
  std::vector<uint16_t> y(1 << 20);
  std::vector<int32_t> flags = {0};
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  cu::run_cuda_kernel(spec, in, out, {}, flags);
  EXPECT_EQ(flags[0], 0);
  x[777777] = 70.0f;  // 70000 overflows f16
  cu::run_cuda_kernel(spec, in, out, {}, flags);
  EXPECT_EQ(flags[0], 1);
  EXPECT_EQ(y[777777], 0x7C00);
}

uint64_t fuzz_graphs() {
  if (const char* env = std::getenv("AMPFUSE_FUZZ_GRAPHS")) return std::strtoull(env, nullptr, 10) * 4;
  return 2000;
}

// The differential fuzzer's graphs, kernel by kernel, on the GPU: all distinct kernels are
// compiled first in one NVRTC program.
TEST(CudaDevice, FuzzerKernelsMatchTheReference) {
  REQUIRE_GPU();
  struct Item {
    KernelSpec spec;
    bool exact;
    uint64_t seed;
  };
  std::vector<Item> items;
  int fallbacks = 0;
  std::vector<KernelSpec> specs;
  for (uint64_t seed = 1; seed <= fuzz_graphs(); ++seed) {
    const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
    for (const engine::PlanStep& step : engine::plan_fusion(rg.graph).steps)
      if (const auto* k = std::get_if<engine::FusedKernel>(&step)) {
        if (ir::num_elements(k->iteration) == 0) continue;
      engine::LoweredKernel lk;
      try {
        lk = engine::lower_kernel(rg.graph, *k, fmt::format("seed{}", seed), seed % 2 == 1);
      } catch (const Error& e) {
        ++fallbacks;  // the executor runs these nodes on the interpreter
        continue;
      }
        if (lk.spec.outputs.empty() && lk.spec.flags.empty()) continue;  // nothing to compute
        specs.push_back(lk.spec);
        items.push_back({std::move(lk.spec), !rg.transcendental, seed});
      }
  }
  cu::cuda_precompile(specs);
  int failures = 0;
  for (const Item& it : items) {
    if (it.spec.num_elements() == 0) continue;
    const std::vector<double> params(static_cast<size_t>(it.spec.num_params), 0.75);
    const auto r = check_on_gpu(it.spec, params, it.exact, it.seed);
    if (!r && ++failures <= 3) ADD_FAILURE() << "seed " << it.seed << ": " << r.message();
  }
  EXPECT_EQ(failures, 0) << "of " << items.size() << " kernels";
  std::printf("  %zu kernels checked on the GPU, %d not lowerable (interpreter fallback)\n", items.size(), fallbacks);
}


// Whole plans on the GPU (engine/execution/executor.h): views, slices, broadcasts, host round
// trips, variables as outputs, empty tensors, a kernel left to the host.
TEST(CudaDevice, ExecutorRunsTheSmallGraphs) {
  REQUIRE_GPU();
  const std::unique_ptr<runtime::DeviceApi> gpu = runtime::cuda_device_api();
  for (const device::NamedGraph& ng : device::device_graphs()) {
    SCOPED_TRACE(ng.name);
    EXPECT_TRUE(device::device_matches_interpreter(ng.graph, *gpu, 1, {}, ng.exact, {.strict = !ng.falls_back}));
    EXPECT_TRUE(device::device_matches_interpreter(ng.graph, *gpu, 2, {}, ng.exact, {.fuse = false, .strict = !ng.falls_back}));
  }
}

TEST(CudaDevice, ExecutorRunsTheDefaultModel) {
  REQUIRE_GPU();
  const std::unique_ptr<runtime::DeviceApi> gpu = runtime::cuda_device_api();
  const ir::Graph g = models::build_default_model(8);
  engine::ExecutorOptions opts;
  opts.device = gpu.get();
  opts.check_nonfinite = true;
  const engine::Executable exe = engine::Executable::compile(g, opts);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty()) << exe.compile_stats().fallbacks[0];
  const runtime::Bindings vars = runtime::random_bindings(g, 3);
  engine::RunStats rs;
  const std::vector<runtime::Tensor> got = exe.run(vars, &rs);
  EXPECT_FALSE(rs.nonfinite);
  // GELU's erf is CUDA's here and LLVM's vector math on the CPU.
  EXPECT_TRUE(device::same_outputs(engine::Executable::compile(g).run(vars), got, {.of_largest = 1e-5}));
  EXPECT_TRUE(device::same_outputs(got, exe.run(vars))) << "a second run, over reused buffers";
  std::printf("  default model: %zu kernels on the GPU, %d ops on the host, %d round trips, %.3f ms a run\n",
              exe.kernel_specs().size(), exe.compile_stats().external_ops,
              exe.compile_stats().host_round_trips, rs.seconds * 1e3);
}

TEST(CudaDevice, ExecutorNonfiniteFlag) {
  REQUIRE_GPU();
  const std::unique_ptr<runtime::DeviceApi> gpu = runtime::cuda_device_api();
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {ir::DType::f32, {1 << 20}});
  b.output(b.op("amp_cast", {b.op("_mul_scalar", {x}, {{"scalar", "2"}})}, {{"dtype", "float16"}}));
  b.output(b.op("negative", {x}));
  const ir::Graph g = b.finish();
  engine::ExecutorOptions opts;
  opts.device = gpu.get();
  opts.check_nonfinite = true;
  opts.fuse = false;  // three kernels, three flags
  const engine::Executable exe = engine::Executable::compile(g, opts);
  runtime::Tensor t({ir::DType::f32, {1 << 20}});
  for (int64_t i = 0; i < t.size(); ++i) t.set_f64(i, 1.0 / static_cast<double>(1 + i % 1000));
  engine::RunStats rs;
  exe.run({{"x", t}}, &rs);
  EXPECT_FALSE(rs.nonfinite);
  t.set_f64(777777, 40000);  // 80000 overflows f16
  exe.run({{"x", t}}, &rs);
  EXPECT_TRUE(rs.nonfinite);
  t.set_f64(777777, 1);
  exe.run({{"x", t}}, &rs);
  EXPECT_FALSE(rs.nonfinite) << "the flags start at zero every run";
}

// The fuzzer's graphs through the device executor; their kernels are compiled first, all
// in one batch (as above), so that each graph's compile finds them cached.
TEST(CudaDevice, ExecutorRunsFuzzerGraphs) {
  REQUIRE_GPU();
  const uint64_t graphs = std::min<uint64_t>(200, fuzz_graphs());
  std::vector<KernelSpec> specs;
  for (uint64_t seed = 1; seed <= graphs; ++seed) {
    const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
    for (const engine::PlanStep& step : engine::plan_fusion(rg.graph).steps)
      if (const auto* k = std::get_if<engine::FusedKernel>(&step)) try {
          if (ir::num_elements(k->iteration) > 0) specs.push_back(engine::lower_kernel(rg.graph, *k, "k").spec);
        } catch (const Error&) {
        }
  }
  cu::cuda_precompile(specs);
  const std::unique_ptr<runtime::DeviceApi> gpu = runtime::cuda_device_api();
  const device::FuzzResult fr = device::fuzz_on_device(*gpu, 1, graphs, codegen::kCudaTranscendentalUlp + 3);
  EXPECT_EQ(fr.failures, 0) << "of " << fr.graphs << "; first: " << fr.first_failure;
  std::printf("  %d fuzzer graphs run by the device executor on the GPU\n", fr.graphs);
}

}  // namespace
}  // namespace ampfuse::testing
