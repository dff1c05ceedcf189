// The loss scaler (engine/api/loss_scaler.h): the dynamic policy and its clamps, the fused
// mixed-dtype unscale + non-finite check against a plain scalar loop, and checkpoints.
#include "engine/execution/executor.h"
#include "engine/api/loss_scaler.h"
#include "ir/builder.h"
#include "ir/lowp.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ampfuse::engine {
namespace {

using ir::DType;
using runtime::Tensor;
using ampfuse::testing::ScopedTempDir;

LossScalerOptions small_options() {
  LossScalerOptions o;
  o.init_scale = 16;
  o.growth_interval = 3;
  o.min_scale = 2;
  o.max_scale = 64;
  return o;
}

TEST(LossScaler, DefaultsAreMxnetsPolicy) {
  const LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.options().dynamic);
  EXPECT_EQ(s.options().growth_interval, 2000);
  EXPECT_EQ(s.options().growth_factor, 2.0);
  EXPECT_EQ(s.options().backoff_factor, 0.5);
  EXPECT_EQ(s.options().max_scale, 16777216.0);
}

TEST(LossScaler, GrowsAfterIntervalOfCleanStepsAndHalvesOnOverflow) {
  LossScaler s(small_options());
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16);
  EXPECT_TRUE(s.update(false));  // third clean step in a row
  EXPECT_EQ(s.scale(), 32);
  EXPECT_EQ(s.counters().growths, 1);
  EXPECT_EQ(s.counters().clean_run, 0);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // an overflow restarts the run
  EXPECT_EQ(s.scale(), 16);
  EXPECT_EQ(s.counters().clean_run, 0);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 32);
  EXPECT_EQ(s.counters().steps, 9);
  EXPECT_EQ(s.counters().overflows, 1);
  EXPECT_EQ(s.counters().backoffs, 1);
  EXPECT_EQ(s.counters().growths, 2);
}

TEST(LossScaler, ClampsAtMinAndMaxScale) {
  LossScaler s(small_options());
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 2);  // 16 -> 8 -> 4 -> 2, then held
  EXPECT_EQ(s.counters().backoffs, 3);
  EXPECT_EQ(s.counters().overflows, 10);
  for (int i = 0; i < 30; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 64);  // 2 -> 4 -> ... -> 64, then held
  EXPECT_EQ(s.counters().growths, 5);
  s.set_scale(1e9);
  EXPECT_EQ(s.scale(), 64);
  s.set_scale(0.001);
  EXPECT_EQ(s.scale(), 2);
}

TEST(LossScaler, NonPowerOfTwoFactors) {
  LossScalerOptions o = small_options();
  o.growth_factor = 1.5;
  o.backoff_factor = 0.25;
  o.max_scale = 1000;
  LossScaler s(o);
  s.update(true);
  EXPECT_EQ(s.scale(), 4);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 6);
}

TEST(LossScaler, StaticModeKeepsTheScaleButReportsOverflow) {
  LossScalerOptions o;
  o.dynamic = false;
  o.init_scale = 128;
  o.growth_interval = 1;
  LossScaler s(o);
  EXPECT_FALSE(s.update(true));
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 128);
  EXPECT_EQ(s.counters().overflows, 1);
  EXPECT_EQ(s.counters().growths, 0);
  EXPECT_EQ(s.counters().backoffs, 0);
}

TEST(LossScaler, RejectsBadOptionsNamingThem) {
  LossScalerOptions o;
  o.growth_interval = 0;
  EXPECT_ERROR(LossScaler(o), "growth_interval=0");
  o = {};
  o.backoff_factor = 1;
  EXPECT_ERROR(LossScaler(o), "backoff_factor=1");
  o = {};
  o.growth_factor = 0.5;
  EXPECT_ERROR(LossScaler(o), "growth_factor=0.5");
  o = {};
  o.init_scale = 1e30;
  EXPECT_ERROR(LossScaler(o), "init_scale");
  o = {};
  o.min_scale = 0;
  EXPECT_ERROR(LossScaler(o), "min_scale=0");
  o = {};
  o.max_scale = 0.5;
  EXPECT_ERROR(LossScaler(o), "max_scale=0.5");
  LossScaler s;
  EXPECT_ERROR(s.set_scale(std::nan("")), "set_scale");
}

// ---- the unscale pass

