// The f32 transcendental functions of generated kernels (codegen/vector_math.h) against the
// C library: a few million inputs each (random bit patterns, the function's working range,
// edge cases), asserting the stated ulp bound.
#include "codegen_test_util.h"

#include <functional>

namespace ampfuse::testing {
namespace {

constexpr int64_t kSamples = 1 << 21;

int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// Edge cases for every function: signed zeros, infinities, NaN, the smallest and largest
// magnitudes, and the thresholds where the functions overflow, underflow or switch method.
std::vector<float> edge_cases() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1.0f, -1.0f, 0.5f, -0.5f,
                          0x1p-149f, -0x1p-149f, 0x1p-126f, 0x1.fffffcp-127f, 0x1.fffffep127f, -0x1.fffffep127f,
                          88.72283f, 88.72284f, 89.0f, -87.33654f, -103.97208f, -104.0f, -30.0f, 0.25f,
                          -0.25f, 9.01f, 10.0f, 3.83f, 3.99f, 4.0f, -1.0f + 0x1p-24f, 0x1p-25f, 0x1p24f};
  for (float x : std::vector<float>(v)) {  // and a few ulps either side of each
    if (!std::isfinite(x)) continue;
    for (int k = 1; k <= 3; ++k) {
      v.push_back(std::nextafter(x, INFINITY));
      v.push_back(std::nextafter(x, -INFINITY));
      x = std::nextafter(x, INFINITY);
    }
  }
  return v;
}

// Half random bit patterns, half uniform in [lo, hi], then the edge cases.
std::vector<float> samples(float lo, float hi, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> v = edge_cases();
  while (static_cast<int64_t>(v.size()) < kSamples) v.push_back(v.size() % 2 ? from_bits(rng()) : uniform(rng));
  return v;
}

struct Worst {
  int64_t ulps = 0;
  float x = 0, y = 0, got = 0, want = 0;
};

// Runs the one-op kernel over x (and y) and returns the worst distance to `ref`.
Worst measure(runtime::KernelCache& cache, ScalarOp op, const std::vector<float>& xs, const std::vector<float>& ys,
              const std::function<float(float, float)>& ref) {
  const int arity = ir::scalar_op_arity(op);
  const int64_t n = static_cast<int64_t>(xs.size());
  ScalarBuilder b(arity);
  const auto r = arity == 1 ? b.unary(op, b.input(0)) : b.binary(op, b.input(0), b.input(1));
  const KernelSpec spec = dense_spec(std::string(ir::scalar_op_name(op)), b.finish({r}),
                                     std::vector<DType>(arity, DType::f32), {DType::f32}, {n});
  Tensor x({DType::f32, {n}}), y({DType::f32, {n}});
  std::copy(xs.begin(), xs.end(), x.data<float>());
  if (arity == 2) std::copy(ys.begin(), ys.end(), y.data<float>());
  std::vector<const Tensor*> in = {&x};
  if (arity == 2) in.push_back(&y);
  const Tensor out = run_jit(cache, spec, in).outputs[0];
  Worst w;
  for (int64_t i = 0; i < n; ++i) {
    const float yi = arity == 2 ? ys[i] : 0.0f;
    const float want = ref(xs[i], yi);
    const int64_t d = ulp_distance(out.data<float>()[i], want);
    if (d > w.ulps) w = {d, xs[i], yi, out.data<float>()[i], want};
  }
  return w;
}

struct Unary {
  ScalarOp op;
  float (*ref)(float);
  float lo, hi;  // the working range sampled uniformly
  int64_t bound;
};

