// The CUDA C++ emitter (codegen/cuda_emitter.h): prelude, per-kernel element function,
// loop shapes (flat with 128-bit packs, strided) and the __global__ entry point.
#include "codegen/cuda_emitter.h"

#include "ir/dump.h"
#include "ir/error.h"
#include "ir/int_conversion.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>

namespace ampfuse::codegen {

namespace {

using ir::DType;
using ir::ScalarOp;

// Conversions in integer code, transcribed from ir/lowp.h and runtime/scalar_eval.cpp. The
// float operations they do use explicit _rn intrinsics so that no contraction or flushing
// option can change them.
constexpr const char* kPrelude = R"(// ampfuse CUDA prelude: exact conversions (ir/lowp.h), saturation, packs.
template <class T, int V>
struct alignas(sizeof(T) * V) AfPack {
  T v[V];
};

__device__ __forceinline__ float af_bf16_to_f32(unsigned short h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}

// RNE: add 0x7FFF plus the lowest kept bit, drop 16 bits; NaN is quieted instead.
__device__ __forceinline__ unsigned short af_f32_to_bf16(float x) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<unsigned short>((u >> 16) | 0x40u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<unsigned short>(u >> 16);
}

__device__ __forceinline__ float af_f16_to_f32(unsigned short h) {
  const unsigned sign = static_cast<unsigned>(h & 0x8000u) << 16;
  const unsigned exp = (h >> 10) & 0x1Fu;
  const unsigned man = h & 0x3FFu;
  if (exp == 0x1Fu) return __uint_as_float(sign | 0x7F800000u | (man << 13));
  if (exp != 0u) return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
  const float mag = __fmul_rn(static_cast<float>(man), 5.9604644775390625e-08f);  // man * 2^-24, exact
  return __uint_as_float(sign | __float_as_uint(mag));
}

// RNE with subnormal results: |x| >= 65520 -> Inf; normal range: rebias and round the 13
// dropped bits like bf16; below 2^-14: 0.5f + |x| rounds to a multiple of 2^-24.
__device__ __forceinline__ unsigned short af_f32_to_f16(float x) {
  const unsigned u = __float_as_uint(x);
  const unsigned short sign = static_cast<unsigned short>((u >> 16) & 0x8000u);
  const unsigned a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | static_cast<unsigned short>((a >> 13) & 0x1FFu);
  if (a >= 0x477FF000u) return sign | 0x7C00u;
  if (a >= 0x38800000u) {
    unsigned r = a - (112u << 23);
    r += 0xFFFu + ((r >> 13) & 1u);
    return sign | static_cast<unsigned short>(r >> 13);
  }
  const float sum = __fadd_rn(__uint_as_float(a), 0.5f);
  return sign | static_cast<unsigned short>(__float_as_uint(sum) - 0x3F000000u);
}

// f64 -> f32 rounding to odd (truncate, set the lowest bit when inexact): the second
// rounding to f16/bf16 is then correct, as on the CPU.
__device__ __forceinline__ float af_f64_to_f32_odd(double d) {
  if (d != d) return static_cast<float>(d);
  const float f = __double2float_rz(d);
  if (static_cast<double>(f) == d) return f;
  return __uint_as_float(__float_as_uint(f) | 1u);
}

// Truncate toward zero, saturate at the type's range, NaN -> 0 (ir/int_conversion.h; the
// emitter passes the limits of ir::integer_range).
template <class I, class T>
__device__ __forceinline__ I af_saturate(T x, I lo_i, I hi_i) {
  if (x != x) return I(0);
  x = trunc(x);
  const T lo = static_cast<T>(lo_i), hi = static_cast<T>(hi_i);
  if (x <= lo) return lo_i;
  if (x >= hi) return hi_i;
  return static_cast<I>(x);
}

__device__ __forceinline__ bool af_nonfinite(float x) { return !(fabsf(x) < __uint_as_float(0x7F800000u)); }
__device__ __forceinline__ bool af_nonfinite(double x) {
  return !(fabs(x) < __longlong_as_double(0x7FF0000000000000LL));
}

template <class P>
__device__ __forceinline__ bool af_aligned(const P* p, unsigned bytes) {
  return reinterpret_cast<unsigned long long>(p) % bytes == 0;
}

// ir::philox_bits24: Philox-4x32-10 word 0 of counter (index, offset) under key `seed`,
// top 24 bits. 64-bit products of 32-bit words (what __umulhi computes), unrolled.
__device__ __forceinline__ unsigned af_philox_bits24(unsigned long long seed, unsigned long long offset,
                                                     unsigned long long index) {
  unsigned c0 = static_cast<unsigned>(index), c1 = static_cast<unsigned>(index >> 32);
  unsigned c2 = static_cast<unsigned>(offset), c3 = static_cast<unsigned>(offset >> 32);
  unsigned k0 = static_cast<unsigned>(seed), k1 = static_cast<unsigned>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    c0 = static_cast<unsigned>(p1 >> 32) ^ c1 ^ k0;
    c1 = static_cast<unsigned>(p1);
    c2 = static_cast<unsigned>(p0 >> 32) ^ c3 ^ k1;
    c3 = static_cast<unsigned>(p0);
  }
  return c0 >> 8;
}

// ir::philox_step_offset: the step (an f32 value, or f64; exact as a double) clamped to
// [0, 2^53] with NaN as 0, truncated, then offset + count * stride modulo 2^64.
__device__ __forceinline__ unsigned long long af_step_offset(unsigned long long offset, unsigned long long stride,
                                                             double step) {
  const double limit = 9007199254740992.0;
  const double clamped = step >= 0.0 ? (step < limit ? step : limit) : 0.0;
  return offset + static_cast<unsigned long long>(clamped) * stride;
}
)";