// Random finite values of `dt`, bit patterns spread over the whole exponent range
// (subnormals included) so every rounding path is taken.
Tensor random_tensor(DType dt, int64_t n, std::mt19937& rng) {
  Tensor t({dt, {n}});
  std::uniform_int_distribution<uint32_t> bits;
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::f32) {
      uint32_t u;
      do u = bits(rng); while ((u & 0x7F800000u) == 0x7F800000u);
      t.data<uint32_t>()[i] = u;
    } else {
      const uint16_t mask = dt == DType::f16 ? 0x7C00u : 0x7F80u;
      uint16_t h;
      do h = static_cast<uint16_t>(bits(rng)); while ((h & mask) == mask);
      t.data<uint16_t>()[i] = h;
    }
  }
  return t;
}

// The definition: widen, multiply by the f32 1/scale in f32, round to nearest even.
bool reference_unscale(Tensor& t, double scale) {
  const float inv = static_cast<float>(1.0 / scale);
  bool bad = false;
  for (int64_t i = 0; i < t.size(); ++i) {
    float y;
    if (t.dtype() == DType::f32) {
      y = t.data<float>()[i] * inv;
      t.data<float>()[i] = y;
    } else if (t.dtype() == DType::bf16) {
      const uint16_t r = ir::f32_to_bf16_bits(ir::bf16_bits_to_f32(t.data<uint16_t>()[i]) * inv);
      t.data<uint16_t>()[i] = r;
      y = ir::bf16_bits_to_f32(r);
    } else {
      const uint16_t r = ir::f32_to_f16_bits(ir::f16_bits_to_f32(t.data<uint16_t>()[i]) * inv);
      t.data<uint16_t>()[i] = r;
      y = ir::f16_bits_to_f32(r);
    }
    bad = bad || !std::isfinite(y);
  }
  return bad;
}

void expect_same_bits(const std::vector<Tensor>& want, const std::vector<Tensor>& got) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(want[k].bytes(), got[k].bytes());
    if (want[k].bytes() == 0) continue;
    ASSERT_EQ(std::memcmp(want[k].raw(), got[k].raw(), want[k].bytes()), 0)
        << "tensor " << k << " (" << ir::type_str(got[k].type()) << ")";
  }
}

std::vector<Tensor> mixed_tensors(const std::vector<int64_t>& sizes, std::mt19937& rng) {
  const DType kinds[] = {DType::f32, DType::f16, DType::bf16};
  std::vector<Tensor> ts;
  for (size_t i = 0; i < sizes.size(); ++i) ts.push_back(random_tensor(kinds[i % 3], sizes[i], rng));
  return ts;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

TEST(LossScaler, UnscaleMixedDtypesIsBitExactAgainstAScalarLoop) {
  std::mt19937 rng(11);
  // Sizes around the pool's chunking: empty, single, odd, and large enough to split.
  const std::vector<int64_t> sizes = {0, 1, 7, 1000, 33, 100003, 65536, 5, 0, 200001, 17, 3};
  runtime::ThreadPool pool(4);  // more workers than cores: ranges split inside and across tensors
  LossScalerOptions o;
  o.min_scale = 1.0 / 64;
  for (double scale : {65536.0, 3.0, 1000.0, 1.0, 0.25}) {
    LossScaler s(o);
    s.set_scale(scale);
    std::vector<Tensor> got = mixed_tensors(sizes, rng);
    std::vector<Tensor> want = clones(got);
    bool want_bad = false;
    for (Tensor& t : want) want_bad = reference_unscale(t, scale) || want_bad;
    EXPECT_EQ(s.unscale_and_check(got, &pool), want_bad) << "scale " << scale;
    expect_same_bits(want, got);
    // The global pool too.
    std::vector<Tensor> again = mixed_tensors(sizes, rng);
    std::vector<Tensor> again_want = clones(again);
    for (Tensor& t : again_want) reference_unscale(t, scale);
    s.unscale_and_check(again);
    expect_same_bits(again_want, again);
  }
}

// Every f16 and bf16 bit pattern (NaNs, infinities, subnormals included) under scales that
// round, overflow and underflow: the vectorized loops equal ir/lowp.h bit for bit.
TEST(LossScaler, UnscaleEvery16BitPatternIsBitExact) {
  LossScalerOptions o;
  o.min_scale = 1.0 / 65536;
  runtime::ThreadPool pool(3);
  for (DType dt : {DType::f16, DType::bf16})
    for (double scale : {65536.0, 3.0, 1000.0, 0.25, 1.0 / 65536, 1e-3 * 7}) {
      LossScaler s(o);
      s.set_scale(scale);
      Tensor t({dt, {65536}});
      for (int i = 0; i < 65536; ++i) t.data<uint16_t>()[i] = static_cast<uint16_t>(i);
      std::vector<Tensor> got = {t};
      std::vector<Tensor> want = {t.clone()};
      reference_unscale(want[0], scale);
      EXPECT_TRUE(s.unscale_and_check(got, &pool));  // the NaN and Inf patterns
      expect_same_bits(want, got);
    }
}

TEST(LossScaler, UnscaleBelowOneOverflowingTheDtypeIsFlagged) {
  LossScalerOptions o;
  o.min_scale = 1.0 / 1024;
  LossScaler s(o);
  s.set_scale(0.25);
  Tensor t({DType::f16, {3}});
  t.data<uint16_t>()[0] = ir::f32_to_f16_bits(1.0f);
  t.data<uint16_t>()[1] = ir::f32_to_f16_bits(60000.0f);  // * 4 > 65504
  t.data<uint16_t>()[2] = ir::f32_to_f16_bits(-2.0f);
  std::vector<Tensor> grads = {t};
  EXPECT_TRUE(s.unscale_and_check(grads));
  EXPECT_EQ(t.get_f64(0), 4.0);
  EXPECT_TRUE(std::isinf(t.get_f64(1)));
  EXPECT_EQ(t.get_f64(2), -8.0);
}

void poison(Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::f32) t.data<float>()[i] = v;
  else if (t.dtype() == DType::bf16) t.data<uint16_t>()[i] = ir::f32_to_bf16_bits(v);
  else t.data<uint16_t>()[i] = ir::f32_to_f16_bits(v);
}

