// amp::init, amp::Scope and the environment switches (engine/api/amp_scope.h): precedence,
// nesting, per-thread independence, and errors for bad values.
#include "engine/api/amp_scope.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

namespace ampfuse::amp {
namespace {

using ir::DType;

// Every test starts and ends with no init and no environment switches.
class AmpScope : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    reset();
    ::unsetenv("MXNET_AMP_FUSE");
    ::unsetenv("AMPFUSE_AMP_DTYPE");
  }
};

std::optional<DType> target_now() {
  const auto o = effective_options();
  return o ? std::optional<DType>(o->target) : std::nullopt;
}

TEST_F(AmpScope, OffByDefault) {
  EXPECT_FALSE(effective_options().has_value());
  EXPECT_EQ(fingerprint(effective_options()), "");
}

TEST_F(AmpScope, EnvironmentSwitchesOnAndPicksTheDtype) {
  ::setenv("MXNET_AMP_FUSE", "0", 1);
  EXPECT_FALSE(effective_options().has_value());
  ::setenv("MXNET_AMP_FUSE", "1", 1);
  EXPECT_EQ(target_now(), DType::bf16);
  ::setenv("AMPFUSE_AMP_DTYPE", "fp16", 1);
  EXPECT_EQ(target_now(), DType::f16);
  ::setenv("AMPFUSE_AMP_DTYPE", "bfloat16", 1);
  EXPECT_EQ(target_now(), DType::bf16);
  // The dtype switch alone does not turn AMP on.
  ::unsetenv("MXNET_AMP_FUSE");
  EXPECT_FALSE(effective_options().has_value());
}

TEST_F(AmpScope, BadEnvironmentValuesNameTheVariable) {
  ::setenv("MXNET_AMP_FUSE", "yes", 1);
  EXPECT_ERROR(effective_options(), "MXNET_AMP_FUSE='yes'");
  ::setenv("MXNET_AMP_FUSE", "1", 1);
  ::setenv("AMPFUSE_AMP_DTYPE", "fp8", 1);
  EXPECT_ERROR(effective_options(), "AMPFUSE_AMP_DTYPE='fp8'");
}

TEST_F(AmpScope, InitTurnsOnWithItsTargetAndOverridesAndResetUndoes) {
  Overrides ov;
  ov.fp32_ops = {"FullyConnected"};
  ov.excluded_nodes = {"dense1"};
  init(DType::f16, ov);
  EXPECT_TRUE(initialized());
  const auto o = effective_options();
  ASSERT_TRUE(o);
  EXPECT_EQ(o->target, DType::f16);
  EXPECT_EQ(o->fp32_ops, std::vector<std::string>{"FullyConnected"});
  EXPECT_EQ(o->excluded_nodes, std::vector<std::string>{"dense1"});
  // init's target wins over the environment's.
  ::setenv("AMPFUSE_AMP_DTYPE", "bf16", 1);
  EXPECT_EQ(target_now(), DType::f16);
  reset();
  EXPECT_FALSE(initialized());
  EXPECT_FALSE(effective_options().has_value());
}

TEST_F(AmpScope, InitValidatesAtOnceNamingTheList) {
  Overrides ov;
  ov.fp32_ops = {"FullyConected"};
  EXPECT_ERROR(init(DType::bf16, ov), "amp::init: fp32_ops: unknown op 'FullyConected'");
  EXPECT_ERROR(init(DType::f32), "amp::init: the AMP target must be f16 or bf16, not f32");
  EXPECT_FALSE(initialized());
}

TEST_F(AmpScope, ScopesNestAndTheInnermostDecides) {
  EXPECT_FALSE(effective_options());
  {
    Scope on(true);
    EXPECT_EQ(target_now(), DType::bf16);
    {
      Scope off(false);
      EXPECT_FALSE(effective_options());
      {
        Scope fp16(DType::f16);
        EXPECT_EQ(target_now(), DType::f16);
        {
          Scope on_again(true);  // names no dtype: the f16 scope's target holds
          EXPECT_EQ(target_now(), DType::f16);
        }
      }
      EXPECT_FALSE(effective_options());
    }
    EXPECT_EQ(target_now(), DType::bf16);
  }
  EXPECT_FALSE(effective_options());
  // A scope turns off what init and the environment turned on.
  ::setenv("MXNET_AMP_FUSE", "1", 1);
  init(DType::bf16);
  {
    Scope off(false);
    EXPECT_FALSE(effective_options());
  }
  EXPECT_TRUE(effective_options());
}

TEST_F(AmpScope, OutOfOrderDestructionRemovesOnlyThatScope) {
  auto outer = std::make_unique<Scope>(false);
  auto inner = std::make_unique<Scope>(DType::f16);
  outer.reset();  // the inner one is still in force
  EXPECT_EQ(target_now(), DType::f16);
  inner.reset();
  EXPECT_FALSE(effective_options());
}

TEST_F(AmpScope, ScopesArePerThread) {
  std::optional<DType> seen_a, seen_b, seen_b_after;
  std::atomic<int> stage{0};
  // Thread A holds an f16 scope while thread B looks, then B opens its own off scope
  // while A looks again.
  std::thread a([&] {
    Scope s(DType::f16);
    seen_a = target_now();
    stage = 1;
    while (stage != 2) std::this_thread::yield();
    EXPECT_EQ(target_now(), DType::f16);  // B's scope does not reach here
    stage = 3;
  });
  std::thread b([&] {
    while (stage != 1) std::this_thread::yield();
    seen_b = target_now();  // A's scope does not reach here
    {
      Scope s(true);
      seen_b_after = target_now();
      stage = 2;
      while (stage != 3) std::this_thread::yield();
    }
  });
  a.join();
  b.join();
  EXPECT_EQ(seen_a, DType::f16);
  EXPECT_EQ(seen_b, std::nullopt);
  EXPECT_EQ(seen_b_after, DType::bf16);
  EXPECT_FALSE(effective_options());  // the main thread saw none of it
}

TEST_F(AmpScope, FingerprintsDifferExactlyWhenOptionsDo) {
  engine::AmpOptions a;
  engine::AmpOptions b = a;
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  b.fp32_ops = {"exp", "log"};
  a.fp32_ops = {"log", "exp"};  // order does not matter
  EXPECT_EQ(fingerprint(a), fingerprint(b));
  b.target = DType::f16;
  EXPECT_NE(fingerprint(a), fingerprint(b));
  b = a;
  b.excluded_nodes = {"x"};
  EXPECT_NE(fingerprint(a), fingerprint(b));
  b = a;
  b.cast_params_offline = true;
  EXPECT_NE(fingerprint(a), fingerprint(b));
  EXPECT_NE(fingerprint(a), fingerprint(std::nullopt));
}

}  // namespace
}  // namespace ampfuse::amp