const char* storage_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::f16:
    case DType::bf16: return "unsigned short";
    case DType::i8: return "signed char";
    case DType::u8:
    case DType::boolean: return "unsigned char";
    case DType::i32: return "int";
    case DType::i64: return "long long";
  }
  return "?";
}

// A stored value `v` of dtype `t` widened to the compute type `c` ("float"/"double").
std::string widen(const std::string& v, DType t, const std::string& c) {
  switch (t) {
    case DType::f32:
    case DType::f64:
    case DType::i8:
    case DType::u8:
    case DType::i32: return fmt::format("static_cast<{}>({})", c, v);
    case DType::i64: return fmt::format("static_cast<{}>(static_cast<double>({}))", c, v);  // as the CPU emitter
    case DType::f16: return fmt::format("static_cast<{}>(af_f16_to_f32({}))", c, v);
    case DType::bf16: return fmt::format("static_cast<{}>(af_bf16_to_f32({}))", c, v);
    case DType::boolean: return fmt::format("({} != 0 ? {}(1) : {}(0))", v, c, c);
  }
  return "?";
}

// `v` as a C++ literal of a `bits`-wide integer type. A signed minimum has no literal (the
// minus applies to a positive literal one past the maximum), so it is written -max - 1.
std::string integer_literal(int64_t v, int bits) {
  const char* suffix = bits == 64 ? "LL" : "";
  if (v == std::numeric_limits<int64_t>::min()) return fmt::format("-9223372036854775807{} - 1", suffix);
  if (v == std::numeric_limits<int32_t>::min()) return "-2147483647 - 1";
  return fmt::format("{}{}", v, suffix);
}

// A compute-type value `x` rounded and stored as dtype `t`.
std::string narrow(const std::string& x, DType t, bool f64_compute) {
  const std::string f32 = f64_compute ? fmt::format("af_f64_to_f32_odd({})", x) : x;
  switch (t) {
    case DType::f32: return fmt::format("static_cast<float>({})", x);
    case DType::f64: return fmt::format("static_cast<double>({})", x);
    case DType::f16: return fmt::format("af_f32_to_f16({})", f32);
    case DType::bf16: return fmt::format("af_f32_to_bf16({})", f32);
    case DType::i8:
    case DType::u8:
    case DType::i32:
    case DType::i64: {
      const ir::IntegerRange r = ir::integer_range(t);
      return fmt::format("af_saturate<{}>({}, {}, {})", storage_type(t), x, integer_literal(r.min, r.bits),
                         integer_literal(r.max, r.bits));
    }
    case DType::boolean: return fmt::format("static_cast<unsigned char>({} != 0 ? 1 : 0)", x);
  }
  return "?";
}