TEST(LossScaler, NonFiniteInAnyTensorSetsTheOneFlag) {
  std::mt19937 rng(5);
  const std::vector<int64_t> sizes = {50000, 1, 0, 70000, 9, 1, 40000};
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  runtime::ThreadPool pool(3);
  LossScaler s;
  // Clean: no flag.
  {
    std::vector<Tensor> ts = mixed_tensors(sizes, rng);
    EXPECT_FALSE(s.unscale_and_check(ts, &pool));
  }
  struct Spot {
    size_t tensor;
    int64_t index;
    const char* what;
  };
  const Spot spots[] = {{0, 0, "first element of the first tensor"},
                        {6, 39999, "last element of the last tensor"},
                        {3, 35000, "middle of a middle tensor"},
                        {1, 0, "a 1-element tensor"},
                        {5, 0, "a 1-element tensor near the end"},
                        {4, 8, "a small tensor"}};
  for (const Spot& spot : spots)
    for (float bad : kBad) {
      std::vector<Tensor> ts = mixed_tensors(sizes, rng);
      poison(ts[spot.tensor], spot.index, bad);
      EXPECT_TRUE(s.unscale_and_check(ts, &pool)) << spot.what << " holding " << bad;
      std::vector<Tensor> ts2 = mixed_tensors(sizes, rng);
      poison(ts2[spot.tensor], spot.index, bad);
      EXPECT_TRUE(LossScaler::any_nonfinite(ts2, &pool)) << spot.what << " holding " << bad;
    }
  // An empty list, and a list of empty tensors, have nothing non-finite.
  std::vector<Tensor> none;
  EXPECT_FALSE(s.unscale_and_check(none));
  std::vector<Tensor> empties = {Tensor({DType::f32, {0}}), Tensor({DType::bf16, {3, 0}})};
  EXPECT_FALSE(s.unscale_and_check(empties));
}

