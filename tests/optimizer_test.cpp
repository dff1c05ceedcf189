// Optimizers as generated multi-tensor kernels (engine/training/optimizer.h): SGD, Adam and
// AdamW against a double reference of MXNet's formulas, f32/f16/bf16 gradients, fused
// low-precision copies, one launch over mixed lists, no recompiles for new hyperparameters,
// and overflow injection that must leave every buffer untouched.
#include "engine/training/multi_tensor.h"
#include "engine/training/optimizer.h"
#include "ir/lowp.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"
#include "tests/test_util.h"

#include <fmt/format.h>
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

constexpr int64_t kBig = (int64_t{1} << 20) + 37;  // > 2^20, not a multiple of 64

Tensor random_f32(int64_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  Tensor t({DType::f32, {n}});
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = u(rng);
  return t;
}

// A gradient of `dt`: random f32 values rounded to dt (the reference widens them exactly).
Tensor random_grad(DType dt, int64_t n, std::mt19937& rng, float range) {
  const Tensor f = random_f32(n, rng, -range, range);
  return dt == DType::f32 ? f : runtime::cast(f, dt);
}

// The hyperparameters reach the kernel as f32 values, as MXNet's float operator parameters.
double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

// One parameter's values, in double.
struct RefParam {
  std::vector<double> w, s0, s1;
};

RefParam snapshot(const Optimizer& opt, int i) {
  RefParam r;
  r.w = runtime::to_f64_vector(opt.master(i));
  if (opt.num_states() > 0) r.s0 = runtime::to_f64_vector(opt.state(i, 0));
  if (opt.num_states() > 1) r.s1 = runtime::to_f64_vector(opt.state(i, 1));
  return r;
}

// MXNet's update formulas, written out independently of the kernels, in double. `t` is the
// step being applied (Adam's bias correction, computed in double on the host).
RefParam reference_step(const OptimizerOptions& o, const RefParam& before, const Tensor& grad, double rescale, int64_t t) {
  RefParam r = before;
  const std::vector<double> grads = runtime::to_f64_vector(grad);
  const double lr = f32(o.lr), wd = f32(o.wd), clip = f32(o.clip_gradient), rs = f32(rescale);
  const double b1 = f32(o.beta1), b2 = f32(o.beta2), eps = f32(o.epsilon), mom = f32(o.momentum);
  const double lr_t = f32(o.lr * std::sqrt(1 - std::pow(o.beta2, static_cast<double>(t))) /
                          (1 - std::pow(o.beta1, static_cast<double>(t))));
  for (size_t k = 0; k < grads.size(); ++k) {
    double g = rs * grads[k];
    if (o.clip_gradient >= 0) g = std::min(std::max(g, -clip), clip);
    const double w = before.w[k];
    switch (o.kind) {
      case OptimizerKind::sgd:
        g += wd * w;
        if (o.momentum != 0) {
          r.s0[k] = mom * before.s0[k] - lr * g;
          r.w[k] = w + r.s0[k];
        } else {
          r.w[k] = w - lr * g;
        }
        break;
      case OptimizerKind::adam:
      case OptimizerKind::adamw: {
        if (o.kind == OptimizerKind::adam) g += wd * w;
        r.s0[k] = b1 * before.s0[k] + (1 - b1) * g;
        r.s1[k] = b2 * before.s1[k] + (1 - b2) * g * g;
        const double step = lr_t * r.s0[k] / (std::sqrt(r.s1[k]) + eps);
        r.w[k] = o.kind == OptimizerKind::adam ? w - step : w - (step + wd * w);
        break;
      }
    }
  }
  return r;
}

// f32 arithmetic against double: a few roundings of values of order 1.
void expect_close(const std::vector<double>& want, const std::vector<double>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  // Relative to each value and to the largest of the tensor: w - step cancels where w is
  // small, leaving the absolute error of the step.
  double largest = 0;
  for (double v : want) largest = std::max(largest, std::abs(v));
  int reported = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double tol = 4e-6 * std::abs(want[k]) + 1e-6 * largest;
    if (!(std::abs(want[k] - got[k]) <= tol) && reported++ < 5)
      ADD_FAILURE() << what << "[" << k << "]: want " << want[k] << ", got " << got[k];
  }
}