// The exact value of the constant in the compute type, as bits (NaN and Inf included).
std::string constant(double v, bool f64) {
  if (f64)
    return fmt::format("__longlong_as_double(0x{:016x}LL) /* {} */", std::bit_cast<uint64_t>(v), v);
  const float f = static_cast<float>(v);
  return fmt::format("__uint_as_float(0x{:08x}u) /* {} */", std::bit_cast<uint32_t>(f), f);
}

std::string math_fn(ScalarOp op, bool f64) {
  const char* base = "";
  switch (op) {
    case ScalarOp::exp: base = "exp"; break;
    case ScalarOp::log: base = "log"; break;
    case ScalarOp::log1p: base = "log1p"; break;
    case ScalarOp::expm1: base = "expm1"; break;
    case ScalarOp::erf: base = "erf"; break;
    case ScalarOp::tanh: base = "tanh"; break;
    case ScalarOp::pow: base = "pow"; break;
    case ScalarOp::sqrt: base = "sqrt"; break;
    case ScalarOp::floor: base = "floor"; break;
    case ScalarOp::ceil: base = "ceil"; break;
    case ScalarOp::trunc: base = "trunc"; break;
    case ScalarOp::abs: base = "fabs"; break;
    case ScalarOp::round: base = "round"; break;
    case ScalarOp::fmod: base = "fmod"; break;
    case ScalarOp::sin: base = "sin"; break;
    case ScalarOp::cos: base = "cos"; break;
    case ScalarOp::tan: base = "tan"; break;
    case ScalarOp::asin: base = "asin"; break;
    case ScalarOp::acos: base = "acos"; break;
    case ScalarOp::atan: base = "atan"; break;
    case ScalarOp::sinh: base = "sinh"; break;
    case ScalarOp::cosh: base = "cosh"; break;
    case ScalarOp::asinh: base = "asinh"; break;
    case ScalarOp::acosh: base = "acosh"; break;
    case ScalarOp::atanh: base = "atanh"; break;
    case ScalarOp::log2: base = "log2"; break;
    case ScalarOp::log10: base = "log10"; break;
    case ScalarOp::cbrt: base = "cbrt"; break;
    case ScalarOp::tgamma: base = "tgamma"; break;
    case ScalarOp::lgamma: base = "lgamma"; break;  // CUDA's keeps no global sign
    case ScalarOp::erfinv: base = "erfinv"; break;
    default: fail("internal error: no CUDA math function for {}", ir::scalar_op_name(op));
  }
  return f64 ? std::string(base) : std::string(base) + "f";
}