TEST(LossScaler, OneCallOverMoreThan200Tensors) {
  std::mt19937 rng(3);
  std::vector<int64_t> sizes;
  for (int i = 0; i < 1000; ++i) sizes.push_back(1 + (i * 37) % 900);
  runtime::ThreadPool pool(4);
  LossScaler s;
  std::vector<Tensor> got = mixed_tensors(sizes, rng);
  std::vector<Tensor> want = clones(got);
  for (Tensor& t : want) reference_unscale(t, s.scale());
  EXPECT_FALSE(s.unscale_and_check(got, &pool));
  expect_same_bits(want, got);
  // A NaN in tensor 731 of 1000 (past several 200-array chunks) is still seen.
  std::vector<Tensor> bad = mixed_tensors(sizes, rng);
  poison(bad[731], 0, std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(s.unscale_and_check(bad, &pool));
}

// The unscale and the check are generated kernels (engine/training/multi_tensor.h), one per
// dtype, with the scale a run-time parameter: new scales compile nothing.
TEST(LossScaler, NewScalesCompileNothing) {
  std::mt19937 rng(8);
  LossScalerOptions o;
  o.min_scale = 1.0 / 64;
  LossScaler s(o);
  std::vector<Tensor> ts = mixed_tensors({100, 2000, 300}, rng);
  s.set_scale(4);
  s.unscale_and_check(ts);
  LossScaler::any_nonfinite(ts);
  const int64_t compiled = runtime::KernelCache::global().stats().compilations;
  for (double scale : {2.0, 3.0, 0.5, 1e4, 1.0}) {
    s.set_scale(scale);
    s.unscale_and_check(ts);
  }
  LossScaler::any_nonfinite(ts);
  EXPECT_EQ(runtime::KernelCache::global().stats().compilations, compiled);
}

TEST(LossScaler, RejectsOtherDtypesNamingTheTensor) {
  LossScaler s;
  std::vector<Tensor> ts = {Tensor::zeros({DType::f32, {2}}), Tensor::zeros({DType::i32, {2}})};
  EXPECT_ERROR(s.unscale_and_check(ts), "tensor 1 is i32[2]");
  std::vector<Tensor> no_storage = {Tensor()};
  // A default tensor is an f32 scalar without storage.
  EXPECT_ERROR(s.unscale_and_check(no_storage), "tensor 0 (f32[]) has no storage");
}

// The flag a fused kernel computes (ExecutorOptions::check_nonfinite) drives the policy
// without any extra pass.
TEST(LossScaler, TakesTheFusedKernelsNonFiniteFlag) {
  ir::GraphBuilder b;
  const ir::ValueRef x = b.input("x", {DType::f32, {64}});
  const ir::ValueRef y = b.op("elemwise_mul", {x, x});
  b.output(b.op("_mul_scalar", {y}, {{"scalar", "0.5"}}));
  ExecutorOptions eo;
  eo.check_nonfinite = true;
  const Executable exe = Executable::compile(b.finish(), eo);
  Tensor in = Tensor::zeros({DType::f32, {64}});
  LossScaler s;
  RunStats rs;
  exe.run({{"x", in}}, &rs);
  EXPECT_FALSE(rs.nonfinite);
  EXPECT_TRUE(s.update(rs.nonfinite));
  in.data<float>()[40] = 1e30f;  // squares to +Inf inside the kernel
  exe.run({{"x", in}}, &rs);
  EXPECT_TRUE(rs.nonfinite);
  EXPECT_FALSE(s.update(rs.nonfinite));
  EXPECT_EQ(s.scale(), 32768.0);
}

// ---- checkpoints

// A fixed pattern of overflows, as a training run would see them.
bool overflow_at(int step) { return step % 7 == 3 || step % 11 == 0; }

TEST(LossScaler, SaveAndLoadContinueIdentically) {
  ScopedTempDir dir;
  LossScalerOptions o = small_options();
  o.growth_interval = 4;
  o.max_scale = 1 << 20;
  o.growth_factor = 4;
  LossScaler a(o);
  for (int step = 0; step < 27; ++step) a.update(overflow_at(step));
  const std::string path = dir.file("scaler.json");
  a.save(path);
  LossScaler b = LossScaler::load(path);
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.counters(), a.counters());
  EXPECT_GT(b.counters().clean_run, 0);  // mid-interval: the count must survive
  EXPECT_EQ(b.options().growth_interval, 4);
  EXPECT_EQ(b.options().growth_factor, 4);
  for (int step = 27; step < 200; ++step) {
    EXPECT_EQ(a.update(overflow_at(step)), b.update(overflow_at(step)));
    ASSERT_EQ(a.scale(), b.scale()) << "step " << step;
    ASSERT_EQ(a.counters(), b.counters()) << "step " << step;
  }
  EXPECT_EQ(LossScaler::from_json(a.to_json()).to_json(), a.to_json());
}

TEST(LossScaler, LoadErrorsNameTheField) {
  ScopedTempDir dir;
  EXPECT_ERROR(LossScaler::load(dir.file("missing.json")), "missing.json: no such file");
  const std::string good = LossScaler().to_json();
  EXPECT_ERROR(LossScaler::from_json("{"), "not valid JSON");
  std::string no_clean = good;
  no_clean.replace(no_clean.find("\"clean_run\""), 11, "\"clean_ru\"");
  EXPECT_ERROR(LossScaler::from_json(no_clean), "missing field 'counters.clean_run'");
  std::string bad_interval = good;
  bad_interval.replace(bad_interval.find("2000"), 4, "\"x\"");
  EXPECT_ERROR(LossScaler::from_json(bad_interval), "field 'options.growth_interval' must be an integer");
  std::string bad_scale = good;
  bad_scale.replace(bad_scale.find("\"scale\": 65536.0"), 16, "\"scale\": 1e30");
  EXPECT_ERROR(LossScaler::from_json(bad_scale), "field 'scale'=1e+30");
}

}  // namespace
}  // namespace ampfuse::engine
