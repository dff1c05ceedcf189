// Helpers for the code generation tests: building specs, running them through the JIT, and
// comparing against the reference evaluator (runtime/scalar_eval.cpp) bit for bit.
#pragma once

#include "codegen/kernel_abi.h"
#include "codegen/kernel_spec.h"
#include "ir/error.h"
#include "ir/lowp.h"
#include "runtime/interpreter.h"
#include "runtime/kernel_cache.h"
#include "runtime/tensor.h"

#include <fmt/format.h>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace ampfuse::testing {

using codegen::KernelSpec;
using codegen::OperandSpec;
using ir::DType;
using ir::ScalarBuilder;
using ir::ScalarOp;
using ir::Shape;
using runtime::Tensor;

// Contiguous operands of `shape` with these dtypes; the compute type the reference would use.
inline KernelSpec dense_spec(const std::string& name, ir::ScalarProgram body, const std::vector<DType>& ins,
                             const std::vector<DType>& outs, const Shape& shape, int num_params = 0) {
  KernelSpec spec;
  spec.name = name;
  spec.shape = shape;
  const std::vector<int64_t> strides = codegen::row_major_strides(shape);
  std::vector<DType> all;
  for (size_t k = 0; k < ins.size(); ++k) {
    spec.inputs.push_back({fmt::format("in{}", k), ins[k], strides});
    all.push_back(ins[k]);
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    spec.outputs.push_back({fmt::format("out{}", k), outs[k], strides});
    all.push_back(outs[k]);
  }
  spec.num_params = num_params;
  spec.compute = ir::compute_type(all);
  spec.body = std::move(body);
  return spec;
}

// The same spec over a leading extent large enough that its outputs pass
// codegen::kStreamingOutputBytes, so that the kernel compiled for it has the streaming loops
// (a small spec's has none; KernelSignature::streams). Its code is the small spec's
// otherwise (flat kernels ignore the shape; a strided one keeps its stride classes, tile
// and index width, which the caller's test checks), so tests call it directly with
// args->streaming over the small spec's shape.
inline KernelSpec streaming_sized(KernelSpec spec) {
  int64_t output_element_bytes = 0;
  for (const OperandSpec& o : spec.outputs) output_element_bytes += static_cast<int64_t>(ir::dtype_size(o.dtype));
  const int64_t inner = spec.num_elements() / spec.shape.at(0);
  spec.shape[0] = codegen::kStreamingOutputBytes / (output_element_bytes * inner) + 1;
  const codegen::KernelSignature sig = codegen::signature(spec);
  EXPECT_TRUE(sig.streams && !sig.wide_index) << spec.name << " over " << ir::shape_str(spec.shape);
  return spec;
}

// Interesting values of a float type: zeros, NaNs, infinities, subnormals, the largest
// finite values, f16's overflow threshold and bf16 rounding ties.
inline std::vector<double> special_values() {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  return {0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, nan, -nan, inf, -inf,
          1e-40, -1e-45, 0x1p-126, 0x1p-149, 0x1.fffffep127, -0x1.fffffep127, 65504, 65519.99, 65520,
          0x1p-24, 0x1p-25, 0x1.002p0, 0x1.006p0, 0x1.0101p0, 100.0, -87.5, 1e10, 1e-10, 2147483647.0,
          -2147483649.0, 300.7, -129.9, 255.5, 1e300, -1e-310};
}

// Random element bits of any dtype, with the special values mixed in for float types.
inline Tensor random_tensor(DType dtype, const Shape& shape, uint64_t seed) {
  Tensor t(ir::TensorType{dtype, shape});
  std::mt19937_64 rng(seed);
  const std::vector<double> specials = special_values();
  const size_t bytes = ir::dtype_size(dtype);
  for (int64_t i = 0; i < t.size(); ++i) {
    const uint64_t r = rng();
    if (ir::is_float(dtype) && r % 4 == 0) {
      t.set_f64(i, specials[(r >> 8) % specials.size()]);
    } else if (ir::is_float(dtype) && r % 4 == 1) {
      t.set_f64(i, static_cast<double>(static_cast<int64_t>(r >> 40) % 2001 - 1000) / 64);  // small, many ties
    } else if (dtype == DType::boolean) {
      t.data<uint8_t>()[i] = static_cast<uint8_t>((r >> 20) % 3 == 0 ? 0 : 1);
    } else {
      std::memcpy(static_cast<char*>(t.raw()) + i * bytes, &r, bytes);
    }
  }
  return t;
}

// Same bits, except that any NaN equals any NaN (docs/design.md: NaN compares as NaN-ness).
inline bool same_element(const Tensor& a, const Tensor& b, int64_t i) {
  const size_t bytes = ir::dtype_size(a.dtype());
  if (std::memcmp(static_cast<const char*>(a.raw()) + i * bytes, static_cast<const char*>(b.raw()) + i * bytes,
                  bytes) == 0)
    return true;
  return ir::is_float(a.dtype()) && std::isnan(a.get_f64(i)) && std::isnan(b.get_f64(i));
}

inline ::testing::AssertionResult same_bits(const Tensor& got, const Tensor& want) {
  if (got.type() != want.type())
    return ::testing::AssertionFailure() << "type " << ir::type_str(got.type()) << " vs " << ir::type_str(want.type());
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < got.size(); ++i)
    if (!same_element(got, want, i) && mismatches++ == 0) first = i;
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << got.size() << " elements differ; first at " << first
                                       << ": got " << got.get_f64(first) << ", want " << want.get_f64(first);
}

// Runs spec through `cache` (one compile per new key) on the given operand buffers.
struct JitRun {
  std::vector<Tensor> outputs;
  std::vector<int32_t> flags;
};
inline JitRun run_jit(runtime::KernelCache& cache, const KernelSpec& spec, const std::vector<const Tensor*>& inputs,
                      const std::vector<double>& params = {}, const std::vector<Shape>& output_shapes = {}) {
  JitRun r;
  std::vector<void*> data;
  for (const Tensor* t : inputs) data.push_back(const_cast<void*>(t->raw()));
  for (size_t k = 0; k < spec.outputs.size(); ++k) {
    const Shape shape = k < output_shapes.size() ? output_shapes[k] : spec.shape;
    r.outputs.push_back(Tensor::zeros({spec.outputs[k].dtype, shape}));
    data.push_back(r.outputs.back().raw());
  }
  r.flags.assign(spec.flags.size(), 0);
  runtime::run_kernel(*cache.get(spec), spec, data, params, r.flags);
  return r;
}

// The reference evaluator on the same inputs (each broadcast numpy-style to spec.shape),
// parameters passed as 0-d tensors of the compute type.
inline std::vector<Tensor> run_reference(const KernelSpec& spec, const std::vector<const Tensor*>& inputs,
                                         const std::vector<double>& params = {}) {
  std::vector<Tensor> param_tensors;
  for (double p : params) {
    param_tensors.push_back(Tensor({spec.compute, {}}));
    param_tensors.back().set_f64(0, p);
  }
  std::vector<const Tensor*> all = inputs;
  for (const Tensor& t : param_tensors) all.push_back(&t);
  std::vector<ir::TensorType> types;
  for (const OperandSpec& o : spec.outputs) types.push_back({o.dtype, spec.shape});
  return runtime::eval_scalar_program(spec.body, all, types);
}

}  // namespace ampfuse::testing