TEST(CodegenMath, UnaryFunctionsStayWithinTheirUlpBound) {
  const Unary cases[] = {
      {ScalarOp::exp, [](float x) { return std::exp(x); }, -104.0f, 89.0f, 1},
      {ScalarOp::log, [](float x) { return std::log(x); }, 0.0f, 4.0f, 1},
      {ScalarOp::log1p, [](float x) { return std::log1p(x); }, -1.0f, 2.0f, 1},
      {ScalarOp::expm1, [](float x) { return std::expm1(x); }, -2.0f, 2.0f, 2},
      {ScalarOp::tanh, [](float x) { return std::tanh(x); }, -4.0f, 4.0f, 3},
      {ScalarOp::erf, [](float x) { return std::erf(x); }, -4.5f, 4.5f, 2},
  };
  runtime::KernelCache cache;
  for (const Unary& c : cases) {
    const Worst w = measure(cache, c.op, samples(c.lo, c.hi, 1), {}, [&](float x, float) { return c.ref(x); });
    EXPECT_LE(w.ulps, c.bound) << ir::scalar_op_name(c.op) << "(" << w.x << ") = " << w.got << ", C library "
                               << w.want;
  }
}

TEST(CodegenMath, PowStaysWithinOneUlp) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> base(0.0f, 4.0f), exponent(-40.0f, 40.0f);
  std::vector<float> xs, ys;
  // Every pair of edge cases: the C99 special cases live there.
  const std::vector<float> edges = {0.0f,  -0.0f, 1.0f,  -1.0f, 2.0f, -2.0f, 0.5f,  -0.5f,      3.0f,
                                    -3.0f, 2.5f,  -2.5f, INFINITY, -INFINITY, NAN, 0x1p-149f, 0x1p24f, 1e30f};
  for (float x : edges)
    for (float y : edges) xs.push_back(x), ys.push_back(y);
  while (static_cast<int64_t>(xs.size()) < kSamples) {
    switch (xs.size() % 3) {
      case 0: xs.push_back(from_bits(rng())), ys.push_back(from_bits(rng())); break;
      case 1: xs.push_back(base(rng)), ys.push_back(exponent(rng)); break;
      default:  // negative bases with integer exponents: signs and odd/even
        xs.push_back(-base(rng)), ys.push_back(std::trunc(exponent(rng)));
    }
  }
  runtime::KernelCache cache;
  const Worst w = measure(cache, ScalarOp::pow, xs, ys, [](float x, float y) { return std::pow(x, y); });
  EXPECT_LE(w.ulps, 1) << "pow(" << w.x << ", " << w.y << ") = " << w.got << ", C library " << w.want;
}

TEST(CodegenMath, SpecialValuesExactly) {
  // Hand-checked results that every libm agrees on.
  runtime::KernelCache cache;
  auto eval = [&](ScalarOp op, float x) {
    ScalarBuilder b(1);
    const KernelSpec spec = dense_spec("s", b.finish({b.unary(op, b.input(0))}), {DType::f32}, {DType::f32}, {1});
    Tensor t({DType::f32, {1}});
    t.data<float>()[0] = x;
    return run_jit(cache, spec, {&t}).outputs[0].data<float>()[0];
  };
  EXPECT_EQ(eval(ScalarOp::exp, 0.0f), 1.0f);
  EXPECT_EQ(eval(ScalarOp::exp, -INFINITY), 0.0f);
  EXPECT_EQ(eval(ScalarOp::exp, 100.0f), INFINITY);
  EXPECT_EQ(eval(ScalarOp::log, 1.0f), 0.0f);
  EXPECT_EQ(eval(ScalarOp::log, 0.0f), -INFINITY);
  EXPECT_TRUE(std::isnan(eval(ScalarOp::log, -1.0f)));
  EXPECT_EQ(eval(ScalarOp::log1p, -1.0f), -INFINITY);
  EXPECT_TRUE(std::signbit(eval(ScalarOp::expm1, -0.0f)));
  EXPECT_EQ(eval(ScalarOp::expm1, -INFINITY), -1.0f);
  EXPECT_EQ(eval(ScalarOp::tanh, INFINITY), 1.0f);
  EXPECT_EQ(eval(ScalarOp::tanh, -20.0f), -1.0f);
  EXPECT_EQ(eval(ScalarOp::erf, -INFINITY), -1.0f);
  EXPECT_TRUE(std::signbit(eval(ScalarOp::erf, -0.0f)));
  EXPECT_TRUE(std::isnan(eval(ScalarOp::erf, NAN)));
}

}  // namespace
}  // namespace ampfuse::testing
