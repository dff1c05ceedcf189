// Every scalar op and every dtype conversion through generated code, against the reference
// evaluator bit for bit (transcendental f32 functions: within their stated ulp bounds).
#include "codegen_test_util.h"

#include <map>

namespace ampfuse::testing {
namespace {

constexpr int64_t kElements = 4099;  // not a multiple of any vector width

const std::vector<ScalarOp> kExactOps = {
    ScalarOp::neg, ScalarOp::abs, ScalarOp::sign, ScalarOp::sqrt, ScalarOp::rsqrt, ScalarOp::floor,
    ScalarOp::ceil, ScalarOp::trunc, ScalarOp::isfinite, ScalarOp::add, ScalarOp::sub, ScalarOp::mul,
    ScalarOp::div, ScalarOp::max, ScalarOp::min, ScalarOp::eq, ScalarOp::ne, ScalarOp::lt,
    ScalarOp::le, ScalarOp::gt, ScalarOp::ge, ScalarOp::select};

// The bounds codegen/vector_math.h states, in ulps of the f32 result against the C library.
const std::map<ScalarOp, int64_t> kUlpBounds = {{ScalarOp::exp, 1},   {ScalarOp::log, 1},  {ScalarOp::log1p, 1},
                                                {ScalarOp::expm1, 2}, {ScalarOp::tanh, 3}, {ScalarOp::erf, 2},
                                                {ScalarOp::pow, 1}};

ir::ScalarProgram one_op(ScalarOp op) {
  const int arity = ir::scalar_op_arity(op);
  ScalarBuilder b(arity);
  ScalarBuilder::Val r = 0;
  if (arity == 1) r = b.unary(op, b.input(0));
  if (arity == 2) r = b.binary(op, b.input(0), b.input(1));
  if (arity == 3) r = b.select(b.input(0), b.input(1), b.input(2));
  return b.finish({r});
}

std::vector<Tensor> op_inputs(ScalarOp op, DType dtype, uint64_t seed) {
  std::vector<Tensor> in;
  for (int k = 0; k < ir::scalar_op_arity(op); ++k) in.push_back(random_tensor(dtype, {kElements}, seed + k));
  return in;
}

std::vector<const Tensor*> pointers(const std::vector<Tensor>& ts) {
  std::vector<const Tensor*> p;
  for (const Tensor& t : ts) p.push_back(&t);
  return p;
}

int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  auto ordered = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
  };
  return std::llabs(ordered(a) - ordered(b));
}

TEST(CodegenOps, ExactOpsMatchReferenceBitsInF32) {
  runtime::KernelCache cache;
  for (ScalarOp op : kExactOps) {
    const KernelSpec spec = dense_spec(std::string(ir::scalar_op_name(op)), one_op(op),
                                       std::vector<DType>(ir::scalar_op_arity(op), DType::f32), {DType::f32},
                                       {kElements});
    const std::vector<Tensor> in = op_inputs(op, DType::f32, 10);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, pointers(in)).outputs[0], run_reference(spec, pointers(in))[0]))
        << ir::scalar_op_name(op);
  }
}

TEST(CodegenOps, EveryOpMatchesReferenceBitsInF64) {
  // f64 transcendental functions call the C library, like the reference: exact too.
  runtime::KernelCache cache;
  std::vector<ScalarOp> ops = kExactOps;
  for (const auto& [op, bound] : kUlpBounds) ops.push_back(op);
  for (ScalarOp op : ops) {
    const KernelSpec spec = dense_spec(std::string(ir::scalar_op_name(op)), one_op(op),
                                       std::vector<DType>(ir::scalar_op_arity(op), DType::f64), {DType::f64},
                                       {kElements});
    ASSERT_EQ(spec.compute, DType::f64);
    const std::vector<Tensor> in = op_inputs(op, DType::f64, 20);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, pointers(in)).outputs[0], run_reference(spec, pointers(in))[0]))
        << ir::scalar_op_name(op);
  }
}

TEST(CodegenOps, TranscendentalsStayWithinTheirBoundInF32) {
  runtime::KernelCache cache;
  for (const auto& [op, bound] : kUlpBounds) {
    const KernelSpec spec = dense_spec(std::string(ir::scalar_op_name(op)), one_op(op),
                                       std::vector<DType>(ir::scalar_op_arity(op), DType::f32), {DType::f32},
                                       {kElements});
    const std::vector<Tensor> in = op_inputs(op, DType::f32, 30);
    const Tensor got = run_jit(cache, spec, pointers(in)).outputs[0];
    const Tensor want = run_reference(spec, pointers(in))[0];
    int64_t worst = 0, at = 0;
    for (int64_t i = 0; i < kElements; ++i) {
      const int64_t d = ulp_distance(got.data<float>()[i], want.data<float>()[i]);
      if (d > worst) worst = d, at = i;
    }
    EXPECT_LE(worst, bound) << ir::scalar_op_name(op) << " at element " << at << ": got "
                            << got.data<float>()[at] << ", want " << want.data<float>()[at];
  }
}

TEST(CodegenOps, LowPrecisionOperandsComputeInF32) {
  // The same ops on f16 and bf16 data, stored to the other format: loads widen exactly and
  // the store rounds once.
  runtime::KernelCache cache;
  for (ScalarOp op : kExactOps) {
    const KernelSpec spec = dense_spec(std::string(ir::scalar_op_name(op)), one_op(op),
                                       std::vector<DType>(ir::scalar_op_arity(op), DType::f16), {DType::bf16},
                                       {kElements});
    const std::vector<Tensor> in = op_inputs(op, DType::f16, 40);
    EXPECT_TRUE(same_bits(run_jit(cache, spec, pointers(in)).outputs[0], run_reference(spec, pointers(in))[0]))
        << ir::scalar_op_name(op);
  }
}

