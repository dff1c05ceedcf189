// The JIT's target CPU: AMPFUSE_CPU's values on hosts with and without AVX-512 (as pure
// resolutions, without touching the environment), and the target this process runs with.
#include "codegen/llvm_target.h"
#include "codegen_test_util.h"

#include <cstdlib>
#include <initializer_list>

namespace ampfuse::testing {
namespace {

using codegen::CpuLacksFeatures;
using codegen::HostCpu;
using codegen::JitTarget;
using codegen::resolve_jit_target;

// A host with exactly these features present, and AVX-512 FP16 reported absent (LLVM
// reports the features a CPU lacks too).
HostCpu host(const std::string& name, std::initializer_list<const char*> features) {
  HostCpu h{"x86_64-pc-linux-gnu", name, {{"avx512fp16", false}}};
  for (const char* f : features) h.features[f] = true;
  return h;
}

// x86-64-v3 and below, as LLVM detects a Zen 3.
HostCpu zen3() {
  return host("znver3", {"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3", "avx", "avx2", "bmi", "bmi2",
                         "f16c", "fma", "lzcnt", "movbe", "xsave", "aes", "sha"});
}

HostCpu zen4() {
  HostCpu h = zen3();
  h.name = "znver4";
  for (const char* f : {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512", "avx512bf16"})
    h.features[f] = true;
  return h;
}

TEST(CodegenTarget, NativeIsTheHostCpuWithAllItsFeatures) {
  const JitTarget t = resolve_jit_target("native", zen4());
  EXPECT_EQ(t.choice, "native");
  EXPECT_EQ(t.triple, "x86_64-pc-linux-gnu");
  EXPECT_EQ(t.cpu, "znver4");
  EXPECT_TRUE(t.has("avx512bf16"));
  EXPECT_TRUE(t.has("f16c"));
  EXPECT_FALSE(t.has("avx512fp16"));
  EXPECT_NE(t.features.find("-avx512fp16"), std::string::npos) << "absent features are turned off: " << t.features;
  EXPECT_FALSE(resolve_jit_target("native", zen3()).has("avx512f"));
}

// LLVM 19 miscompiles masked f16 compares with AVX512-FP16 (llvm/llvm-project#159723):
// native code never uses it, nor AVX10, which implies it, even where the host has them.
TEST(CodegenTarget, NativeWithholdsAvx512Fp16AndAvx10) {
  HostCpu sapphire_rapids = zen4();
  sapphire_rapids.name = "sapphirerapids";
  for (const char* f : {"avx512fp16", "avx10.1-256", "avx10.1-512", "amx-bf16"}) sapphire_rapids.features[f] = true;
  const JitTarget t = resolve_jit_target("native", sapphire_rapids);
  for (const char* f : {"avx512fp16", "avx10.1-256", "avx10.1-512"}) {
    EXPECT_FALSE(t.has(f)) << t.features;
    EXPECT_NE(t.features.find(fmt::format("-{}", f)), std::string::npos) << t.features;
  }
  EXPECT_TRUE(t.has("avx512bf16")) << t.features;
  EXPECT_TRUE(t.has("amx-bf16")) << t.features;
  EXPECT_FALSE(codegen::jit_target().has("avx512fp16")) << "this process's target: " << codegen::jit_target().features;
}

TEST(CodegenTarget, X86_64_v3IsAvx2WithFmaAndF16c) {
  for (const HostCpu& h : {zen3(), zen4()}) {
    const JitTarget t = resolve_jit_target("x86-64-v3", h);
    EXPECT_EQ(t.choice, "x86-64-v3");
    EXPECT_EQ(t.cpu, "x86-64-v3");
    for (const char* f : {"avx2", "fma", "f16c", "bmi2", "sse4.2"}) EXPECT_TRUE(t.has(f)) << f << " in " << t.features;
    EXPECT_FALSE(t.has("avx512f")) << t.features;
    EXPECT_FALSE(t.has("aes")) << "only the level's features, not the host's: " << t.features;
  }
}

TEST(CodegenTarget, X86_64_v4AddsAvx512) {
  const JitTarget t = resolve_jit_target("x86-64-v4", zen4());
  EXPECT_EQ(t.cpu, "x86-64-v4");
  for (const char* f : {"avx2", "f16c", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512"})
    EXPECT_TRUE(t.has(f)) << f << " in " << t.features;
  EXPECT_FALSE(t.has("avx512bf16")) << "not part of the level: " << t.features;
}

TEST(CodegenTarget, X86_64_v4WithoutAvx512IsAnError) {
  try {
    resolve_jit_target("x86-64-v4", zen3());
    FAIL() << "resolved x86-64-v4 on a CPU without AVX-512";
  } catch (const CpuLacksFeatures& e) {
    EXPECT_STREQ(e.what(),
                 "AMPFUSE_CPU=x86-64-v4 needs AVX-512 (avx512f, avx512bw, avx512cd, avx512dq, avx512vl, evex512), "
                 "which this CPU lacks");
  }
  // A CPU with AVX-512 but only 256-bit registers for it (AVX10/256) cannot run v4 either.
  HostCpu avx10_256 = zen4();
  avx10_256.features["evex512"] = false;
  EXPECT_THROW(resolve_jit_target("x86-64-v4", avx10_256), CpuLacksFeatures);
}

TEST(CodegenTarget, X86_64_v3WithoutAvx2NamesWhatIsMissing) {
  HostCpu sse_only = zen3();
  for (const char* f : {"avx", "avx2", "fma", "f16c"}) sse_only.features.erase(f);
  try {
    resolve_jit_target("x86-64-v3", sse_only);
    FAIL() << "resolved x86-64-v3 on a CPU without AVX2";
  } catch (const CpuLacksFeatures& e) {
    EXPECT_STREQ(e.what(), "AMPFUSE_CPU=x86-64-v3 needs AVX2 (avx, avx2, f16c, fma), which this CPU lacks");
  }
}

TEST(CodegenTarget, UnknownValueNamesTheVariableAndTheAcceptedValues) {
  for (const char* choice : {"x86-64-v5", "", "Native", "znver4", "avx2"}) {
    try {
      resolve_jit_target(choice, zen4());
      ADD_FAILURE() << "accepted '" << choice << "'";
    } catch (const CpuLacksFeatures& e) {
      ADD_FAILURE() << "an unknown value is not a missing feature: " << e.what();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("AMPFUSE_CPU='{}' is not a target CPU; use one of x86-64-v3, "
                                                   "x86-64-v4, native",
                                                   choice));
    }
  }
}

TEST(CodegenTarget, CacheTagsTellTargetsApart) {
  const std::string native4 = resolve_jit_target("native", zen4()).cache_tag;
  const std::string v3 = resolve_jit_target("x86-64-v3", zen4()).cache_tag;
  const std::string v4 = resolve_jit_target("x86-64-v4", zen4()).cache_tag;
  EXPECT_NE(native4, v3);
  EXPECT_NE(native4, v4);
  EXPECT_NE(v3, v4);
  EXPECT_EQ(v3, resolve_jit_target("x86-64-v3", zen3()).cache_tag) << "a level's code is the same on every host";
  EXPECT_EQ(v3.rfind("x86-64-v3", 0), 0u) << v3;
  // One CPU name with different features (a VM hiding AVX-512) is another target.
  HostCpu masked = zen3();
  masked.name = "znver4";
  EXPECT_NE(resolve_jit_target("native", masked).cache_tag, native4);
}

// The target this process compiles for: AMPFUSE_CPU's, as every compiled kernel records.
TEST(CodegenTarget, ProcessTargetFollowsAmpfuseCpu) {
  const JitTarget& target = codegen::jit_target();
  const char* choice = std::getenv(codegen::kTargetCpuVariable);
  EXPECT_EQ(target.choice, choice ? choice : "native");
  EXPECT_EQ(target.cpu, target.choice == "native" ? codegen::detect_host_cpu().name : target.choice);
  if (target.choice == "x86-64-v3") {
    EXPECT_EQ(codegen::target_vector_bits(), 256);
  }
  if (target.choice == "x86-64-v4") {
    EXPECT_EQ(codegen::target_vector_bits(), 512);
  }

  runtime::KernelCache cache;
  ScalarBuilder b(1);
  const auto kernel = cache.get(dense_spec("copy", b.finish({b.input(0)}), {DType::f32}, {DType::f32}, {8}));
  EXPECT_EQ(kernel->key.rfind(target.cache_tag + "|", 0), 0u) << kernel->key;
}

}  // namespace
}  // namespace ampfuse::testing