void expect_matches(const Optimizer& opt, int i, const RefParam& want, const std::string& what) {
  const RefParam got = snapshot(opt, i);
  expect_close(want.w, got.w, what + " master");
  expect_close(want.s0, got.s0, what + " state 0");
  expect_close(want.s1, got.s1, what + " state 1");
}

// The low-precision copy is the new master rounded to nearest even, bit for bit.
void expect_lowp_is_rounded_master(const Optimizer& opt, int i) {
  const Tensor* lp = opt.lowp(i);
  ASSERT_NE(lp, nullptr);
  EXPECT_EQ(&opt.forward_value(i), lp);
  const Tensor& m = opt.master(i);
  for (int64_t k = 0; k < m.size(); ++k) {
    const float v = m.data<float>()[k];
    const uint16_t want = lp->dtype() == DType::bf16 ? ir::f32_to_bf16_bits(v) : ir::f32_to_f16_bits(v);
    ASSERT_EQ(lp->data<uint16_t>()[k], want) << "param " << i << " element " << k;
  }
}

struct ParamSetup {
  int64_t size;
  DType grad;
  std::optional<DType> lowp;
};

// Builds an optimizer with `setup`, runs `steps` steps with fresh random gradients and checks
// every step against the reference. Returns nothing; failures name the kind, step and param.
void run_against_reference(OptimizerOptions o, const std::vector<ParamSetup>& setup, int steps, double rescale,
                           float grad_range, runtime::ThreadPool* pool = nullptr) {
  std::mt19937 rng(42);
  Optimizer opt(o, pool);
  for (size_t i = 0; i < setup.size(); ++i)
    opt.add_param(fmt::format("p{}", i), random_f32(setup[i].size, rng), setup[i].lowp);
  for (int s = 1; s <= steps; ++s) {
    std::vector<Tensor> grads;
    std::vector<RefParam> want;
    for (size_t i = 0; i < setup.size(); ++i) {
      grads.push_back(random_grad(setup[i].grad, setup[i].size, rng, grad_range));
      want.push_back(reference_step(o, snapshot(opt, static_cast<int>(i)), grads.back(), rescale, s));
    }
    const OptimizerStep r = opt.step(grads, rescale);
    ASSERT_TRUE(r.applied);
    ASSERT_FALSE(r.overflow);
    EXPECT_EQ(opt.steps_applied(), s);
    for (size_t i = 0; i < setup.size(); ++i) {
      const std::string what = "step " + std::to_string(s) + " param " + std::to_string(i) + " (" +
                               std::to_string(setup[i].size) + " elements)";
      expect_matches(opt, static_cast<int>(i), want[i], what);
      if (setup[i].lowp) expect_lowp_is_rounded_master(opt, static_cast<int>(i));
      else EXPECT_EQ(&opt.forward_value(static_cast<int>(i)), &opt.master(static_cast<int>(i)));
    }
  }
}

const std::vector<ParamSetup> kOddSizesF32 = {
    {0, DType::f32, {}}, {1, DType::f32, {}}, {7, DType::f32, {}}, {61, DType::f32, {}}, {1031, DType::f32, {}}};

TEST(Optimizer, SgdMatchesMxnetFormulas) {
  OptimizerOptions o;
  o.lr = 0.05;
  o.wd = 0.01;
  run_against_reference(o, kOddSizesF32, 4, 0.5, 2);
  o.clip_gradient = 0.3;  // rescale * grad spans [-1, 1]: many values clipped
  run_against_reference(o, kOddSizesF32, 3, 0.5, 2);
}

TEST(Optimizer, SgdMomentumMatchesMxnetFormulas) {
  OptimizerOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.wd = 0.001;
  run_against_reference(o, kOddSizesF32, 5, 1.0 / 1024, 1024);
  o.clip_gradient = 0.25;
  run_against_reference(o, kOddSizesF32, 3, 1.0 / 1024, 1024);
}

TEST(Optimizer, AdamMatchesMxnetFormulasWithBiasCorrection) {
  OptimizerOptions o;
  o.kind = OptimizerKind::adam;
  o.lr = 0.01;
  o.wd = 0.01;
  run_against_reference(o, kOddSizesF32, 5, 1.0 / 8, 8);
  o.clip_gradient = 0.5;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  o.epsilon = 1e-6;
  run_against_reference(o, kOddSizesF32, 3, 1.0 / 8, 8);
}

