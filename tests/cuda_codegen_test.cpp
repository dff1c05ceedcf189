// The CUDA backend without a GPU: the emitted source (FileCheck), NVRTC builds for sm_80 and
// sm_90, ptxas on the PTX (errors fail, spills are reported), cache keys, launch
// configuration, and the driver's message when there is no driver or device.
#include "codegen/cuda_emitter.h"
#include "cuda_test_specs.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/kernel_lowering.h"
#include "fuzz/random_graph.h"
#include "filecheck.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/cuda/nvrtc_compiler.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <thread>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_set>

namespace ampfuse::testing {
namespace {

namespace cu = runtime::cuda;

std::string source_of(const std::string& name) {
  const codegen::KernelSignature sig = codegen::signature(cuda_cases().at(name).spec);
  return codegen::emit_cuda_source(sig, name);
}


// ---------------------------------------------------------------------------------------
// The source.

TEST(CudaCodegen, FlatKernelUses128BitPacksAndAScalarTail) {
  EXPECT_FILECHECK(source_of("flat_f32"), R"(
    CHECK-LABEL: void flat_f32_element(const float a0, const float a1, const float p0, float& o2)
    CHECK: const float [[MUL:v[0-9]+]] = {{v[0-9]+}} * {{v[0-9]+}};  // mul
    CHECK: const float [[ADD:v[0-9]+]] = [[MUL]] + {{v[0-9]+}};  // add
    CHECK: const float [[MAX:v[0-9]+]] = ([[ADD]] > {{v[0-9]+}} ? [[ADD]] : ([[ADD]] != [[ADD]] ? [[ADD]] : {{v[0-9]+}}));  // max
    CHECK-NEXT: o2 = static_cast<float>([[MAX]]);
    CHECK-LABEL: extern "C" __global__ void __launch_bounds__(256) flat_f32(const long long count
    CHECK-SAME: const double param0)
    CHECK: const float p0 = static_cast<float>(param0);
    CHECK: typedef long long I;
    CHECK: if (af_aligned(op0, 16u) && af_aligned(op1, 16u) && af_aligned(op2, 16u)) {
    CHECK: for (I s = tid; s < steps; s += threads) {
    CHECK: const AfPack<float, 4> q0 = reinterpret_cast<const AfPack<float, 4>*>(op0)[s];
    CHECK: reinterpret_cast<AfPack<float, 4>*>(op2)[s] = q2;
    CHECK: start = steps * 4;
    CHECK: for (I i = start + tid; i < n; i += threads) {
    CHECK-NOT: flags
    CHECK: }
  )");
}

TEST(CudaCodegen, BroadcastsLoadOnceAndWalkStrides) {
  EXPECT_FILECHECK(source_of("broadcast"), R"(
    CHECK-LABEL: __global__
    CHECK-SAME: const long long e0, const long long e1)
    CHECK: typedef unsigned I;
    CHECK: const float a2 = op2[0];
    CHECK: typedef int O;
    CHECK: for (I i = tid; i < n; i += threads) {
    CHECK: O off1 = 0;
    CHECK-NOT: off1 += static_cast<O>(idx) * 
    CHECK: { const I idx = rem % static_cast<I>(e1); rem /= static_cast<I>(e1);
    CHECK-NEXT: off1 += static_cast<O>(idx);
    CHECK: broadcast_element(op0[i], op1[off1], a2, r3);
    CHECK: op3[i] = r3;
  )");
}

TEST(CudaCodegen, TransposesMultiplyByGeneralStrides) {
  EXPECT_FILECHECK(source_of("transpose"), R"(
    CHECK: o1 = af_f32_to_f16(v{{[0-9]+}});
    CHECK-LABEL: __global__
    CHECK-SAME: const long long s0_1, const long long s2_1)
    CHECK: off0 += static_cast<O>(idx) * static_cast<O>(s0_1);
    CHECK: off2 += static_cast<O>(idx) * static_cast<O>(s2_1);
    CHECK: off0 += static_cast<O>(idx);
    CHECK: op2[off2] = r2;
  )");
}

TEST(CudaCodegen, LowPrecisionConvertsInIntegerCode) {
  const std::string src = source_of("lowp");
  EXPECT_FILECHECK(src, R"(
    CHECK: unsigned short af_f32_to_bf16(float x) {
    CHECK: u += 0x7FFFu + ((u >> 16) & 1u);
    CHECK: unsigned short af_f32_to_f16(float x) {
    CHECK: const float sum = __fadd_rn(__uint_as_float(a), 0.5f);
    CHECK-LABEL: void lowp_element(const unsigned short a0, const unsigned short a1, unsigned short& o2, unsigned short& o3)
    CHECK: const float x0 = static_cast<float>(af_f16_to_f32(a0));
    CHECK: const float x1 = static_cast<float>(af_bf16_to_f32(a1));
    CHECK: static_cast<float>(af_bf16_to_f32(af_f32_to_bf16(v2)));  // round_to
    CHECK: o2 = af_f32_to_f16(v2);
    CHECK: o3 = af_f32_to_bf16(v5);
    CHECK: AfPack<unsigned short, 8>
  )");
  // No cuda_fp16 intrinsics: they are not all exact for subnormals on every architecture.
  EXPECT_EQ(src.find("__float2half"), std::string::npos);
  EXPECT_EQ(src.find("#include"), std::string::npos);
}

TEST(CudaCodegen, F64ComputeRoundsToOddBeforeHalfPrecision) {
  EXPECT_FILECHECK(source_of("f64_compute"), R"(
    CHECK: float af_f64_to_f32_odd(double d) {
    CHECK: __double2float_rz(d)
    CHECK-LABEL: void f64_compute_element(const unsigned short a0, const double p0, unsigned short& o1, unsigned short& o2, float& o3)
    CHECK: const double x0 = static_cast<double>(af_f16_to_f32(a0));
    CHECK-DAG: = sqrt(v{{[0-9]+}});  // sqrt
    CHECK-DAG: __longlong_as_double(0x3e10000000000000LL)
    CHECK: o1 = af_f32_to_f16(af_f64_to_f32_odd(v{{[0-9]+}}));
    CHECK-NEXT: o2 = af_f32_to_bf16(af_f64_to_f32_odd(v{{[0-9]+}}));
    CHECK-NEXT: o3 = static_cast<float>(v{{[0-9]+}});
    CHECK: AfPack<float, 4>
  )");
  EXPECT_FILECHECK(source_of("f64_compute"), "CHECK: const double p0 = static_cast<double>(param0);");
}

TEST(CudaCodegen, FlagsVotePerBlockWithoutAtomics) {
  const std::string src = source_of("flags");
  EXPECT_FILECHECK(src, R"(
    CHECK: void flags_element(const float a0, unsigned short& o1, bool& f0)
    CHECK: f0 = f0 | af_nonfinite(x0) | af_nonfinite(static_cast<float>(af_f16_to_f32(o1)));
    CHECK-LABEL: __global__
    CHECK-SAME: int* __restrict__ flags)
    CHECK: bool f0 = false;
    CHECK: if (__syncthreads_or(f0) != 0 && threadIdx.x == 0) flags[0] = 1;
  )");
  EXPECT_FALSE(std::regex_search(src, std::regex("atomic[A-Z]|atom\\.")));
}

TEST(CudaCodegen, IntegerStoresSaturate) {
  EXPECT_FILECHECK(source_of("ints"), R"(
    CHECK: const double x1 = static_cast<double>(static_cast<double>(a1));
    CHECK: o2 = af_saturate<signed char>([[X:v[0-9]+]], -128, 127);
    CHECK-NEXT: o3 = af_saturate<unsigned char>([[X]], 0, 255);
    CHECK-NEXT: o4 = af_saturate<int>([[X]], -2147483647 - 1, 2147483647);
    CHECK-NEXT: o5 = af_saturate<long long>([[X]], -9223372036854775807LL - 1, 9223372036854775807LL);
    CHECK-NEXT: o6 = static_cast<unsigned char>([[X]] != 0 ? 1 : 0);
  )");
}

TEST(CudaCodegen, WideIndexUsesInt64Offsets) {
  EXPECT_FILECHECK(source_of("wide_index"), R"(
    CHECK: typedef long long I;
    CHECK: typedef long long O;  // offsets: some operand reaches past 2^31
    CHECK: off0 += static_cast<O>(idx) * static_cast<O>(s0_0);
  )");
  EXPECT_FILECHECK(source_of("transpose"), "CHECK: typedef int O;");
}

TEST(CudaCodegen, TranscendentalsCallTheCudaMathLibrary) {
  EXPECT_FILECHECK(source_of("transcendental_f32"), R"(
    CHECK: = expf(v0);
    CHECK: = logf(v0);
    CHECK: = log1pf(v0);
    CHECK: = expm1f(v0);
    CHECK: = erff(v0);
    CHECK: = tanhf(v0);
    CHECK: = powf(
  )");
  EXPECT_FILECHECK(source_of("transcendental_f64"), "CHECK: = exp(v0);\nCHECK: = pow(");
}

TEST(CudaCodegen, DumpCodePrintsTheSource) {
  ::setenv("AMPFUSE_DUMP", "code", 1);
  ::testing::internal::CaptureStderr();
  const std::string src = source_of("flags");
  const std::string err = ::testing::internal::GetCapturedStderr();
  ::unsetenv("AMPFUSE_DUMP");
  EXPECT_NE(err.find("// CUDA kernel flags"), std::string::npos);
  EXPECT_NE(err.find(src), std::string::npos);
  ::testing::internal::CaptureStderr();
  (void)source_of("flags");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(CudaCodegen, NamesAndIndexArgumentsFollowTheSignature) {
  const auto cases = cuda_cases();
  const KernelSpec& t = cases.at("transpose").spec;
  EXPECT_EQ(codegen::cuda_index_arguments(t), (std::vector<int64_t>{65, 33, 65, 65}));
  EXPECT_TRUE(codegen::cuda_index_arguments(cases.at("flat_f32").spec).empty());
  EXPECT_EQ(codegen::cuda_vector_width(codegen::signature(cases.at("lowp").spec)), 8);
  EXPECT_EQ(codegen::cuda_vector_width(codegen::signature(cases.at("f64_compute").spec)), 4);
  EXPECT_EQ(codegen::cuda_vector_width(codegen::signature(t)), 1);
  KernelSpec bigger = t;
  bigger.shape = {130, 33};
  bigger.inputs[0].strides = {1, 130};
  bigger.outputs[1].strides = {1, 130};
  EXPECT_EQ(codegen::cuda_kernel_name(codegen::signature(t)), codegen::cuda_kernel_name(codegen::signature(bigger)));
  EXPECT_NE(codegen::cuda_kernel_name(codegen::signature(t)),
            codegen::cuda_kernel_name(codegen::signature(cases.at("broadcast").spec)));
}

TEST(CudaCodegen, LaunchConfigFillsTheDeviceOnce) {
  const codegen::CudaDeviceLimits h200{132, 2048, 1024, 2147483647};
  auto c = codegen::cuda_launch_config(1, 1, h200);
  EXPECT_EQ(c.grid, 1u);
  EXPECT_EQ(c.block, 256u);
  c = codegen::cuda_launch_config(1 << 20, 8, h200);  // 131072 steps: 512 blocks
  EXPECT_EQ(c.grid, 512u);
  c = codegen::cuda_launch_config(int64_t{1} << 28, 8, h200);
  EXPECT_EQ(c.grid, 132u * 8);
  c = codegen::cuda_launch_config(int64_t{1} << 40, 1, {1, 1024, 128, 65535});
  EXPECT_EQ(c.block, 128u);
  EXPECT_EQ(c.grid, 8u);
  EXPECT_ERROR(codegen::cuda_launch_config(0, 1, h200), "0 elements");
}

// ---------------------------------------------------------------------------------------
// NVRTC and ptxas.

#ifdef AMPFUSE_HAVE_NVRTC

struct PtxasRun {
  int status = -1;
  std::string output;
};

// ptxas -v on `ptx` for sm_<arch>: the toolkit's assembler, independently of NVRTC's.
PtxasRun run_ptxas(const std::string& ptx, int arch, const std::string& tag) {
#ifndef AMPFUSE_PTXAS_PATH
  ADD_FAILURE() << "CMake did not find ptxas next to nvcc";
  return {};
#else
  ScopedTempDir dir;
  const std::string file = dir.file(tag + ".ptx");
  std::ofstream(file) << ptx;
  const std::string cmd = fmt::format("'{}' -arch=sm_{} -v '{}' -o '{}' 2>&1", AMPFUSE_PTXAS_PATH, arch, file,
                                      dir.file(tag + ".cubin"));
  PtxasRun r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  r.status = pclose(p);
  return r;
#endif
}

struct BuildReport {
  int kernels = 0, max_registers = 0, spilling = 0;
  double nvrtc_seconds = 0;
};

// Compiles `source` for sm_<arch> to CUBIN (NVRTC runs the PTX assembler itself, with -v:
// register and spill counts per kernel) and, with `standalone_ptxas`, assembles the PTX once
// more with the toolkit's ptxas; expects every named kernel in the reports and no errors.
// Spills are reported, not failed.
BuildReport build_for(const std::string& source, const std::string& tag, int arch,
                      const std::vector<std::string>& kernels, bool standalone_ptxas = true) {
  BuildReport rep;
  cu::NvrtcOptions opts;
  opts.arch = arch;
  opts.ptxas_verbose = true;
  const cu::NvrtcResult r = cu::nvrtc_compile(source, tag, opts);
  rep.nvrtc_seconds = r.seconds;
  EXPECT_TRUE(r.cubin) << tag;
  EXPECT_GE(r.binary.size(), 4u);
  if (r.binary.size() >= 4) {
    EXPECT_EQ(std::string(r.binary.data() + 1, 3), "ELF") << tag << " is not a CUBIN";
  }
  EXPECT_EQ(r.log.find("error"), std::string::npos) << r.log;
  EXPECT_FALSE(r.ptx.empty());
  const std::vector<cu::PtxasUsage> usage = cu::parse_ptxas_log(r.log);
  std::set<std::string> seen;
  for (const cu::PtxasUsage& u : usage) {
    seen.insert(u.function);
    rep.max_registers = std::max(rep.max_registers, u.registers);
    if (u.spill_stores + u.spill_loads > 0) {
      ++rep.spilling;
      std::printf("  [spill] %s sm_%d: %s uses %d registers, spills %d/%d bytes\n", tag.c_str(), arch,
                  u.function.c_str(), u.registers, u.spill_stores, u.spill_loads);
    }
  }
  for (const std::string& k : kernels) EXPECT_TRUE(seen.count(k)) << k << " missing from the ptxas report of " << tag;
  rep.kernels = static_cast<int>(seen.size());
  if (!standalone_ptxas) return rep;
  const PtxasRun pr = run_ptxas(r.ptx, arch, fmt::format("{}_sm{}", tag, arch));
  EXPECT_EQ(pr.status, 0) << "ptxas failed on the PTX of " << tag << ":\n" << pr.output;
  EXPECT_EQ(cu::parse_ptxas_log(pr.output).size(), usage.size()) << pr.output;
  return rep;
}

TEST(CudaNvrtc, EveryCaseBuildsForSm80AndSm90) {
  for (const auto& [name, c] : cuda_cases()) {
    const codegen::KernelSignature sig = codegen::signature(c.spec);
    const std::string src = codegen::emit_cuda_source(sig, name);
    for (int arch : {80, 90}) {
      SCOPED_TRACE(fmt::format("{} sm_{}", name, arch));
      const BuildReport r = build_for(src, name, arch, {name});
      std::printf("  %-20s sm_%d: NVRTC %.2f s, %d registers%s\n", name.c_str(), arch, r.nvrtc_seconds,
                  r.max_registers, r.spilling ? " (spills)" : "");
    }
  }
}

TEST(CudaNvrtc, PtxHas128BitAccessesAndNoFma) {
  cu::NvrtcOptions opts;
  opts.arch = 90;
  const cu::NvrtcResult r = cu::nvrtc_compile(source_of("lowp"), "lowp", opts);
  EXPECT_EQ(filecheck(r.ptx, "CHECK: .entry lowp(\nCHECK: ld.global.v4.u32\nCHECK: st.global.v4.u32"), "")
      << "(PTX of the lowp case)";
  const cu::NvrtcResult f = cu::nvrtc_compile(source_of("flat_f32"), "flat_f32", opts);
  EXPECT_NE(f.ptx.find("ld.global.v4.f32"), std::string::npos);
  // An output may be written over an input (the memory plan's in place): no read-only-path
  // loads, which ptxas may order after a store through another pointer.
  for (const std::string& ptx : {r.ptx, f.ptx}) EXPECT_EQ(ptx.find("ld.global.nc"), std::string::npos);
  EXPECT_EQ(f.ptx.find("fma.rn.f32"), std::string::npos) << "--fmad=false must keep x * y + p unfused";
  EXPECT_EQ(f.ptx.find("atom."), std::string::npos);
}

TEST(CudaNvrtc, CompileErrorsNameTheProgramAndShowTheLog) {
  cu::NvrtcOptions opts;
  const std::string msg = error_message([&] { cu::nvrtc_compile("__global__ void k() { nope; }", "broken", opts); });
  EXPECT_NE(msg.find("NVRTC could not compile 'broken' for sm_80"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
}

TEST(CudaNvrtc, CacheKeyHoldsVersionOptionsAndArch) {
  const codegen::KernelSignature sig = codegen::signature(cuda_cases().at("flags").spec);
  cu::NvrtcOptions a;
  a.arch = 80;
  cu::NvrtcOptions b = a;
  b.arch = 90;
  cu::NvrtcOptions c = a;
  c.extra = {"--fmad=true"};
  const std::string ka = cu::cuda_cache_key(sig, a);
  EXPECT_NE(ka.find("nvrtc " + cu::nvrtc_version()), std::string::npos) << ka;
  EXPECT_NE(ka.find("sm_80"), std::string::npos);
  EXPECT_NE(ka.find("--fmad=false"), std::string::npos);
  EXPECT_NE(ka.find(sig.key()), std::string::npos);
  EXPECT_NE(ka, cu::cuda_cache_key(sig, b));
  EXPECT_NE(ka, cu::cuda_cache_key(sig, c));
  EXPECT_EQ(ka, cu::cuda_cache_key(sig, a));
}

TEST(CudaNvrtc, UnknownArchitecturesGetPtxForTheNewestKnown) {
  const std::vector<int> archs = cu::nvrtc_supported_archs();
  ASSERT_FALSE(archs.empty());
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
  const int newest = *std::max_element(archs.begin(), archs.end());
  cu::NvrtcOptions opts;
  opts.arch = newest + 1000;
  const std::vector<std::string> o = cu::nvrtc_options(opts);
  EXPECT_NE(std::find(o.begin(), o.end(), fmt::format("--gpu-architecture=compute_{}", newest)), o.end());
  const cu::NvrtcResult r = cu::nvrtc_compile(source_of("flat_f32"), "flat_f32", opts);
  EXPECT_FALSE(r.cubin);
  EXPECT_NE(std::string(r.binary.data()).find(".entry flat_f32("), std::string::npos);
}

// The CPU's staged transposes key their tile shape (codegen::TileShape: narrow columns for
// C = 3, square tiles for C = 64); the CUDA source has no such tiles, so one CUDA kernel
// (one NVRTC build) serves both.
TEST(CudaNvrtc, CacheKeyLeavesOutTheCpuTileShape) {
  auto cast_to_nhwc = [](int64_t c) {
    codegen::KernelSpec s;
    s.name = "cast_nhwc";
    s.shape = {2, 4096, c};
    s.inputs = {{"x", ir::DType::f32, {c * 4096, 1, 4096}}};
    s.outputs = {{"y", ir::DType::bf16, codegen::row_major_strides(s.shape)}};
    ir::ScalarBuilder b(1);
    s.body = b.finish({b.input(0)});
    return codegen::signature(s);
  };
  const codegen::KernelSignature narrow = cast_to_nhwc(3), square = cast_to_nhwc(64);
  ASSERT_NE(narrow.key(), square.key());  // two CPU kernels
  EXPECT_EQ(codegen::emit_cuda_kernel(narrow, "k"), codegen::emit_cuda_kernel(square, "k"));
  cu::NvrtcOptions o;
  EXPECT_EQ(cu::cuda_cache_key(narrow, o), cu::cuda_cache_key(square, o));
  EXPECT_EQ(cu::cuda_cache_key(narrow, o).find("|t"), std::string::npos) << cu::cuda_cache_key(narrow, o);
}

// Every kernel the differential fuzzer's graphs produce (seeds 1-2000, as the CPU fuzzer;
// AMPFUSE_FUZZ_GRAPHS=N per shard there means 4N here), deduplicated by signature, built by
// NVRTC down to CUBIN with ptxas's report, for sm_80 (even units) or sm_90 (odd units): the
// source does not depend on the architecture, and building each kernel for both doubled the
// longest part of the release test run (CudaNvrtc.EveryCaseBuildsForSm80AndSm90 builds the
// hand-written cases for both). Kernels go in translation
// units of kKernelsPerProgram uniquely named kernels (NVRTC's start-up is paid once per
// unit); the units are dealt to kNvrtcShards ctest cases so that ctest spreads the work
// (about 0.2 s of NVRTC a kernel and architecture: most of it is the optimizer on the
// unrolled 128-bit pack loop). Under AddressSanitizer each shard builds the first unit of
// the first 100 graphs' kernels only: the sanitizer cannot see into NVRTC, and the release
// run builds them all.
constexpr size_t kKernelsPerProgram = 16;
constexpr int kNvrtcShards = 8;

struct FuzzUnit {
  std::string source;
  std::vector<std::string> names;
};

struct FuzzUnits {
  std::vector<FuzzUnit> units;
  uint64_t graphs = 0;
  int lowered = 0, fallbacks = 0;
  size_t distinct = 0;
};

const FuzzUnits& fuzz_units() {
  static const FuzzUnits all = [] {
    FuzzUnits r;
#ifdef __SANITIZE_ADDRESS__
    r.graphs = 100;  // each shard builds one unit (below): planning 2000 graphs would only cost time
#else
    r.graphs = 2000;
#endif
    if (const char* env = std::getenv("AMPFUSE_FUZZ_GRAPHS")) r.graphs = std::strtoull(env, nullptr, 10) * 4;
    std::unordered_set<std::string> keys;
    for (uint64_t seed = 1; seed <= r.graphs; ++seed) {
      const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
      for (const engine::PlanStep& step : engine::plan_fusion(rg.graph).steps) {
        const auto* k = std::get_if<engine::FusedKernel>(&step);
        if (!k || ir::num_elements(k->iteration) == 0) continue;
        engine::LoweredKernel lk;
        try {
          // Odd seeds with the loss scaler's non-finite flag, as the executor lowers them.
          lk = engine::lower_kernel(rg.graph, *k, fmt::format("seed{}", seed), seed % 2 == 1);
        } catch (const Error& e) {
          ++r.fallbacks;  // the executor runs these nodes on the interpreter
          continue;
        }
        ++r.lowered;
        const codegen::KernelSignature sig = codegen::signature(lk.spec);
        if (!keys.insert(sig.key()).second) continue;
        if (r.units.empty() || r.units.back().names.size() == kKernelsPerProgram)
          r.units.push_back({codegen::cuda_prelude(), {}});
        FuzzUnit& u = r.units.back();
        u.names.push_back(fmt::format("k{}", keys.size() - 1));
        u.source += codegen::emit_cuda_kernel(sig, u.names.back());
      }
    }
    r.distinct = keys.size();
    return r;
  }();
  return all;
}

class CudaNvrtcFuzz : public ::testing::TestWithParam<int> {};

TEST_P(CudaNvrtcFuzz, EveryKernelBuildsForSm80OrSm90) {
  const auto t0 = std::chrono::steady_clock::now();
  const FuzzUnits& all = fuzz_units();
  ASSERT_GT(all.distinct, 10u);
  const int shard = GetParam();
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(shard); i < all.units.size(); i += kNvrtcShards) mine.push_back(i);
#ifdef __SANITIZE_ADDRESS__
  if (mine.size() > 1) mine.resize(1);
#endif

  std::mutex mutex;
  std::map<int, BuildReport> total;  // by arch
  size_t kernels = 0;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j; (j = next++) < mine.size();) {
      const FuzzUnit& u = all.units[mine[j]];
      const int arch = mine[j] % 2 == 0 ? 80 : 90;
      const BuildReport r = build_for(u.source, fmt::format("fuzz_unit{}", mine[j]), arch, u.names, false);
      std::lock_guard<std::mutex> lock(mutex);
      BuildReport& t = total[arch];
      t.kernels += r.kernels;
      t.max_registers = std::max(t.max_registers, r.max_registers);
      t.spilling += r.spilling;
      t.nvrtc_seconds += r.nvrtc_seconds;
      kernels += u.names.size();
    }
  };
  // Two builds at a time: ctest runs other shards beside this one.
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::min(2u, std::max(1u, std::thread::hardware_concurrency())); ++t)
    threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  if (shard == 0)
    std::printf("  %llu graphs: %d kernels (%d not lowerable), %zu distinct signatures in %zu programs\n",
                static_cast<unsigned long long>(all.graphs), all.lowered, all.fallbacks, all.distinct,
                all.units.size());
  for (const auto& [arch, r] : total)
    std::printf("  shard %d sm_%d: %d kernels, NVRTC %.1f s (%.2f s a kernel), at most %d registers, %d kernels spill\n",
                shard, arch, r.kernels, r.nvrtc_seconds, r.nvrtc_seconds / std::max(r.kernels, 1), r.max_registers,
                r.spilling);
  std::printf("  shard %d: built %zu kernels (%zu programs) in %.1f s\n", shard, kernels, mine.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  RecordProperty("kernels_built", static_cast<int>(kernels));
}

INSTANTIATE_TEST_SUITE_P(Shards, CudaNvrtcFuzz, ::testing::Range(0, kNvrtcShards));

#else

TEST(CudaNvrtc, ReportsThatItIsMissing) {
  EXPECT_FALSE(cu::nvrtc_available());
  EXPECT_ERROR(cu::nvrtc_version(), "NVRTC is not available");
}

#endif

// ---------------------------------------------------------------------------------------
// The driver.

TEST(CudaDriver, AbsenceGivesOneClearMessage) {
  const std::string why = cu::cuda_available();
  if (why.empty()) GTEST_SKIP() << "a CUDA device is present: " << cu::cuda_device().name;
  EXPECT_TRUE(why.rfind("no CUDA driver", 0) == 0 || why.rfind("no CUDA device", 0) == 0) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos);
  EXPECT_ERROR(cu::cuda_device(), why);
  EXPECT_ERROR(cu::DeviceBuffer(16), why);
  const CudaCase c = cuda_cases().at("flat_f32");
  EXPECT_ERROR(cu::cuda_kernel(c.spec), why);
  EXPECT_EQ(cu::cuda_available(), why);  // stable: loaded once
}

}  // namespace
}  // namespace ampfuse::testing
