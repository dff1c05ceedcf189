// The generated CUDA kernels' meaning, checked without a GPU: the emitted source is compiled
// as host C++ (g++, no FMA contraction) with a small shim for the CUDA built-ins it uses,
// then run as a grid of one-thread blocks, grid-stride loops and all, against the
// reference evaluator bit for bit. This covers the conversions, saturation, NaN rules,
// packs, tails, strides and flags; what it cannot cover (the CUDA math library, the real
// memory system) the device tests do.
#include "codegen/cuda_emitter.h"
#include "cuda_test_specs.h"
#include "engine/planning/fusion_plan.h"
#include "engine/planning/kernel_lowering.h"
#include "fuzz/random_graph.h"
#include "int_conversion_cases.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdio>
#include <fstream>

namespace ampfuse::testing {
namespace {

// CUDA built-ins as host functions. __double2float_rz rounds toward zero by stepping back
// from the nearest float; a block is one thread, so __syncthreads_or is the identity.
constexpr const char* kShim = R"(#include <cmath>
#include <cstring>
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
#define __restrict__ __restrict
struct AfDim { unsigned x; };
static AfDim gridDim, blockDim = {1}, blockIdx, threadIdx;
static inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __double2float_rz(double d) {
  float f = static_cast<float>(d);
  if (!std::isnan(d) && std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  return f;
}
static inline int __syncthreads_or(int p) { return p; }
)";

// The kernel's parameter types, read back from its signature line.
std::vector<std::string> parameter_types(const std::string& src, const std::string& name) {
  const std::string head = ") " + name + "(";
  const size_t at = src.find(head);
  const size_t end = src.find(") {", at);
  std::string list = src.substr(at + head.size(), end - at - head.size());
  std::vector<std::string> types;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(", ", pos);
    std::string p = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (const size_t r = p.find(" __restrict__"); r != std::string::npos) p.erase(r, 13);
    types.push_back(p.substr(0, p.find_last_of(' ')));
    if (comma == std::string::npos) break;
    pos = comma + 2;
  }
  return types;
}

using HostLaunch = void (*)(void**, unsigned);

// Compiles the kernels of `sigs` (named k0, k1, ...) into one shared object; returns the
// launchers ampfuse_host_launch_k<i>.
std::vector<HostLaunch> compile_on_host(const std::vector<codegen::KernelSignature>& sigs, ScopedTempDir& dir) {
  std::string src = std::string(kShim) + codegen::cuda_prelude();
  for (size_t i = 0; i < sigs.size(); ++i) {
    const std::string name = fmt::format("k{}", i);
    const std::string kernel = codegen::emit_cuda_kernel(sigs[i], name);
    src += kernel;
    const std::vector<std::string> types = parameter_types(kernel, name);
    std::vector<std::string> args;
    for (size_t a = 0; a < types.size(); ++a) args.push_back(fmt::format("*static_cast<{}*>(args[{}])", types[a], a));
    src += fmt::format(
        "extern \"C\" void ampfuse_host_launch_{0}(void** args, unsigned grid) {{\n"
        "  gridDim.x = grid;\n  for (unsigned b = 0; b < grid; ++b) {{ blockIdx.x = b; {0}({1}); }}\n}}\n",
        name, fmt::join(args, ", "));
  }
  const std::string cpp = dir.file("kernels.cpp"), so = dir.file("kernels.so");
  std::ofstream(cpp) << src;
  const std::string cmd =
      fmt::format("g++ -std=c++17 -O1 -ffp-contract=off -fno-fast-math -shared -fPIC -w '{}' -o '{}' 2>&1", cpp, so);
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; p && (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = p ? pclose(p) : -1;
  if (status != 0) {
    ADD_FAILURE() << "g++ could not compile the kernels as host code:\n" << out.substr(0, 4000);
    return {};
  }
  void* lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);  // kept open: the launchers live on
  if (!lib) {
    ADD_FAILURE() << dlerror();
    return {};
  }
  std::vector<HostLaunch> fns;
  for (size_t i = 0; i < sigs.size(); ++i)
    fns.push_back(reinterpret_cast<HostLaunch>(dlsym(lib, fmt::format("ampfuse_host_launch_k{}", i).c_str())));
  return fns;
}

// A KernelRunner that calls `launch` the way launch_cuda_kernel builds the arguments.
KernelRunner host_runner(HostLaunch launch, unsigned grid) {
  return [launch, grid](const KernelSpec& spec, std::span<const void* const> in, std::span<void* const> out,
                        std::span<const double> params, std::span<int32_t> flags) {
    long long n = spec.num_elements();
    std::vector<const void*> ptrs(in.begin(), in.end());
    ptrs.insert(ptrs.end(), out.begin(), out.end());
    std::vector<long long> index;
    for (int64_t v : codegen::cuda_index_arguments(spec)) index.push_back(v);
    std::vector<double> p(params.begin(), params.end());
    std::vector<int32_t> f(flags.size(), 0);
    int32_t* fp = f.data();
    std::vector<void*> args = {&n};
    for (const void*& q : ptrs) args.push_back(&q);
    for (long long& v : index) args.push_back(&v);
    for (double& v : p) args.push_back(&v);
    if (!flags.empty()) args.push_back(&fp);
    launch(args.data(), grid);
    for (size_t i = 0; i < flags.size(); ++i) flags[i] |= f[i];
  };
}

TEST(CudaHostEmulation, CasesMatchTheReferenceBitForBit) {
  std::vector<std::string> names;
  std::vector<codegen::KernelSignature> sigs;
  const auto cases = cuda_cases();
  for (const auto& [name, c] : cases) {
    if (name == "wide_index") continue;  // a 2 GiB buffer; the device test runs it
    names.push_back(name);
    sigs.push_back(codegen::signature(c.spec));
  }
  ScopedTempDir dir;
  const std::vector<HostLaunch> fns = compile_on_host(sigs, dir);
  ASSERT_EQ(fns.size(), sigs.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const CudaCase& c = cases.at(names[i]);
    for (unsigned grid : {1u, 3u}) {
      SCOPED_TRACE(fmt::format("{} grid {}", names[i], grid));
      // Host libm here, glibc in the reference: even the transcendental cases are exact.
      EXPECT_TRUE(check_kernel(c.spec, c.params, true, 7 + grid, host_runner(fns[i], grid)));
    }
  }
}

// Float -> integer conversion as ir/int_conversion.h defines it, on the written-out edge
// cases, for both compute types and both paths (a store to an integer output and a round_to
// inside the body): the emitter's af_saturate and the limits it takes from ir.
TEST(CudaHostEmulation, IntegerConversionsFollowTheIrDefinition) {
  std::vector<IntConversionSpec> specs;
  for (DType from : {DType::f32, DType::f64})
    for (IntConversionSpec& s : int_conversion_specs(from)) specs.push_back(std::move(s));
  std::vector<codegen::KernelSignature> sigs;
  for (const IntConversionSpec& s : specs) sigs.push_back(codegen::signature(s.spec));
  ScopedTempDir dir;
  const std::vector<HostLaunch> fns = compile_on_host(sigs, dir);
  ASSERT_EQ(fns.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const KernelSpec& spec = specs[i].spec;
    SCOPED_TRACE(fmt::format("{} from {} to {}", spec.name, ir::dtype_name(spec.inputs[0].dtype),
                             ir::dtype_name(specs[i].to)));
    const Tensor x = int_conversion_inputs(spec.inputs[0].dtype);
    Tensor y = Tensor::zeros({spec.outputs[0].dtype, spec.shape});
    const void* in[] = {x.raw()};
    void* out[] = {y.raw()};
    host_runner(fns[i], 2)(spec, in, out, {}, {});
    EXPECT_TRUE(converted_as_defined(y, specs[i].to));
  }
}

// Sizes around the pack width: vector loop, tail, and both with several "blocks".
TEST(CudaHostEmulation, PacksAndTails) {
  const CudaCase base = cuda_cases().at("lowp");
  ScopedTempDir dir;
  const std::vector<HostLaunch> fns = compile_on_host({codegen::signature(base.spec)}, dir);
  ASSERT_EQ(fns.size(), 1u);
  for (int64_t n : {1, 7, 8, 9, 17, 63, 1025}) {
    KernelSpec spec = base.spec;
    spec.shape = {n};
    for (unsigned grid : {1u, 2u, 5u}) EXPECT_TRUE(check_kernel(spec, {}, true, n, host_runner(fns[0], grid))) << n;
  }
}

// The fuzzer's first graphs, kernel by kernel (exact graphs only; their transcendental
// ones are exact here too, host libm being the reference's).
TEST(CudaHostEmulation, FuzzerKernelsMatchTheReference) {
  std::vector<KernelSpec> specs;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const fuzz::RandomGraph rg = fuzz::random_fusable_graph(seed);
    for (const engine::PlanStep& step : engine::plan_fusion(rg.graph).steps) {
      const auto* k = std::get_if<engine::FusedKernel>(&step);
      if (!k || ir::num_elements(k->iteration) == 0) continue;
      try {
        specs.push_back(engine::lower_kernel(rg.graph, *k, fmt::format("seed{}", seed), seed % 2 == 1).spec);
      } catch (const Error&) {
        // the executor runs these nodes on the interpreter
      }
    }
  }
  std::vector<codegen::KernelSignature> sigs;
  for (const KernelSpec& s : specs) sigs.push_back(codegen::signature(s));
  ScopedTempDir dir;
  const std::vector<HostLaunch> fns = compile_on_host(sigs, dir);
  ASSERT_EQ(fns.size(), specs.size());
  int failures = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<double> params(static_cast<size_t>(specs[i].num_params), 0.75);
    const auto r = check_kernel(specs[i], params, true, i, host_runner(fns[i], 3));
    if (!r && ++failures <= 3) ADD_FAILURE() << r.message();
  }
  EXPECT_EQ(failures, 0) << "of " << specs.size() << " kernels";
}

}  // namespace
}  // namespace ampfuse::testing