// One instruction's right-hand side.
std::string instr_expr(const ir::ScalarInstr& s, const std::string& c, bool f64) {
  const std::string a = fmt::format("v{}", s.a), b = fmt::format("v{}", s.b), cc = fmt::format("v{}", s.c);
  const std::string one = c + "(1)", zero = c + "(0)";
  auto cmp = [&](const char* o) { return fmt::format("({} {} {} ? {} : {})", a, o, b, one, zero); };
  switch (s.op) {
    case ScalarOp::neg: return "-" + a;
    case ScalarOp::abs:
    case ScalarOp::sqrt:
    case ScalarOp::floor:
    case ScalarOp::ceil:
    case ScalarOp::trunc:
    case ScalarOp::exp:
    case ScalarOp::log:
    case ScalarOp::log1p:
    case ScalarOp::expm1:
    case ScalarOp::erf:
    case ScalarOp::tanh:
    case ScalarOp::round:
    case ScalarOp::sin:
    case ScalarOp::cos:
    case ScalarOp::tan:
    case ScalarOp::asin:
    case ScalarOp::acos:
    case ScalarOp::atan:
    case ScalarOp::sinh:
    case ScalarOp::cosh:
    case ScalarOp::asinh:
    case ScalarOp::acosh:
    case ScalarOp::atanh:
    case ScalarOp::log2:
    case ScalarOp::log10:
    case ScalarOp::cbrt:
    case ScalarOp::tgamma:
    case ScalarOp::lgamma:
    case ScalarOp::erfinv: return fmt::format("{}({})", math_fn(s.op, f64), a);
    case ScalarOp::fmod:
    case ScalarOp::pow: return fmt::format("{}({}, {})", math_fn(s.op, f64), a, b);
    // a + 0 turns -0 into +0 and keeps NaN, as the reference.
    case ScalarOp::sign: return fmt::format("({0} > {1} ? {2} : ({0} < {1} ? -{2} : {0} + {1}))", a, zero, one);
    // IEEE division of a correctly rounded square root: the reference's 1 / sqrt(x).
    case ScalarOp::rsqrt: return fmt::format("{} / {}({})", one, math_fn(ScalarOp::sqrt, f64), a);
    case ScalarOp::isfinite: return fmt::format("(af_nonfinite({}) ? {} : {})", a, zero, one);
    case ScalarOp::round_to: return widen(narrow(a, s.dtype, f64), s.dtype, c);
    case ScalarOp::add: return fmt::format("{} + {}", a, b);
    case ScalarOp::sub: return fmt::format("{} - {}", a, b);
    case ScalarOp::mul: return fmt::format("{} * {}", a, b);
    case ScalarOp::div: return fmt::format("{} / {}", a, b);
    // NaN-propagating, in the reference's form: a if it wins, else a if NaN, else b.
    case ScalarOp::max: return fmt::format("({0} > {1} ? {0} : ({0} != {0} ? {0} : {1}))", a, b);
    case ScalarOp::min: return fmt::format("({0} < {1} ? {0} : ({0} != {0} ? {0} : {1}))", a, b);
    case ScalarOp::eq: return cmp("==");
    case ScalarOp::ne: return cmp("!=");
    case ScalarOp::lt: return cmp("<");
    case ScalarOp::le: return cmp("<=");
    case ScalarOp::gt: return cmp(">");
    case ScalarOp::ge: return cmp(">=");
    case ScalarOp::select: return fmt::format("({} != {} ? {} : {})", a, zero, b, cc);
    case ScalarOp::philox_bits24:
      return fmt::format("static_cast<{}>(af_philox_bits24({}ull, {}ull, idx))", c, s.seed, s.offset);  // < 2^24: exact
    case ScalarOp::philox_bits24_at:
      return fmt::format("static_cast<{}>(af_philox_bits24({}ull, af_step_offset({}ull, {}ull, static_cast<double>({})), idx))",
                         c, s.seed, s.offset, s.stride, a);
    case ScalarOp::input:
    case ScalarOp::constant: break;
  }
  fail("internal error: cannot lower scalar op {} to CUDA", ir::scalar_op_name(s.op));
}

class CudaKernelWriter {
 public:
  CudaKernelWriter(const KernelSignature& sig, const std::string& name)
      : sig_(sig), name_(name), f64_(sig.compute == DType::f64), c_(f64_ ? "double" : "float") {
    if (sig.compute != DType::f32 && sig.compute != DType::f64)
      fail("kernel '{}': compute type {} is not f32 or f64", name, ir::dtype_name(sig.compute));
    if (sig.row)
      fail("kernel '{}': row kernels ({}) are generated for the CPU only; the planner keeps them off the GPU", name,
           row_op_name(sig.row->op));
    needed_.assign(sig.inputs.size(), false);
    for (const ir::ScalarInstr& s : sig.body.instrs)
      if (s.op == ScalarOp::input && s.index < num_inputs()) needed_[s.index] = true;
    for (const std::vector<int>& f : sig.flags)
      for (int k : f)
        if (k < num_inputs()) needed_[k] = true;
    uses_index_ = ir::uses_element_index(sig.body);
  }

