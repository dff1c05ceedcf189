// Injected faults (runtime/fault_injection.h): a kernel that fails to compile, a oneDNN
// primitive that fails to create, an allocation that fails. Each gives a clear error (strict)
// or a reported fallback, never a wrong or partial result, and the same executable or a new
// compile serves the next call; every result is compared with the reference interpreter.
#include "engine/execution/executor.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/device_api.h"
#include "runtime/fault_injection.h"
#include "runtime/interpreter.h"
#include "runtime/kernel_cache.h"
#include "tests/cli_util.h"
#include "tests/executor_checks.h"

#include <gtest/gtest.h>

#include <string>

namespace ampfuse::runtime {
namespace {

using engine::Executable;
using engine::ExecutorOptions;
using testing::device::same_outputs;
using testing::device::Tolerance;

// Fused chains around a oneDNN FullyConnected: kernels to compile, a primitive to create,
// an arena and output buffers to allocate.
ir::Graph small_model() {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4,16]
    %w = var param : f32[8,16]
    %b = var param : f32[8]
    %a = relu(%x)
    %s = _mul_scalar(%a) {scalar=0.5}
    %fc = FullyConnected(%s, %w, %b) {num_hidden=8}
    %t = tanh(%fc)
    %u = _plus_scalar(%t) {scalar=1}
    return %u
  })");
  ir::infer_types(g);
  return g;
}

constexpr Tolerance kNear{.of_largest = 1e-5};  // oneDNN sums in its own order

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(FaultInjection, SwitchStrikesEveryTimeOrOnlyTheNthTime) {
  {
    ScopedFault f("alloc:2,compile");
    EXPECT_FALSE(fault_strikes(Fault::alloc));
    EXPECT_TRUE(fault_strikes(Fault::alloc));
    EXPECT_FALSE(fault_strikes(Fault::alloc));
    EXPECT_TRUE(fault_strikes(Fault::compile));
    EXPECT_TRUE(fault_strikes(Fault::compile));
    EXPECT_FALSE(fault_strikes(Fault::primitive));
    EXPECT_FALSE(fault_strikes(Fault::cache_write));
    EXPECT_EQ(injected_fault_note(), "(injected fault: AMPFUSE_FAULT=alloc:2,compile)");
  }
  {
    ScopedFault f("cache_write:1");
    EXPECT_TRUE(fault_strikes(Fault::cache_write));
    EXPECT_FALSE(fault_strikes(Fault::cache_write));
  }
  ScopedFault none("");
  EXPECT_FALSE(fault_strikes(Fault::compile));
}

TEST(FaultInjection, MalformedSwitchIsAnErrorQuotingIt) {
  for (const char* bad : {"compil", "alloc:0", "alloc:x", "alloc:", "alloc,alloc", "compile,"}) {
    const std::string m = message_of([&] { ScopedFault f(bad); });
    EXPECT_NE(m.find(fmt::format("AMPFUSE_FAULT='{}'", bad)), std::string::npos) << m;
    EXPECT_NE(m.find("compile, primitive, alloc, cache_write"), std::string::npos) << m;
  }
}

TEST(FaultInjection, CompileFaultStrictIsAnErrorNamingTheKernelAndNode) {
  const ir::Graph g = small_model();
  KernelCache cache(nullptr);  // its own, without the disk cache: every kernel is compiled here
  ExecutorOptions opts;
  opts.cache = &cache;
  opts.strict = true;
  {
    ScopedFault f("compile");
    const std::string m = message_of([&] { Executable::compile(g, opts); });
    EXPECT_NE(m.find("kernel k"), std::string::npos) << m;
    EXPECT_NE(m.find("node "), std::string::npos) << m;
    EXPECT_NE(m.find("injected fault: AMPFUSE_FAULT=compile"), std::string::npos) << m;
  }
  // The failed compile left nothing behind in the cache: the next compile succeeds.
  const Executable exe = Executable::compile(g, opts);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  const Bindings vars = random_bindings(g, 1);
  EXPECT_TRUE(same_outputs(interpret(g, vars), exe.run(vars), kNear));
}

TEST(FaultInjection, CompileFaultFallsBackToTheInterpreterWithOneWarningEach) {
  const ir::Graph g = small_model();
  // Without the disk cache: each compile below finds none of its kernels cached.
  KernelCache first_cache(nullptr), cache(nullptr);
  ExecutorOptions opts;
  opts.cache = &first_cache;
  opts.strict = false;
  const Bindings vars = random_bindings(g, 2);
  const std::vector<Tensor> want = interpret(g, vars);
  std::optional<Executable> fallen;
  {
    ScopedFault f("compile:1");  // the first compile (the batch of all kernels) and its retry
    ::testing::internal::CaptureStderr();
    fallen.emplace(Executable::compile(g, opts));
    const std::string err = ::testing::internal::GetCapturedStderr();
    // The batch failed, then each kernel compiled alone: the fault struck once, so at most
    // one kernel falls back; with "compile" (below) all of them do.
    EXPECT_LE(fallen->compile_stats().fallbacks.size(), 1u) << err;
    EXPECT_TRUE(same_outputs(want, fallen->run(vars), kNear));
  }
  opts.cache = &cache;
  {
    ScopedFault f("compile");
    ::testing::internal::CaptureStderr();
    fallen.emplace(Executable::compile(g, opts));
    const std::string err = ::testing::internal::GetCapturedStderr();
    const std::vector<std::string>& fb = fallen->compile_stats().fallbacks;
    ASSERT_EQ(fb.size(), static_cast<size_t>(fallen->compile_stats().kernels)) << err;
    ASSERT_FALSE(fb.empty());
    for (const std::string& why : fb) {
      EXPECT_NE(why.find("injected fault"), std::string::npos) << why;
      EXPECT_NE(err.find("ampfuse: warning: " + why), std::string::npos) << err;
    }
  }
  // The executable with fallbacks computes what the interpreter does, run after run.
  EXPECT_TRUE(same_outputs(want, fallen->run(vars), kNear));
  EXPECT_TRUE(same_outputs(want, fallen->run(vars), kNear));
  // A new compile, the fault gone, compiles every kernel.
  const Executable exe = Executable::compile(g, opts);
  EXPECT_TRUE(exe.compile_stats().fallbacks.empty());
  EXPECT_GT(exe.compile_stats().compilations, 0);
  EXPECT_TRUE(same_outputs(want, exe.run(vars), kNear));
}