TEST(Optimizer, AdamWDecouplesWeightDecay) {
  OptimizerOptions o;
  o.kind = OptimizerKind::adamw;
  o.lr = 0.01;
  o.wd = 0.1;  // large, so that adding it to g instead (Adam's way) would fail the reference
  run_against_reference(o, kOddSizesF32, 5, 0.25, 4);
  o.clip_gradient = 0.2;
  run_against_reference(o, kOddSizesF32, 3, 0.25, 4);
}

// Gradients of every dtype, low-precision copies of both kinds and none, in one list, with a
// tensor over 2^20 elements, on a 4-thread pool (ranges split inside and across tensors).
TEST(Optimizer, MixedDtypesAndLowpCopiesInOneLaunch) {
  runtime::ThreadPool pool(4);
  const std::vector<ParamSetup> setup = {
      {61, DType::bf16, DType::bf16}, {0, DType::f16, DType::f16},   {1031, DType::f16, DType::f16},
      {1, DType::f32, DType::bf16},   {7, DType::bf16, {}},          {kBig, DType::bf16, DType::bf16},
      {63, DType::f16, {}},           {65, DType::f32, DType::f16},  {200, DType::f32, {}}};
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    SCOPED_TRACE(static_cast<int>(kind));
    OptimizerOptions o;
    o.kind = kind;
    o.lr = 0.02;
    o.momentum = kind == OptimizerKind::sgd ? 0.9 : 0;
    o.wd = 0.01;
    run_against_reference(o, setup, 3, 1.0 / 256, 256, &pool);
  }
}

// A learning-rate schedule, a new loss scale, clipping on and off, new betas: the kernels
// compiled for the first step serve every later one.
TEST(Optimizer, NewHyperparametersCompileNothing) {
  runtime::KernelCache cache;
  std::mt19937 rng(7);
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = kind == OptimizerKind::sgd ? 0.5 : 0;
    Optimizer opt(o, nullptr, &cache);
    opt.add_param("a", random_f32(100, rng), DType::bf16);
    opt.add_param("b", random_f32(3000, rng));
    const std::vector<Tensor> grads = {random_grad(DType::bf16, 100, rng, 1), random_grad(DType::f32, 3000, rng, 1)};
    ASSERT_TRUE(opt.step(grads, 1.0).applied);
    const int64_t compiled = cache.stats().compilations;
    for (int s = 0; s < 6; ++s) {
      opt.options().lr = 0.01 / (s + 1);
      opt.options().wd = 0.001 * s;
      opt.options().clip_gradient = s % 2 ? 0.5 : -1;
      if (kind == OptimizerKind::sgd) opt.options().momentum = 0.1 * s;
      else opt.options().beta1 = 0.9 - 0.05 * s, opt.options().beta2 = 0.99 + 0.001 * s;
      const double before = opt.master(1).data<float>()[0];
      ASSERT_TRUE(opt.step(grads, std::ldexp(1.0, -s)).applied);
      EXPECT_NE(opt.master(1).data<float>()[0], before);
    }
    EXPECT_EQ(cache.stats().compilations, compiled) << "kind " << static_cast<int>(kind);
    EXPECT_EQ(cache.stats().failures, 0);
  }
}

// ---- overflow

// Every byte an optimizer exposes: masters, states, low-precision copies.
std::vector<std::vector<uint8_t>> all_bytes(const Optimizer& opt) {
  std::vector<std::vector<uint8_t>> out;
  const auto add = [&](const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.size() ? t.raw() : nullptr);
    out.emplace_back(p, p + t.bytes());
  };
  for (int i = 0; i < opt.num_params(); ++i) {
    add(opt.master(i));
    for (int k = 0; k < opt.num_states(); ++k) add(opt.state(i, k));
    if (opt.lowp(i)) add(*opt.lowp(i));
  }
  return out;
}

void poison(Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::f32) t.data<float>()[i] = v;
  else if (t.dtype() == DType::bf16) t.data<uint16_t>()[i] = ir::f32_to_bf16_bits(v);
  else t.data<uint16_t>()[i] = ir::f32_to_f16_bits(v);
}