  std::string write() {
    element_function();
    entry_point();
    return out_;
  }

 private:
  int num_inputs() const { return static_cast<int>(sig_.inputs.size()); }
  int num_operands() const { return num_inputs() + static_cast<int>(sig_.outputs.size()); }
  const OperandSignature& operand(int k) const {
    return k < num_inputs() ? sig_.inputs[k] : sig_.outputs[k - num_inputs()];
  }
  bool is_output(int k) const { return k >= num_inputs(); }
  bool used(int k) const { return is_output(k) || needed_[k]; }
  const char* type(int k) const { return storage_type(operand(k).dtype); }

  template <class... Args>
  void line(fmt::format_string<Args...> f, Args&&... args) {
    out_ += fmt::format(f, std::forward<Args>(args)...);
    out_ += '\n';
  }

  // Element function: stored input values in, stored output values and flags out.
  void element_function() {
    std::vector<std::string> params;
    for (int k = 0; k < num_inputs(); ++k)
      if (needed_[k]) params.push_back(fmt::format("const {} a{}", type(k), k));
    if (uses_index_) params.push_back("const unsigned long long idx");  // the flat iteration index
    for (int j = 0; j < sig_.num_params; ++j) params.push_back(fmt::format("const {} p{}", c_, j));
    for (int k = num_inputs(); k < num_operands(); ++k) params.push_back(fmt::format("{}& o{}", type(k), k));
    for (size_t f = 0; f < sig_.flags.size(); ++f) params.push_back(fmt::format("bool& f{}", f));
    line("// {}", cuda_signature_key(sig_));
    line("__device__ __forceinline__ void {}_element({}) {{", name_, fmt::join(params, ", "));
    for (int k = 0; k < num_inputs(); ++k)
      if (needed_[k]) line("  const {} x{} = {};", c_, k, widen(fmt::format("a{}", k), operand(k).dtype, c_));
    const ir::ScalarProgram& p = sig_.body;
    for (size_t i = 0; i < p.instrs.size(); ++i) {
      const ir::ScalarInstr& s = p.instrs[i];
      std::string rhs;
      if (s.op == ScalarOp::input) rhs = s.index < num_inputs() ? fmt::format("x{}", s.index) : fmt::format("p{}", s.index - num_inputs());
      else if (s.op == ScalarOp::constant) rhs = constant(s.value, f64_);
      else rhs = instr_expr(s, c_, f64_);
      line("  const {} v{} = {};  // {}", c_, i, rhs, ir::scalar_op_name(s.op));
    }
    for (size_t o = 0; o < p.results.size(); ++o) {
      const int k = num_inputs() + static_cast<int>(o);
      line("  o{} = {};", k, narrow(fmt::format("v{}", p.results[o]), operand(k).dtype, f64_));
    }
    for (size_t f = 0; f < sig_.flags.size(); ++f) {
      std::vector<std::string> terms;
      for (int k : sig_.flags[f]) {
        if (!ir::is_float(operand(k).dtype)) continue;  // integers are always finite
        terms.push_back(is_output(k) ? fmt::format("af_nonfinite({})", widen(fmt::format("o{}", k), operand(k).dtype, c_))
                                     : fmt::format("af_nonfinite(x{})", k));
      }
      if (!terms.empty()) line("  f{0} = f{0} | {1};", f, fmt::join(terms, " | "));
    }
    line("}}");
    line("");
  }

