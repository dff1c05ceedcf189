// Kernel specs the CUDA tests share: the emitter's FileCheck tests and NVRTC/ptxas builds
// (cuda_codegen_test.cpp) and the GPU runs against the reference (cuda_device_test.cpp).
// Together they cover every loop shape and conversion of codegen/cuda_emitter.cpp.
#pragma once

#include "codegen_test_util.h"

#include "runtime/cuda/cuda_driver.h"

#include <cstring>
#include <functional>
#include <map>
#include <span>

namespace ampfuse::testing {

struct CudaCase {
  KernelSpec spec;
  std::vector<double> params;
  bool exact = true;  // false: holds transcendental functions (compare within a ULP bound)
};

inline CudaCase make_case(KernelSpec spec, std::vector<double> params = {}, bool exact = true) {
  return CudaCase{std::move(spec), std::move(params), exact};
}

inline KernelSpec strided_spec(const std::string& name, ir::ScalarProgram body, const Shape& shape,
                               std::vector<OperandSpec> ins, std::vector<OperandSpec> outs, int num_params = 0) {
  KernelSpec spec;
  spec.name = name;
  spec.shape = shape;
  std::vector<DType> all;
  for (const OperandSpec& o : ins) all.push_back(o.dtype);
  for (const OperandSpec& o : outs) all.push_back(o.dtype);
  spec.inputs = std::move(ins);
  spec.outputs = std::move(outs);
  spec.num_params = num_params;
  spec.compute = ir::compute_type(all);
  spec.body = std::move(body);
  return spec;
}

// By name: flat_f32, broadcast, transpose, lowp, f64_compute, flags, ints, all_ops,
// dropout, dropout_transposed, dropout_step, wide_index, transcendental_f32, transcendental_f64.
inline std::map<std::string, CudaCase> cuda_cases() {
  std::map<std::string, CudaCase> cases;
  {  // relu(x * y + p): flat, all contiguous, 128-bit f32 packs.
    ScalarBuilder b(3);
    const auto r = b.max(b.add(b.mul(b.input(0), b.input(1)), b.input(2)), b.constant(0));
    cases["flat_f32"] = make_case(dense_spec("flat_f32", b.finish({r}), {DType::f32, DType::f32}, {DType::f32}, {1000, 37}, 1),
                         {0.25});
  }
  {  // x [64,33] + bias [33] (stride 0 along rows) * s (one element)
    ScalarBuilder b(3);
    const auto r = b.add(b.input(0), b.mul(b.input(1), b.input(2)));
    cases["broadcast"] = make_case(strided_spec("broadcast", b.finish({r}), {64, 33},
                                       {{"x", DType::f32, {33, 1}}, {"bias", DType::f32, {0, 1}}, {"s", DType::f32, {0, 0}}},
                                       {{"y", DType::bf16, {33, 1}}}));
  }
  {  // y = x^T in f16 and a transposed store: both operands strided.
    ScalarBuilder b(1);
    const auto r = b.round_to(b.input(0), DType::f16);
    cases["transpose"] = make_case(strided_spec("transpose", b.finish({r, b.unary(ScalarOp::neg, b.input(0))}), {65, 33},
                                       {{"x", DType::f32, {1, 65}}},
                                       {{"y", DType::f16, {33, 1}}, {"yt", DType::f32, {1, 65}}}));
  }
  {  // f16 and bf16 in and out, with a round_to in the middle: 8-element packs.
    ScalarBuilder b(2);
    const auto s = b.add(b.input(0), b.input(1));
    const auto m = b.mul(b.round_to(s, DType::bf16), b.constant(1.5));
    cases["lowp"] = make_case(dense_spec("lowp", b.finish({s, m}), {DType::f16, DType::bf16}, {DType::f16, DType::bf16}, {4099}));
  }
  {  // f64 compute from f16 inputs and an f64 parameter: round-to-odd before f16/bf16.
    ScalarBuilder b(2);
    const auto q = b.div(b.input(0), b.input(1));
    const auto r = b.add(b.unary(ScalarOp::sqrt, b.unary(ScalarOp::abs, q)), b.constant(0x1p-30));
    KernelSpec spec = dense_spec("f64_compute", b.finish({r, q, r}), {DType::f16}, {DType::f16, DType::bf16, DType::f32},
                                 {3001}, 1);
    spec.compute = DType::f64;
    cases["f64_compute"] = make_case(spec, {1.0 / 3.0});
  }
  {  // x * 1000 stored as f16 (overflows), flagged over the input and the output.
    ScalarBuilder b(1);
    KernelSpec spec = dense_spec("flags", b.finish({b.mul(b.input(0), b.constant(1000))}), {DType::f32},
                                 {DType::f16}, {5000});
    spec.flags = {{"nonfinite", {0, 1}}};
    cases["flags"] = make_case(spec);
  }
  {  // Saturating stores to every integer type and bool, an i64 input.
    ScalarBuilder b(2);
    const auto x = b.mul(b.input(0), b.constant(3e9));
    const auto y = b.add(b.input(1), b.constant(0.5));
    cases["ints"] = make_case(dense_spec("ints", b.finish({x, x, x, x, x, y}), {DType::f32, DType::i64},
                                {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean, DType::f64}, {777}));
  }
  {  // Every exact primitive once, into several outputs.
    ScalarBuilder b(2);
    const auto x = b.input(0), y = b.input(1);
    std::vector<ScalarBuilder::Val> r;
    for (ScalarOp op : {ScalarOp::neg, ScalarOp::abs, ScalarOp::sign, ScalarOp::sqrt, ScalarOp::rsqrt,
                        ScalarOp::floor, ScalarOp::ceil, ScalarOp::trunc, ScalarOp::isfinite})
      r.push_back(b.unary(op, x));
    for (ScalarOp op : {ScalarOp::add, ScalarOp::sub, ScalarOp::mul, ScalarOp::div, ScalarOp::max, ScalarOp::min,
                        ScalarOp::eq, ScalarOp::ne, ScalarOp::lt, ScalarOp::le, ScalarOp::gt, ScalarOp::ge})
      r.push_back(b.binary(op, x, y));
    r.push_back(b.select(b.binary(ScalarOp::lt, x, y), x, y));
    r.push_back(b.round_to(x, DType::f16));
    r.push_back(b.round_to(y, DType::i8));
    // Fold everything into two outputs so that each op's exact result matters.
    ScalarBuilder::Val acc = r[0];
    for (size_t i = 1; i < r.size(); ++i) acc = b.add(b.mul(acc, b.constant(0.5)), r[i]);
    cases["all_ops"] = make_case(dense_spec("all_ops", b.finish({acc, r[2]}), {DType::f32, DType::f32}, {DType::f32, DType::bf16},
                                   {2053}));
  }
  {  // Dropout's recipe (random bits of the flat iteration index): flat with f16 packs and a
     // tail, and transposed (a strided load and store).
    ScalarBuilder b(1);
    const auto keep = b.binary(ScalarOp::lt, b.philox_bits24(0x123456789ull, 7), b.constant(0x600000));
    const auto y = b.mul(b.input(0), b.select(keep, b.constant(1.5), b.constant(0)));
    const ir::ScalarProgram body = b.finish({y});
    cases["dropout"] = make_case(dense_spec("dropout", body, {DType::f16}, {DType::f16}, {4099}));
    cases["dropout_transposed"] = make_case(strided_spec("dropout_transposed", body, {65, 33}, {{"x", DType::f32, {1, 65}}},
                                                {{"y", DType::bf16, {33, 1}}}));
  }
  {  // Dropout with a run-time step (philox_bits24_at): here one step per element, random
     // values of every sign and fraction, so the step's conversion to an integer (truncate,
     // negatives and NaN 0) is checked against the reference element by element.
    ScalarBuilder b(2);
    const auto bits = b.philox_bits24_at(b.input(1), 0x123456789ull, 7, 3);
    const auto keep = b.binary(ScalarOp::lt, bits, b.constant(0x600000));
    const auto y = b.mul(b.input(0), b.select(keep, b.constant(1.5), b.constant(0)));
    cases["dropout_step"] = make_case(dense_spec("dropout_step", b.finish({y, bits}), {DType::f16, DType::f32},
                                                 {DType::f16, DType::f32}, {4099}));
  }
  {  // A strided input whose offsets pass 2^31 (u8, so the buffer is "only" 2 GiB).
    ScalarBuilder b(1);
    cases["wide_index"] = make_case(strided_spec("wide_index", b.finish({b.input(0)}), {2, 1000},
                                        {{"x", DType::u8, {int64_t{1} << 31, 1}}}, {{"y", DType::f32, {1000, 1}}}));
  }
  for (DType c : {DType::f32, DType::f64}) {
    ScalarBuilder b(1);
    const auto x = b.input(0);
    std::vector<ScalarBuilder::Val> r;
    for (ScalarOp op : {ScalarOp::exp, ScalarOp::log, ScalarOp::log1p, ScalarOp::expm1, ScalarOp::erf, ScalarOp::tanh})
      r.push_back(b.unary(op, x));
    r.push_back(b.binary(ScalarOp::pow, b.unary(ScalarOp::abs, x), b.constant(0.75)));
    const std::string name = c == DType::f32 ? "transcendental_f32" : "transcendental_f64";
    std::vector<DType> outs(r.size(), c);
    cases[name] = make_case(dense_spec(name, b.finish(r), {c}, outs, {4097}), {}, false);
  }
  return cases;
}

// ---------------------------------------------------------------------------------------
// Running a case against the reference: strided buffers are gathered into dense tensors
// over the iteration space for runtime::eval_scalar_program.

using runtime::cuda::operand_extent;

inline int64_t offset_of(const KernelSpec& spec, const OperandSpec& o, int64_t i) {
  int64_t off = 0;
  for (size_t d = spec.shape.size(); d-- > 0;) {
    off += (i % spec.shape[d]) * o.strides[d];
    i /= spec.shape[d];
  }
  return off;
}

// The elements of a strided buffer over spec's iteration space, as a dense tensor.
inline Tensor gather(const KernelSpec& spec, const OperandSpec& o, const Tensor& buffer) {
  Tensor dense(ir::TensorType{o.dtype, spec.shape});
  const size_t bytes = ir::dtype_size(o.dtype);
  for (int64_t i = 0; i < spec.num_elements(); ++i)
    std::memcpy(static_cast<char*>(dense.raw()) + i * bytes,
                static_cast<const char*>(buffer.raw()) + offset_of(spec, o, i) * bytes, bytes);
  return dense;
}

// A buffer for an operand: random elements (specials included); for huge sparse buffers
// (wide_index) zeros with random values where the kernel reads.
inline Tensor make_buffer(const KernelSpec& spec, const OperandSpec& o, uint64_t seed) {
  const int64_t extent = operand_extent(spec, o);
  if (extent <= (int64_t{1} << 26)) return random_tensor(o.dtype, {extent}, seed);
  Tensor t = Tensor::zeros({o.dtype, {extent}});
  const Tensor vals = random_tensor(o.dtype, {spec.num_elements()}, seed);
  const size_t bytes = ir::dtype_size(o.dtype);
  for (int64_t i = 0; i < spec.num_elements(); ++i)
    std::memcpy(static_cast<char*>(t.raw()) + offset_of(spec, o, i) * bytes,
                static_cast<const char*>(vals.raw()) + i * bytes, bytes);
  return t;
}

// Distance in representable values between two elements of a float dtype.
inline int64_t ulp_distance(const Tensor& a, const Tensor& b, int64_t i) {
  const size_t bytes = ir::dtype_size(a.dtype());
  auto key = [&](const Tensor& t) {
    uint64_t bits = 0;
    std::memcpy(&bits, static_cast<const char*>(t.raw()) + i * bytes, bytes);
    const uint64_t sign = uint64_t{1} << (bytes * 8 - 1);
    return (bits & sign) ? -static_cast<int64_t>(bits & ~sign) : static_cast<int64_t>(bits);
  };
  return std::llabs(key(a) - key(b));
}

inline ::testing::AssertionResult close_enough(const Tensor& got, const Tensor& want, bool exact) {
  if (exact) return same_bits(got, want);
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got.size(); ++i) {
    if (same_element(got, want, i)) continue;
    const bool ok = ir::is_float(got.dtype()) ? ulp_distance(got, want, i) <= codegen::kCudaTranscendentalUlp
                                              : std::fabs(got.get_f64(i) - want.get_f64(i)) <= 1;
    if (!ok && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements beyond "
                                       << codegen::kCudaTranscendentalUlp << " ulp; first at " << first << ": got "
                                       << got.get_f64(first) << ", want " << want.get_f64(first);
}

inline bool any_nonfinite(const Tensor& t) {
  if (!ir::is_float(t.dtype())) return false;
  for (int64_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t.get_f64(i))) return true;
  return false;
}

// How a test runs a kernel: host buffers as run_cuda_kernel takes them.
using KernelRunner = std::function<void(const KernelSpec&, std::span<const void* const>, std::span<void* const>,
                                        std::span<const double>, std::span<int32_t>)>;

// Runs `spec` with `run` and through the reference; compares outputs and flags.
inline ::testing::AssertionResult check_kernel(const KernelSpec& spec, const std::vector<double>& params, bool exact,
                                               uint64_t seed, const KernelRunner& run) {
  std::vector<Tensor> in_buffers, out_buffers, dense_in;
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    in_buffers.push_back(make_buffer(spec, spec.inputs[k], seed * 31 + k));
    dense_in.push_back(gather(spec, spec.inputs[k], in_buffers.back()));
  }
  for (size_t k = 0; k < spec.outputs.size(); ++k) out_buffers.push_back(make_buffer(spec, spec.outputs[k], seed * 37 + k));
  std::vector<const void*> ins;
  std::vector<void*> outs;
  std::vector<const Tensor*> dense_ptrs;
  for (const Tensor& t : in_buffers) ins.push_back(t.raw());
  for (Tensor& t : out_buffers) outs.push_back(t.raw());
  for (const Tensor& t : dense_in) dense_ptrs.push_back(&t);
  std::vector<int32_t> flags(spec.flags.size(), 0);
  try {
    run(spec, ins, outs, params, flags);
  } catch (const Error& e) {
    return ::testing::AssertionFailure() << e.what();
  }
  const std::vector<Tensor> want = run_reference(spec, dense_ptrs, params);
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    const Tensor got = gather(spec, spec.outputs[k], out_buffers[k]);
    if (auto r = close_enough(got, want[k], exact); !r)
      return r << " (kernel '" << spec.name << "', output " << k << ")\n" << codegen::print_kernel_spec(spec);
  }
  for (size_t f = 0; f < spec.flags.size(); ++f) {
    bool expected = false;
    for (int k : spec.flags[f].operands) {
      const int n_in = static_cast<int>(spec.inputs.size());
      expected = expected || any_nonfinite(k < n_in ? dense_in[k] : want[k - n_in]);
    }
    if (flags[f] != (expected ? 1 : 0))
      return ::testing::AssertionFailure() << "kernel '" << spec.name << "': flag " << f << " is " << flags[f]
                                           << ", the reference says " << expected;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ampfuse::testing