TEST(Optimizer, OverflowInAnyGradientChangesNothing) {
  const std::vector<ParamSetup> setup = {{61, DType::bf16, DType::bf16}, {1031, DType::f16, DType::f16},
                                         {1, DType::f32, {}},            {kBig, DType::bf16, DType::bf16},
                                         {0, DType::f32, {}},            {7, DType::f32, DType::f16}};
  const float kBad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()};
  runtime::ThreadPool pool(3);
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw}) {
    SCOPED_TRACE(static_cast<int>(kind));
    std::mt19937 rng(9);
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = kind == OptimizerKind::sgd ? 0.9 : 0;
    o.lr = 0.01;
    Optimizer opt(o, &pool);
    for (size_t i = 0; i < setup.size(); ++i)
      opt.add_param(fmt::format("p{}", i), random_f32(setup[i].size, rng), setup[i].lowp);
    std::vector<Tensor> grads;
    for (const ParamSetup& p : setup) grads.push_back(random_grad(p.grad, p.size, rng, 1));
    // One clean step first, so that the state is not all zeros.
    ASSERT_TRUE(opt.step(grads, 1.0).applied);
    const std::vector<std::vector<uint8_t>> before = all_bytes(opt);
    std::vector<RefParam> want;
    for (int i = 0; i < opt.num_params(); ++i) want.push_back(reference_step(o, snapshot(opt, i), grads[i], 0.5, 2));

    for (size_t i = 0; i < setup.size(); ++i) {
      const int64_t n = setup[i].size;
      if (n == 0) continue;
      // First, middle, last and the one before it (the vector loop's tail), and the middle
      // of a 64-element chunk of the large tensor.
      std::vector<int64_t> spots = {0, n / 2, n - 1, std::max<int64_t>(n - 2, 0)};
      if (n > (1 << 20)) spots.push_back((int64_t{1} << 20) + 5);
      for (int64_t at : spots)
        for (float bad : kBad) {
          Tensor& g = grads[i];
          Tensor saved = g.clone();
          poison(g, at, bad);
          const OptimizerStep r = opt.step(grads, 0.5);
          EXPECT_FALSE(r.applied) << "param " << i << " element " << at << " = " << bad;
          EXPECT_TRUE(r.overflow) << "param " << i << " element " << at << " = " << bad;
          EXPECT_EQ(opt.steps_applied(), 1);
          ASSERT_TRUE(all_bytes(opt) == before) << "param " << i << " element " << at << " = " << bad;
          std::memcpy(g.raw(), saved.raw(), g.bytes());
        }
    }
    // The backward pass's own flag skips the launch: nothing changes with clean gradients.
    const OptimizerStep skipped = opt.step(grads, 0.5, /*already_overflowed=*/true);
    EXPECT_FALSE(skipped.applied);
    EXPECT_TRUE(skipped.overflow);
    EXPECT_TRUE(all_bytes(opt) == before);
    EXPECT_EQ(opt.steps_applied(), 1);
    // The next clean step is the second one (t = 2 in Adam's bias correction), from the
    // values of the first.
    const OptimizerStep r = opt.step(grads, 0.5);
    ASSERT_TRUE(r.applied);
    EXPECT_FALSE(r.overflow);
    EXPECT_EQ(opt.steps_applied(), 2);
    for (int i = 0; i < opt.num_params(); ++i) {
      expect_matches(opt, i, want[i], "after the overflows, param " + std::to_string(i));
      if (opt.lowp(i)) expect_lowp_is_rounded_master(opt, i);
    }
  }
}

TEST(Optimizer, AlreadyOverflowedLaunchesNothing) {
  runtime::KernelCache cache;
  std::mt19937 rng(1);
  OptimizerOptions o;
  o.kind = OptimizerKind::adam;
  Optimizer opt(o, nullptr, &cache);
  opt.add_param("w", random_f32(5, rng), DType::f16);
  const std::vector<Tensor> grads = {random_grad(DType::f16, 5, rng, 1)};
  const std::vector<std::vector<uint8_t>> before = all_bytes(opt);
  const OptimizerStep r = opt.step(grads, 1.0, true);
  EXPECT_FALSE(r.applied);
  EXPECT_TRUE(r.overflow);
  EXPECT_EQ(cache.stats().hits + cache.stats().compilations, 0);  // no kernel was even looked up
  EXPECT_TRUE(all_bytes(opt) == before);
  EXPECT_EQ(opt.steps_applied(), 0);
}