  // Arguments of the element function for one element; `at(k)` is operand k's expression
  // and `index` the element's flat iteration index.
  template <class At>
  std::string element_call(At at, const std::string& index) {
    std::vector<std::string> args;
    for (int k = 0; k < num_inputs(); ++k)
      if (needed_[k]) args.push_back(at(k));
    if (uses_index_) args.push_back(fmt::format("static_cast<unsigned long long>({})", index));
    for (int j = 0; j < sig_.num_params; ++j) args.push_back(fmt::format("p{}", j));
    for (int k = num_inputs(); k < num_operands(); ++k) args.push_back(fmt::format("r{}", k));
    for (size_t f = 0; f < sig_.flags.size(); ++f) args.push_back(fmt::format("f{}", f));
    return fmt::format("{}_element({})", name_, fmt::join(args, ", "));
  }

  // No __restrict__: the memory plan writes a kernel's output over a dead input's bytes
  // (engine/execution/memory_plan.h, in place), so an output may be an input. With
  // `const __restrict__` NVRTC reads inputs through the read-only path (ld.global.nc), and
  // ptxas then moved a store of an output that did not depend on the input (a constant)
  // ahead of the load of that input: the fuzzer's graph 134 read 100 where its input held
  // NaN, on an H200. Each element is still loaded before its own results are stored.
  std::vector<std::string> pointer_params() const {
    std::vector<std::string> ps;
    for (int k = 0; k < num_operands(); ++k)
      ps.push_back(fmt::format("{}{}* op{}", is_output(k) ? "" : "const ", type(k), k));
    return ps;
  }
  std::vector<std::string> index_params() const {
    std::vector<std::string> ps;
    if (sig_.flat()) return ps;
    for (int d = 0; d < sig_.rank; ++d) ps.push_back(fmt::format("const long long e{}", d));
    for (int k = 0; k < num_operands(); ++k)
      if (operand(k).layout == Layout::strided)
        for (int d = 0; d < sig_.rank; ++d)
          if (operand(k).strides[d] == StrideClass::general) ps.push_back(fmt::format("const long long s{}_{}", k, d));
    return ps;
  }
  void flat_loops() {
    const int v = cuda_vector_width(sig_);
    auto flat_at = [&](const std::string& i) {
      return [this, i](int k) { return operand(k).layout == Layout::scalar ? fmt::format("a{}", k) : fmt::format("op{}[{}]", k, i); };
    };
    line("  I start = 0;");
    if (v > 1) {
      std::vector<std::string> checks;
      for (int k = 0; k < num_operands(); ++k)
        if (used(k) && operand(k).layout == Layout::contiguous)
          checks.push_back(fmt::format("af_aligned(op{}, {}u)", k, ir::dtype_size(operand(k).dtype) * v));
      line("  // {} elements a step: 128-bit accesses of the widest operand when every pointer is aligned.", v);
      if (checks.empty()) checks.push_back("true");
      line("  if ({}) {{", fmt::join(checks, " && "));
      line("    const I steps = n / {};", v);
      line("    for (I s = tid; s < steps; s += threads) {{");
      for (int k = 0; k < num_operands(); ++k) {
        if (!used(k) || operand(k).layout != Layout::contiguous) continue;
        if (is_output(k)) line("      AfPack<{0}, {1}> q{2};", type(k), v, k);
        else line("      const AfPack<{0}, {1}> q{2} = reinterpret_cast<const AfPack<{0}, {1}>*>(op{2})[s];", type(k), v, k);
      }
      line("#pragma unroll");
      line("      for (int j = 0; j < {}; ++j) {{", v);
      for (int k = num_inputs(); k < num_operands(); ++k) line("        {} r{};", type(k), k);
      line("        {};", element_call([&](int k) {
             return operand(k).layout == Layout::scalar ? fmt::format("a{}", k) : fmt::format("q{}.v[j]", k);
           }, fmt::format("s * {} + j", v)));
      for (int k = num_inputs(); k < num_operands(); ++k)
        line("        {};", operand(k).layout == Layout::contiguous ? fmt::format("q{0}.v[j] = r{0}", k) : fmt::format("op{0}[0] = r{0}", k));
      line("      }}");
      for (int k = num_inputs(); k < num_operands(); ++k)
        if (operand(k).layout == Layout::contiguous) line("      reinterpret_cast<AfPack<{0}, {1}>*>(op{2})[s] = q{2};", type(k), v, k);
      line("    }}");
      line("    start = steps * {};", v);
      line("  }}");
    }
    line("  for (I i = start + tid; i < n; i += threads) {{");
    for (int k = num_inputs(); k < num_operands(); ++k) line("    {} r{};", type(k), k);
    line("    {};", element_call(flat_at("i"), "i"));
    for (int k = num_inputs(); k < num_operands(); ++k)
      line("    op{0}[{1}] = r{0};", k, operand(k).layout == Layout::scalar ? "0" : "i");
    line("  }}");
  }