TEST(CodegenOps, EveryConversionMatchesReferenceBits) {
  runtime::KernelCache cache;
  for (DType from : ir::kAllDTypes) {
    for (DType to : ir::kAllDTypes) {
      ScalarBuilder b(1);
      const KernelSpec spec = dense_spec("cast", b.finish({b.input(0)}), {from}, {to}, {kElements});
      const Tensor x = random_tensor(from, {kElements}, 50);
      EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x}).outputs[0], run_reference(spec, {&x})[0]))
          << ir::dtype_name(from) << " -> " << ir::dtype_name(to);
    }
  }
}

TEST(CodegenOps, RoundToInsideTheBodyInBothComputeTypes) {
  runtime::KernelCache cache;
  for (DType io : {DType::f32, DType::f64}) {
    for (DType t : ir::kAllDTypes) {
      // (x * 3) rounded to t, then + 0.25, so that the rounding shows in the result.
      ScalarBuilder b(1);
      const auto r = b.round_to(b.mul(b.input(0), b.constant(3)), t);
      const KernelSpec spec = dense_spec("round", b.finish({b.add(r, b.constant(0.25))}), {io}, {io}, {kElements});
      const Tensor x = random_tensor(io, {kElements}, 60);
      EXPECT_TRUE(same_bits(run_jit(cache, spec, {&x}).outputs[0], run_reference(spec, {&x})[0]))
          << "round_to " << ir::dtype_name(t) << " in " << ir::dtype_name(io);
    }
  }
}

TEST(CodegenOps, ConstantsRoundToTheComputeType) {
  // 0.1 is not an f32: an f32 kernel adds 0x1.99999ap-4, an f64 kernel 0.1.
  ScalarBuilder b(1);
  const ir::ScalarProgram body = b.finish({b.add(b.input(0), b.constant(0.1))});
  runtime::KernelCache cache;
  Tensor zeros32 = Tensor::zeros({DType::f32, {3}});
  Tensor zeros64 = Tensor::zeros({DType::f64, {3}});
  const Tensor r32 = run_jit(cache, dense_spec("c", body, {DType::f32}, {DType::f64}, {3}), {&zeros32}).outputs[0];
  EXPECT_EQ(r32.data<double>()[2], 0.1) << "f64 output: the compute type is f64";
  const Tensor r64 =
      run_jit(cache, dense_spec("c", body, {DType::f32}, {DType::f32}, {3}), {&zeros32}).outputs[0];
  EXPECT_EQ(r64.data<float>()[2], 0.1f);
  const Tensor r = run_jit(cache, dense_spec("c", body, {DType::f64}, {DType::f64}, {3}), {&zeros64}).outputs[0];
  EXPECT_EQ(r.data<double>()[0], 0.1);
}

TEST(CodegenOps, HandPickedValues) {
  // A few results worked out by hand, independent of the reference evaluator.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  runtime::KernelCache cache;
  Tensor x({DType::f32, {6}}), y({DType::f32, {6}});
  const double xs[] = {nan, 1.0, -0.0, 3.0, -inf, 0x1p-149};
  const double ys[] = {2.0, nan, 0.0, 3.0, 5.0, 0x1p-149};
  for (int i = 0; i < 6; ++i) x.set_f64(i, xs[i]), y.set_f64(i, ys[i]);
  auto run = [&](ScalarOp op, DType out) {
    return run_jit(cache, dense_spec("h", one_op(op), {DType::f32, DType::f32}, {out}, {6}), {&x, &y}).outputs[0];
  };
  const Tensor mx = run(ScalarOp::max, DType::f32);
  EXPECT_TRUE(std::isnan(mx.data<float>()[0]) && std::isnan(mx.data<float>()[1]));  // NaN wins on either side
  EXPECT_EQ(mx.data<float>()[3], 3.0f);
  EXPECT_EQ(mx.data<float>()[4], 5.0f);
  const Tensor ne = run(ScalarOp::ne, DType::f32);
  EXPECT_EQ(ne.data<float>()[0], 1.0f);  // NaN != 2
  EXPECT_EQ(ne.data<float>()[2], 0.0f);  // -0 == +0
  const Tensor lt = run(ScalarOp::lt, DType::boolean);
  EXPECT_EQ(lt.data<uint8_t>()[0], 0);  // NaN < 2 is false
  EXPECT_EQ(lt.data<uint8_t>()[4], 1);  // -Inf < 5
  const Tensor sum = run(ScalarOp::add, DType::bf16);
  EXPECT_EQ(sum.data<uint16_t>()[3], 0x40C0);  // 6.0
  EXPECT_EQ(sum.data<uint16_t>()[4], 0xFF80);  // -Inf
  EXPECT_EQ(sum.data<uint16_t>()[5], 0x0000);  // 2^-148 is far below bf16's 2^-133: rounds to +0
  const Tensor half = run(ScalarOp::mul, DType::f16);
  EXPECT_EQ(half.data<uint16_t>()[3], 0x4880);  // 9.0
  EXPECT_EQ(half.data<uint16_t>()[2], 0x8000);  // -0 * 0 = -0
}

}  // namespace
}  // namespace ampfuse::testing