TEST(Optimizer, EmptyListAndEmptyTensorsStep) {
  Optimizer none(OptimizerOptions{});
  EXPECT_TRUE(none.step({}, 1.0).applied);
  EXPECT_EQ(none.steps_applied(), 1);
  OptimizerOptions o;
  o.kind = OptimizerKind::adamw;
  Optimizer empty(o);
  empty.add_param("e", Tensor({DType::f32, {0, 3}}), DType::bf16);
  const std::vector<Tensor> grads = {Tensor({DType::f16, {0, 3}})};
  EXPECT_TRUE(empty.step(grads, 1.0).applied);
  EXPECT_EQ(empty.forward_value(0).type(), (ir::TensorType{DType::bf16, {0, 3}}));
}

TEST(Optimizer, RejectsBadArgumentsNamingThem) {
  std::mt19937 rng(2);
  const auto bad = [](auto set) {
    OptimizerOptions o;
    o.kind = OptimizerKind::adam;
    set(o);
    return o;
  };
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.lr = -1; })), "lr=-1");
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.beta1 = 1; })), "beta1=1");
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.beta2 = -0.5; })), "beta2=-0.5");
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.epsilon = 0; })), "epsilon=0");
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.wd = std::nan(""); })), "wd=nan");
  EXPECT_ERROR(Optimizer(bad([](OptimizerOptions& o) { o.clip_gradient = std::numeric_limits<double>::infinity(); })),
               "clip_gradient=inf");
  OptimizerOptions sgd;
  sgd.momentum = 1;
  EXPECT_ERROR(Optimizer(sgd), "momentum=1");

  Optimizer opt(OptimizerOptions{});
  opt.add_param("conv0_weight", random_f32(10, rng));
  opt.add_param("fc_bias", Tensor::zeros({DType::f32, {2, 3}}), DType::bf16);
  EXPECT_ERROR(opt.add_param("half", Tensor::zeros({DType::f16, {4}})), "param 2 'half': the initial value is f16[4]");
  EXPECT_ERROR(opt.add_param("lp", Tensor::zeros({DType::f32, {4}}), DType::f32), "param 2 'lp'");
  std::vector<Tensor> grads = {Tensor::zeros({DType::f32, {10}})};
  EXPECT_ERROR(opt.step(grads, 1.0), "1 gradients given for 2 params");
  grads.push_back(Tensor::zeros({DType::f32, {3, 2}}));
  EXPECT_ERROR(opt.step(grads, 1.0), "param 1 'fc_bias' is f32[3,2], the param is f32[2,3]");
  grads[1] = Tensor::zeros({DType::f64, {2, 3}});
  EXPECT_ERROR(opt.step(grads, 1.0), "param 1 'fc_bias' is f64[2,3]");
  grads[1] = Tensor::zeros({DType::bf16, {2, 3}});
  EXPECT_ERROR(opt.step(grads, 0.0), "rescale=0");
  opt.options().lr = -0.5;
  EXPECT_ERROR(opt.step(grads, 1.0), "lr=-0.5");
  opt.options().lr = 0.1;
  opt.options().momentum = 0.9;  // built without a momentum buffer
  EXPECT_ERROR(opt.step(grads, 1.0), "momentum=0.9");
  opt.options().momentum = 0;
  opt.options().kind = OptimizerKind::adam;
  EXPECT_ERROR(opt.step(grads, 1.0), "kind changed from sgd to adam");
  opt.options().kind = OptimizerKind::sgd;
  EXPECT_EQ(opt.steps_applied(), 0);
  EXPECT_TRUE(opt.step(grads, 1.0).applied);
  EXPECT_ERROR(opt.state(0, 0), "no state 0");
  EXPECT_ERROR(opt.master(2), "param 2 does not exist");
}