  void strided_loop() {
    const char* o = sig_.wide_index ? "long long" : "int";
    line("  typedef {} O;  // offsets: {}", o, sig_.wide_index ? "some operand reaches past 2^31" : "below 2^31");
    line("  for (I i = tid; i < n; i += threads) {{");
    std::vector<int> strided;
    for (int k = 0; k < num_operands(); ++k)
      if (used(k) && operand(k).layout == Layout::strided) strided.push_back(k);
    for (int k : strided) line("    O off{} = 0;", k);
    line("    I rem = i;");
    for (int d = sig_.rank - 1; d >= 0; --d) {
      if (d > 0) line("    {{ const I idx = rem % static_cast<I>(e{0}); rem /= static_cast<I>(e{0});", d);
      else line("    {{ const I idx = rem;");
      for (int k : strided) {
        switch (operand(k).strides[d]) {
          case StrideClass::zero: break;
          case StrideClass::unit: line("      off{} += static_cast<O>(idx);", k); break;
          case StrideClass::general: line("      off{0} += static_cast<O>(idx) * static_cast<O>(s{0}_{1});", k, d); break;
        }
      }
      line("    }}");
    }
    for (int k = num_inputs(); k < num_operands(); ++k) line("    {} r{};", type(k), k);
    auto at = [&](int k) {
      switch (operand(k).layout) {
        case Layout::scalar: return is_output(k) ? fmt::format("op{}[0]", k) : fmt::format("a{}", k);
        case Layout::contiguous: return fmt::format("op{}[i]", k);
        case Layout::strided: return fmt::format("op{0}[off{0}]", k);
      }
      return std::string("?");
    };
    line("    {};", element_call(at, "i"));
    for (int k = num_inputs(); k < num_operands(); ++k) line("    {} = r{};", at(k), k);
    line("  }}");
  }

  // The kernel: parameters, loops, flag votes. Loop counters are 64-bit in flat kernels
  // (no division, n unbounded) and in wide strided ones; else unsigned 32-bit, which
  // cannot wrap: n < 2^31 and the grid is smaller.
  void entry_point() {
    std::vector<std::string> params = {"const long long count"};
    for (const auto& group : {pointer_params(), index_params()}) params.insert(params.end(), group.begin(), group.end());
    for (int j = 0; j < sig_.num_params; ++j) params.push_back(fmt::format("const double param{}", j));
    if (!sig_.flags.empty()) params.push_back("int* __restrict__ flags");
    line("extern \"C\" __global__ void __launch_bounds__({}) {}({}) {{", kCudaBlockSize, name_, fmt::join(params, ", "));
    for (int j = 0; j < sig_.num_params; ++j) line("  const {0} p{1} = static_cast<{0}>(param{1});", c_, j);
    for (size_t f = 0; f < sig_.flags.size(); ++f) line("  bool f{} = false;", f);
    line("  typedef {} I;", sig_.flat() || sig_.wide_index ? "long long" : "unsigned");
    line("  const I n = static_cast<I>(count);");
    line("  const I threads = static_cast<I>(gridDim.x) * blockDim.x;");
    line("  const I tid = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;");
    // Broadcast scalars: one load per thread.
    for (int k = 0; k < num_inputs(); ++k)
      if (needed_[k] && operand(k).layout == Layout::scalar) line("  const {0} a{1} = op{1}[0];", type(k), k);
    if (sig_.flat()) flat_loops();
    else strided_loop();
    for (size_t f = 0; f < sig_.flags.size(); ++f) {
      line("  // One vote per block, then at most one plain store of 1: no atomics.");
      line("  if (__syncthreads_or(f{0}) != 0 && threadIdx.x == 0) flags[{0}] = 1;", f);
    }
    line("}}");
  }

