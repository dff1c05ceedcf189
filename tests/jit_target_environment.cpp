// The JIT target (AMPFUSE_CPU) is checked once, before any test of ampfuse_tests runs.
//
// On a machine that cannot run the level asked for (AMPFUSE_CPU=x86-64-v4 without AVX-512)
// every test is skipped with the reason, on a line that starts like gtest's own skip lines:
// ctest reports a test case skipped on "[  SKIPPED ]" (gtest_discover_tests' default), and
// the forced-CPU entries on the whole marker (CMakeLists.txt). An unknown value fails the run.
#include "codegen/llvm_target.h"

#include <gtest/gtest.h>

namespace ampfuse::testing {
namespace {

// CMakeLists.txt matches this text (AMPFUSE_TESTS_SKIP_MARKER); keep the two in step.
constexpr const char* kSkipMarker = "[  SKIPPED ] every test of ampfuse_tests:";

class JitTargetEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    try {
      const codegen::JitTarget& target = codegen::jit_target();
      std::printf("JIT target: %s=%s (%s, %d-bit vectors)\n", codegen::kTargetCpuVariable, target.choice.c_str(),
                  target.cpu.c_str(), codegen::target_vector_bits());
    } catch (const codegen::CpuLacksFeatures& e) {
      GTEST_SKIP() << kSkipMarker << ' ' << e.what();
    } catch (const Error& e) {
      FAIL() << e.what();
    }
  }
};

[[maybe_unused]] const ::testing::Environment* const kRegistered =
    ::testing::AddGlobalTestEnvironment(new JitTargetEnvironment);

}  // namespace
}  // namespace ampfuse::testing