// The launcher itself: groups of different bodies and dtypes, one flag, empty lists.
TEST(OptimizerMultiTensor, OneLaunchOverManyGroupsOfMixedDtypes) {
  ir::ScalarBuilder b(2);
  const MultiTensorBody axpy{.name = "scale",
                             .num_inputs = 1,
                             .num_outputs = 1,
                             .num_params = 1,
                             .body = b.finish({b.mul(b.input(0), b.input(1))}),
                             .flags = {{"f", {1}}}};
  runtime::ThreadPool pool(4);
  runtime::KernelCache cache;
  int32_t flag = 0;
  run_multi_tensor({&axpy, 1}, {}, std::vector<double>{2.0}, {&flag, 1}, &pool, &cache);
  EXPECT_EQ(flag, 0);
  std::mt19937 rng(3);
  const DType kinds[] = {DType::f32, DType::bf16, DType::f16};
  std::vector<Tensor> in, out;
  std::vector<MultiTensorGroup> groups;
  for (int i = 0; i < 300; ++i) {
    const int64_t n = i == 150 ? kBig : (i * 97) % 500;
    const DType dt = kinds[i % 3], ot = kinds[(i / 3) % 3];
    in.push_back(random_grad(dt, n, rng, 4));
    out.push_back(Tensor::zeros({ot, {n}}));
    groups.push_back({.body = 0, .size = n, .dtypes = {dt, ot}, .data = {in.back().raw(), out.back().raw()}});
  }
  run_multi_tensor({&axpy, 1}, groups, std::vector<double>{0.5}, {&flag, 1}, &pool, &cache);
  EXPECT_EQ(flag, 0);
  EXPECT_EQ(cache.stats().compilations, 9);  // one kernel per dtype pair
  for (size_t i = 0; i < in.size(); ++i) {
    const std::vector<double> x = runtime::to_f64_vector(in[i]), y = runtime::to_f64_vector(out[i]);
    Tensor want({DType::f32, {in[i].size()}});
    for (size_t k = 0; k < x.size(); ++k) want.data<float>()[k] = static_cast<float>(x[k]) * 0.5f;
    const std::vector<double> w = runtime::to_f64_vector(runtime::cast(want, out[i].dtype()));
    ASSERT_EQ(w, y) << "group " << i;
  }
  poison(in[299], in[299].size() - 1, std::numeric_limits<float>::infinity());
  run_multi_tensor({&axpy, 1}, groups, std::vector<double>{0.5}, {&flag, 1}, &pool, &cache);
  EXPECT_EQ(flag, 1);
  EXPECT_EQ(cache.stats().compilations, 9);
  groups[4].data[1] = nullptr;
  EXPECT_ERROR(run_multi_tensor({&axpy, 1}, groups, std::vector<double>{0.5}, {&flag, 1}, &pool, &cache),
               "group 4 operand 1 has no buffer");
}

// Groups that pass kLaunchStreamingBytes only together (the largest is under a tenth of
// it): their variant's kernel is the one with the streaming loop, which aligned groups take
// and a misaligned one leaves; both give exact results.
TEST(OptimizerMultiTensor, GroupsPastTheStreamingLimitTogetherStream) {
  ir::ScalarBuilder b(2);
  const MultiTensorBody axpy{
      .name = "scale", .num_inputs = 1, .num_outputs = 1, .num_params = 1,
      .body = b.finish({b.mul(b.input(0), b.input(1))}), .flags = {}};
  runtime::ThreadPool pool(2);
  runtime::KernelCache cache;
  std::mt19937 rng(5);
  const int64_t n = 250007, count = runtime::kLaunchStreamingBytes / (4 * n) + 1;
  std::vector<Tensor> in, out;
  std::vector<MultiTensorGroup> groups;
  for (int64_t i = 0; i < count; ++i) {
    in.push_back(random_grad(DType::f32, n, rng, 4));
    out.push_back(Tensor::zeros({DType::f32, {n + 1}}));
    float* y = out.back().data<float>() + (i == 3 ? 1 : 0);  // group 3 off its 64-byte line
    groups.push_back({.body = 0, .size = n, .dtypes = {DType::f32, DType::f32}, .data = {in.back().raw(), y}});
  }
  run_multi_tensor({&axpy, 1}, groups, std::vector<double>{0.5}, {}, &pool, &cache);
  for (int64_t i = 0; i < count; ++i) {
    const float* x = in[i].data<float>();
    const float* y = out[i].data<float>() + (i == 3 ? 1 : 0);
    for (int64_t k = 0; k < n; ++k) ASSERT_EQ(std::bit_cast<uint32_t>(y[k]), std::bit_cast<uint32_t>(x[k] * 0.5f)) << "group " << i << " element " << k;
  }
  const DType f32s[] = {DType::f32, DType::f32};
  const codegen::KernelSpec launched = multi_tensor_spec(axpy, f32s, count * n);
  EXPECT_TRUE(codegen::signature(launched).streams);
  EXPECT_EQ(cache.stats().compilations, 1);
  cache.get(launched);  // the kernel the launch compiled: found, not compiled again
  EXPECT_EQ(cache.stats().compilations, 1);
}

}  // namespace
}  // namespace ampfuse::engine