  const KernelSignature& sig_;
  const std::string name_;
  const bool f64_;
  const std::string c_;
  std::vector<bool> needed_;
  bool uses_index_ = false;  // the body draws random bits (philox_bits24(_at)): pass the element index
  std::string out_;
};

}  // namespace

std::string cuda_prelude() { return kPrelude; }

std::string emit_cuda_kernel(const KernelSignature& sig, const std::string& name) {
  return CudaKernelWriter(sig, name).write();
}

std::string emit_cuda_source(const KernelSignature& sig, const std::string& name) {
  std::string src = cuda_prelude() + "\n" + emit_cuda_kernel(sig, name);
  if (dump_enabled("code")) std::fprintf(stderr, "// CUDA kernel %s\n%s\n", name.c_str(), src.c_str());
  return src;
}

std::string cuda_signature_key(const KernelSignature& sig) {
  if (sig.tile == TileShape::none && !sig.streams) return sig.key();
  KernelSignature cuda = sig;
  cuda.tile = TileShape::none;
  cuda.tile_extent = 0;
  cuda.streams = false;
  return cuda.key();
}

std::string cuda_kernel_name(const KernelSignature& sig) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char ch : cuda_signature_key(sig)) h = (h ^ ch) * 0x100000001b3ull;
  return fmt::format("ampfuse_{:016x}", h);
}

int cuda_vector_width(const KernelSignature& sig) {
  if (!sig.flat()) return 1;
  size_t widest = 0;
  for (const OperandSignature& o : sig.outputs)
    if (o.layout == Layout::contiguous) widest = std::max(widest, ir::dtype_size(o.dtype));
  for (const OperandSignature& o : sig.inputs)
    if (o.layout == Layout::contiguous) widest = std::max(widest, ir::dtype_size(o.dtype));
  return widest == 0 ? 1 : static_cast<int>(16 / widest);
}

std::vector<int64_t> cuda_index_arguments(const KernelSpec& spec) {
  const KernelSignature sig = signature(spec);
  std::vector<int64_t> args;
  if (sig.flat()) return args;
  args.insert(args.end(), spec.shape.begin(), spec.shape.end());
  const int n_in = static_cast<int>(spec.inputs.size());
  for (int k = 0; k < n_in + static_cast<int>(spec.outputs.size()); ++k) {
    const OperandSignature& o = k < n_in ? sig.inputs[k] : sig.outputs[k - n_in];
    const OperandSpec& os = k < n_in ? spec.inputs[k] : spec.outputs[k - n_in];
    if (o.layout != Layout::strided) continue;
    for (int d = 0; d < sig.rank; ++d)
      if (o.strides[d] == StrideClass::general) args.push_back(os.strides[d]);
  }
  return args;
}

CudaLaunchConfig cuda_launch_config(int64_t elements, int vector_width, const CudaDeviceLimits& device) {
  if (elements <= 0) fail("CUDA launch configuration for {} elements", elements);
  CudaLaunchConfig c;
  c.block = static_cast<unsigned>(std::min(kCudaBlockSize, std::max(32, device.max_threads_per_block)));
  const int64_t steps = (elements + std::max(vector_width, 1) - 1) / std::max(vector_width, 1);
  const int64_t needed = (steps + c.block - 1) / c.block;
  const int64_t resident = int64_t{std::max(device.multiprocessors, 1)} *
                           std::max<int64_t>(device.max_threads_per_multiprocessor / c.block, 1);
  c.grid = static_cast<unsigned>(std::max<int64_t>(1, std::min({needed, resident, int64_t{device.max_grid_x}})));
  return c;
}

}  // namespace ampfuse::codegen
