// AMPFUSE_DUMP (ir/dump.h) through a whole compile: `all` prints every stage in pipeline
// order, generated code and assembly included; an unknown item is an error naming it.
#include "engine/execution/executor.h"
#include "ir/dump.h"
#include "ir/text_format.h"
#include "ir/type_inference.h"
#include "runtime/kernel_cache.h"
#include "tests/filecheck.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ampfuse::engine {
namespace {

// Sets AMPFUSE_DUMP for one scope.
class DumpEnv {
 public:
  explicit DumpEnv(const char* value) { ::setenv("AMPFUSE_DUMP", value, 1); }
  ~DumpEnv() { ::unsetenv("AMPFUSE_DUMP"); }
};

ir::Graph tiny_graph() {
  ir::Graph g = ir::parse_graph(R"(graph {
    %x = var input : f32[4,8]
    %a = _mul_scalar(%x) {scalar=2}
    %y = tanh(%a)
    return %y
  })");
  ir::infer_types(g);
  return g;
}

TEST(Dump, AllPrintsEveryStageInPipelineOrder) {
  // No disk cache either: the kernel is compiled (and its code dumped) now, whatever an
  // earlier run of the suite stored.
  runtime::KernelCache fresh(nullptr);
  ExecutorOptions opts;
  opts.cache = &fresh;
  std::string out;
  {
    const DumpEnv env("all");
    ::testing::internal::CaptureStderr();
    Executable::compile(tiny_graph(), opts);
    out = ::testing::internal::GetCapturedStderr();
  }
  EXPECT_FILECHECK(out, R"(
CHECK: // ----- input -----
CHECK: %y = tanh(%a)
CHECK: // ----- after infer-types -----
CHECK: // ----- after dce -----
CHECK: // ----- plan -----
CHECK-NEXT: kernel 0 [4,8] nodes: %a=_mul_scalar %y=tanh
CHECK: === kernel
CHECK: === LLVM IR (optimized)
CHECK: define void @
CHECK: assembly
CHECK: // ----- memory -----
CHECK: arena device:
)");
}

TEST(Dump, OnlyTheNamedStages) {
  std::string out;
  {
    const DumpEnv env("plan,memory");
    ::testing::internal::CaptureStderr();
    Executable::compile(tiny_graph());
    out = ::testing::internal::GetCapturedStderr();
  }
  EXPECT_FILECHECK(out, R"(
CHECK-NOT: // ----- input
CHECK: // ----- plan -----
CHECK-NOT: LLVM IR
CHECK: // ----- memory -----
CHECK: %y  output 0
)");
}

TEST(Dump, AnUnknownItemIsAnError) {
  const DumpEnv env("plan,kernels");
  EXPECT_ERROR(Executable::compile(tiny_graph()),
               "AMPFUSE_DUMP='plan,kernels': unknown item 'kernels' (expected a comma-separated list of ir, plan, "
               "memory, code, asm, or all)");
  EXPECT_ERROR(dump_enabled("plan"), "unknown item 'kernels'");
}

}  // namespace
}  // namespace ampfuse::engine