TEST(FaultInjection, PrimitiveFaultIsAnErrorWhenStrictElseAReferenceFallback) {
  const ir::Graph g = small_model();
  const Bindings vars = random_bindings(g, 3);
  const std::vector<Tensor> want = interpret(g, vars);
  ExecutorOptions opts;
  opts.strict = true;
  {
    ScopedFault f("primitive");
    const std::string m = message_of([&] { Executable::compile(g, opts); });
    EXPECT_NE(m.find("'fc' (FullyConnected)"), std::string::npos) << m;
    EXPECT_NE(m.find("oneDNN: creating the FullyConnected primitive failed"), std::string::npos) << m;
    EXPECT_NE(m.find("injected fault"), std::string::npos) << m;

    opts.strict = false;
    ::testing::internal::CaptureStderr();
    const Executable fallen = Executable::compile(g, opts);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(fallen.compile_stats().onednn_ops, 0);
    ASSERT_EQ(fallen.compile_stats().fallbacks.size(), 1u);
    EXPECT_NE(err.find("ampfuse: warning: " + fallen.compile_stats().fallbacks[0]), std::string::npos) << err;
    EXPECT_TRUE(same_outputs(want, fallen.run(vars), kNear));
    EXPECT_TRUE(same_outputs(want, fallen.run(vars), kNear));
  }
  opts.strict = true;
  const Executable exe = Executable::compile(g, opts);
  EXPECT_EQ(exe.compile_stats().onednn_ops, 1);
  EXPECT_TRUE(same_outputs(want, exe.run(vars), kNear));
}

// Every allocation of a run in turn (the arena, constants, output buffers, scratch; on the
// emulated GPU also device buffers and host copies): the run fails with "out of memory"
// naming the bytes, or, once N passes the run's allocations, succeeds; the same executable
// then runs correctly. No partial result is ever returned.
TEST(FaultInjection, AllocationFaultIsOutOfMemoryAndTheExecutableRunsAgain) {
  const ir::Graph g = small_model();
  const Bindings vars = random_bindings(g, 4);
  const std::vector<Tensor> want = interpret(g, vars);
  EmulatedDevice gpu;
  for (auto [constant_params, device] : {std::pair<bool, DeviceApi*>{false, nullptr}, {true, nullptr}, {false, &gpu},
                                         {true, &gpu}}) {
    ExecutorOptions opts;
    opts.constant_params = constant_params;
    opts.device = device;
    int failures = 0, successes = 0;
    for (int n = 1; n <= 16; ++n) {
      SCOPED_TRACE(fmt::format("alloc:{}, constant_params {}, {}", n, constant_params, device ? "emulated GPU" : "CPU"));
      const Executable exe = Executable::compile(g, opts);
      {
        ScopedFault f(fmt::format("alloc:{}", n));
        try {
          const std::vector<Tensor> got = exe.run(vars);
          EXPECT_TRUE(same_outputs(want, got, kNear));
          ++successes;
        } catch (const Error& e) {
          ++failures;
          const std::string m = e.what();
          EXPECT_NE(m.find("out of memory allocating "), std::string::npos) << m;
          EXPECT_NE(m.find(" bytes (injected fault"), std::string::npos) << m;
        }
      }
      EXPECT_TRUE(same_outputs(want, exe.run(vars), kNear));
      EXPECT_TRUE(same_outputs(want, exe.run(vars), kNear));
    }
    EXPECT_GE(failures, 2);  // the arena and at least one output buffer
    EXPECT_GE(successes, 1);  // N went past the run's allocations
  }
}

// The switch from the environment, through the program as a user runs it.
TEST(FaultInjection, CliReportsEachFaultAndNeverAPartialResult) {
  // Without the disk cache, which would hand over the kernels without compiling them.
  CliResult r = run_shell(
      fmt::format("AMPFUSE_FAULT=compile AMPFUSE_STRICT=1 AMPFUSE_CACHE_DIR=0 '{}' run --repeat 1", AMPFUSE_CLI_PATH));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("ampfuse: error: kernel k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(injected fault: AMPFUSE_FAULT=compile)"), std::string::npos) << r.err;

  r = run_shell(fmt::format("AMPFUSE_FAULT=primitive AMPFUSE_STRICT=0 '{}' run --repeat 1", AMPFUSE_CLI_PATH));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("ampfuse: warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("it runs on the reference interpreter"), std::string::npos) << r.err;

  r = run_shell(fmt::format("AMPFUSE_FAULT=alloc:1 '{}' run --repeat 1", AMPFUSE_CLI_PATH));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("ampfuse: error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("out of memory allocating "), std::string::npos) << r.err;

  r = run_shell(fmt::format("AMPFUSE_FAULT=oom '{}' run --repeat 1", AMPFUSE_CLI_PATH));
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("ampfuse: error: AMPFUSE_FAULT='oom': unknown fault 'oom'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ampfuse::runtime
