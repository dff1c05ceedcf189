// The reference evaluator of scalar programs (ir/scalar_program.h): the meaning every fused
// kernel must reproduce.
//
// It runs array-at-a-time: the output index space is cut into blocks of kBlock elements and
// each live instruction processes a whole block before the next one starts, so the inner
// loops are simple enough for the compiler to vectorize and the per-element cost is a few
// nanoseconds per instruction, not an interpreter dispatch.
//
// Broadcasting: every input is addressed through strides over the output's index space
// (stride 0 along broadcast extents). Dimensions are first collapsed wherever all inputs
// are contiguous across a pair of them, so a same-shape op runs as one flat loop and an NCHW
// tensor against a (1,C,1,1) one as [N, C, H*W].
#include "runtime/interpreter.h"

#include "ir/error.h"
#include "ir/int_conversion.h"
#include "ir/lowp.h"
#include "ir/philox.h"
#include "ir/special_functions.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace ampfuse::runtime {

namespace {

using ir::ScalarInstr;
using ir::ScalarOp;
using ir::ScalarProgram;

constexpr int64_t kBlock = 1024;

// ---------------------------------------------------------------------------------------
// Conversions: loads widen exactly; stores and round_to follow the rules of
// ir/scalar_program.h: RNE to f16/bf16 (ir/lowp.h), truncate and saturate to integers with
// NaN -> 0 (ir/int_conversion.h), bool is x != 0.

template <class T>
uint16_t to_f16_bits(T x) {
  if constexpr (std::is_same_v<T, float>) return ir::f32_to_f16_bits(x);
  else return ir::f64_to_f16_bits(x);
}
template <class T>
uint16_t to_bf16_bits(T x) {
  if constexpr (std::is_same_v<T, float>) return ir::f32_to_bf16_bits(x);
  else return ir::f64_to_bf16_bits(x);
}

template <DType D, class T>
T load_one(const void* p, int64_t i) {
  if constexpr (D == DType::f32) return static_cast<T>(static_cast<const float*>(p)[i]);
  else if constexpr (D == DType::f16) return static_cast<T>(ir::f16_bits_to_f32(static_cast<const uint16_t*>(p)[i]));
  else if constexpr (D == DType::bf16) return static_cast<T>(ir::bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]));
  else if constexpr (D == DType::f64) return static_cast<T>(static_cast<const double*>(p)[i]);
  else if constexpr (D == DType::i8) return static_cast<T>(static_cast<const int8_t*>(p)[i]);
  else if constexpr (D == DType::u8) return static_cast<T>(static_cast<const uint8_t*>(p)[i]);
  else if constexpr (D == DType::i32) return static_cast<T>(static_cast<const int32_t*>(p)[i]);
  else if constexpr (D == DType::i64) return static_cast<T>(static_cast<const int64_t*>(p)[i]);
  else return static_cast<const uint8_t*>(p)[i] != 0 ? T(1) : T(0);
}

template <DType D, class T>
void store_one(void* p, int64_t i, T x) {
  if constexpr (D == DType::f32) static_cast<float*>(p)[i] = static_cast<float>(x);
  else if constexpr (D == DType::f16) static_cast<uint16_t*>(p)[i] = to_f16_bits(x);
  else if constexpr (D == DType::bf16) static_cast<uint16_t*>(p)[i] = to_bf16_bits(x);
  else if constexpr (D == DType::f64) static_cast<double*>(p)[i] = static_cast<double>(x);
  else if constexpr (D == DType::i8) static_cast<int8_t*>(p)[i] = ir::saturating_float_to_int<int8_t>(x);
  else if constexpr (D == DType::u8) static_cast<uint8_t*>(p)[i] = ir::saturating_float_to_int<uint8_t>(x);
  else if constexpr (D == DType::i32) static_cast<int32_t*>(p)[i] = ir::saturating_float_to_int<int32_t>(x);
  else if constexpr (D == DType::i64) static_cast<int64_t*>(p)[i] = ir::saturating_float_to_int<int64_t>(x);
  else static_cast<uint8_t*>(p)[i] = x != T(0) ? 1 : 0;  // NaN != 0: true
}

// round_to inside a program: the value a store of `x` to `d` followed by a load gives.
template <class T>
T round_to(T x, DType d) {
  switch (d) {
    case DType::f32: return static_cast<T>(static_cast<float>(x));
    case DType::f64: return x;
    case DType::f16: return static_cast<T>(ir::f16_bits_to_f32(to_f16_bits(x)));
    case DType::bf16: return static_cast<T>(ir::bf16_bits_to_f32(to_bf16_bits(x)));
    case DType::i8: return static_cast<T>(ir::saturating_float_to_int<int8_t>(x));
    case DType::u8: return static_cast<T>(ir::saturating_float_to_int<uint8_t>(x));
    case DType::i32: return static_cast<T>(ir::saturating_float_to_int<int32_t>(x));
    case DType::i64: return static_cast<T>(ir::saturating_float_to_int<int64_t>(x));
    case DType::boolean: return x != T(0) ? T(1) : T(0);
  }
  return x;
}

// Calls fn(std::integral_constant<DType, d>) so that loops are compiled once per dtype.
template <class Fn>
void dispatch_dtype(DType d, Fn&& fn) {
  switch (d) {
    case DType::f32: return fn(std::integral_constant<DType, DType::f32>{});
    case DType::f16: return fn(std::integral_constant<DType, DType::f16>{});
    case DType::bf16: return fn(std::integral_constant<DType, DType::bf16>{});
    case DType::f64: return fn(std::integral_constant<DType, DType::f64>{});
    case DType::i8: return fn(std::integral_constant<DType, DType::i8>{});
    case DType::u8: return fn(std::integral_constant<DType, DType::u8>{});
    case DType::i32: return fn(std::integral_constant<DType, DType::i32>{});
    case DType::i64: return fn(std::integral_constant<DType, DType::i64>{});
    case DType::boolean: return fn(std::integral_constant<DType, DType::boolean>{});
  }
}

// ---------------------------------------------------------------------------------------
// Addressing inputs over the output's index space.

// One input seen through the collapsed output dimensions.
struct Operand {
  const void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> strides;  // elements, per collapsed dim; 0 where broadcast
  bool flat = false;             // element i of the output reads element i
  bool single = false;           // one element, read everywhere
};

struct IndexSpace {
  std::vector<int64_t> extents;  // collapsed; at least one dim
  std::vector<Operand> operands;
};

// Strides of `in` (numpy-broadcast to `out`) per output dim: right-aligned, 0 where `in`
// has no such dim or has extent 1.
std::vector<int64_t> aligned_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t src = in.size() - 1 - k, dst = out.size() - 1 - k;
    if (in[src] != 1) s[dst] = stride;
    stride *= in[src];
  }
  return s;
}

IndexSpace make_index_space(const Shape& out, const std::vector<const Tensor*>& inputs) {
  const int64_t total = ir::num_elements(out);
  std::vector<std::vector<int64_t>> full;
  for (const Tensor* t : inputs) full.push_back(aligned_strides(t->shape(), out));

  IndexSpace space;
  space.operands.resize(inputs.size());
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // strides along an extent-1 dim never matter
    // Merge into the previous (outer) dim when every input steps through both as one.
    bool merge = !space.extents.empty();
    for (size_t k = 0; merge && k < inputs.size(); ++k)
      merge = space.operands[k].strides.back() == full[k][d] * out[d];
    if (merge) {
      space.extents.back() *= out[d];
      for (size_t k = 0; k < inputs.size(); ++k) space.operands[k].strides.back() = full[k][d];
    } else {
      space.extents.push_back(out[d]);
      for (size_t k = 0; k < inputs.size(); ++k) space.operands[k].strides.push_back(full[k][d]);
    }
  }
  if (space.extents.empty()) {  // rank 0 or all extents 1: one element
    space.extents.push_back(1);
    for (auto& o : space.operands) o.strides.push_back(0);
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    Operand& o = space.operands[k];
    o.data = inputs[k]->raw();
    o.dtype = inputs[k]->dtype();
    // A broadcastable input with as many elements as the output differs from it only by
    // extent-1 dims, which do not change row-major order.
    o.flat = inputs[k]->size() == total;
    o.single = inputs[k]->size() == 1;
  }
  return space;
}

// dst[0..n) = input elements for output indices [start, start + n).
template <DType D, class T>
void gather(const Operand& o, const std::vector<int64_t>& ext, int64_t start, int64_t n, T* dst) {
  if (o.flat) {
    for (int64_t i = 0; i < n; ++i) dst[i] = load_one<D, T>(o.data, start + i);
    return;
  }
  if (o.single) {
    std::fill(dst, dst + n, load_one<D, T>(o.data, 0));
    return;
  }
  const size_t rank = ext.size();
  const std::vector<int64_t>& st = o.strides;
  std::vector<int64_t> idx(rank);
  int64_t off = 0, rem = start;
  for (size_t d = rank; d-- > 0;) {
    idx[d] = rem % ext[d];
    rem /= ext[d];
    off += idx[d] * st[d];
  }
  const int64_t inner = ext[rank - 1], s = st[rank - 1];
  for (int64_t i = 0; i < n;) {
    // A run along the innermost dim, then a carry into the outer ones.
    const int64_t run = std::min(n - i, inner - idx[rank - 1]);
    if (s == 0) {
      std::fill(dst + i, dst + i + run, load_one<D, T>(o.data, off));
    } else {
      for (int64_t j = 0; j < run; ++j) dst[i + j] = load_one<D, T>(o.data, off + j * s);
    }
    i += run;
    off += run * s;
    idx[rank - 1] += run;
    if (idx[rank - 1] < inner) continue;
    off -= inner * s;
    idx[rank - 1] = 0;
    for (size_t d = rank - 1; d-- > 0;) {
      off += st[d];
      if (++idx[d] < ext[d]) break;
      off -= ext[d] * st[d];
      idx[d] = 0;
    }
  }
}

// ---------------------------------------------------------------------------------------
// The primitives, a block at a time. Semantics: ir/scalar_program.h.

template <class T, class F>
void map1(T* r, const T* a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) r[i] = f(a[i]);
}
template <class T, class F>
void map2(T* r, const T* a, const T* b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) r[i] = f(a[i], b[i]);
}

template <class T>
void run_instr(const ScalarInstr& s, T* r, const T* a, const T* b, const T* c, int64_t n) {
  switch (s.op) {
    case ScalarOp::input:
    case ScalarOp::constant:
    case ScalarOp::philox_bits24:
    case ScalarOp::philox_bits24_at: return;  // filled by the caller
    case ScalarOp::neg: return map1(r, a, n, [](T x) { return -x; });
    case ScalarOp::abs: return map1(r, a, n, [](T x) { return std::fabs(x); });
    case ScalarOp::sign:
      // NaN falls through every compare and comes back as itself; both zeros give +0.
      return map1(r, a, n, [](T x) { return x > 0 ? T(1) : x < 0 ? T(-1) : x == 0 ? T(0) : x; });
    case ScalarOp::exp: return map1(r, a, n, [](T x) { return std::exp(x); });
    case ScalarOp::log: return map1(r, a, n, [](T x) { return std::log(x); });
    case ScalarOp::log1p: return map1(r, a, n, [](T x) { return std::log1p(x); });
    case ScalarOp::expm1: return map1(r, a, n, [](T x) { return std::expm1(x); });
    case ScalarOp::sqrt: return map1(r, a, n, [](T x) { return std::sqrt(x); });
    case ScalarOp::rsqrt: return map1(r, a, n, [](T x) { return T(1) / std::sqrt(x); });
    case ScalarOp::erf: return map1(r, a, n, [](T x) { return std::erf(x); });
    case ScalarOp::tanh: return map1(r, a, n, [](T x) { return std::tanh(x); });
    case ScalarOp::floor: return map1(r, a, n, [](T x) { return std::floor(x); });
    case ScalarOp::ceil: return map1(r, a, n, [](T x) { return std::ceil(x); });
    case ScalarOp::trunc: return map1(r, a, n, [](T x) { return std::trunc(x); });
    case ScalarOp::round: return map1(r, a, n, [](T x) { return std::round(x); });
    // The C library's function of T: sinf for float, sin for double (see library calls).
    case ScalarOp::sin: return map1(r, a, n, [](T x) { return std::sin(x); });
    case ScalarOp::cos: return map1(r, a, n, [](T x) { return std::cos(x); });
    case ScalarOp::tan: return map1(r, a, n, [](T x) { return std::tan(x); });
    case ScalarOp::asin: return map1(r, a, n, [](T x) { return std::asin(x); });
    case ScalarOp::acos: return map1(r, a, n, [](T x) { return std::acos(x); });
    case ScalarOp::atan: return map1(r, a, n, [](T x) { return std::atan(x); });
    case ScalarOp::sinh: return map1(r, a, n, [](T x) { return std::sinh(x); });
    case ScalarOp::cosh: return map1(r, a, n, [](T x) { return std::cosh(x); });
    case ScalarOp::asinh: return map1(r, a, n, [](T x) { return std::asinh(x); });
    case ScalarOp::acosh: return map1(r, a, n, [](T x) { return std::acosh(x); });
    case ScalarOp::atanh: return map1(r, a, n, [](T x) { return std::atanh(x); });
    case ScalarOp::log2: return map1(r, a, n, [](T x) { return std::log2(x); });
    case ScalarOp::log10: return map1(r, a, n, [](T x) { return std::log10(x); });
    case ScalarOp::cbrt: return map1(r, a, n, [](T x) { return std::cbrt(x); });
    case ScalarOp::tgamma: return map1(r, a, n, [](T x) { return std::tgamma(x); });
    case ScalarOp::lgamma:
      // The kernels' reentrant helpers: std::lgamma would write the global signgam.
      if constexpr (std::is_same_v<T, float>) return map1(r, a, n, [](T x) { return ampfuse_lgammaf(x); });
      else return map1(r, a, n, [](T x) { return ampfuse_lgamma(x); });
    case ScalarOp::erfinv:
      return map1(r, a, n, [](T x) { return static_cast<T>(ir::mxnet_erfinv(static_cast<double>(x))); });
    case ScalarOp::isfinite: return map1(r, a, n, [](T x) { return std::isfinite(x) ? T(1) : T(0); });
    case ScalarOp::round_to: {
      const DType d = s.dtype;
      return map1(r, a, n, [d](T x) { return round_to(x, d); });
    }
    case ScalarOp::add: return map2(r, a, b, n, [](T x, T y) { return x + y; });
    case ScalarOp::sub: return map2(r, a, b, n, [](T x, T y) { return x - y; });
    case ScalarOp::mul: return map2(r, a, b, n, [](T x, T y) { return x * y; });
    case ScalarOp::div: return map2(r, a, b, n, [](T x, T y) { return x / y; });
    case ScalarOp::pow: return map2(r, a, b, n, [](T x, T y) { return std::pow(x, y); });
    case ScalarOp::fmod: return map2(r, a, b, n, [](T x, T y) { return std::fmod(x, y); });
    // NaN-propagating: a NaN `x` is returned by the x != x test, a NaN `y` by the fallback.
    case ScalarOp::max: return map2(r, a, b, n, [](T x, T y) { return x > y ? x : (x != x ? x : y); });
    case ScalarOp::min: return map2(r, a, b, n, [](T x, T y) { return x < y ? x : (x != x ? x : y); });
    case ScalarOp::eq: return map2(r, a, b, n, [](T x, T y) { return x == y ? T(1) : T(0); });
    case ScalarOp::ne: return map2(r, a, b, n, [](T x, T y) { return x != y ? T(1) : T(0); });
    case ScalarOp::lt: return map2(r, a, b, n, [](T x, T y) { return x < y ? T(1) : T(0); });
    case ScalarOp::le: return map2(r, a, b, n, [](T x, T y) { return x <= y ? T(1) : T(0); });
    case ScalarOp::gt: return map2(r, a, b, n, [](T x, T y) { return x > y ? T(1) : T(0); });
    case ScalarOp::ge: return map2(r, a, b, n, [](T x, T y) { return x >= y ? T(1) : T(0); });
    case ScalarOp::select:
      for (int64_t i = 0; i < n; ++i) r[i] = a[i] != T(0) ? b[i] : c[i];
      return;
  }
}

// ---------------------------------------------------------------------------------------

void check_program(const ScalarProgram& p) {
  for (size_t i = 0; i < p.instrs.size(); ++i) {
    const ScalarInstr& s = p.instrs[i];
    const int arity = ir::scalar_op_arity(s.op);
    const int32_t operands[3] = {s.a, s.b, s.c};
    for (int k = 0; k < arity; ++k)
      if (operands[k] < 0 || static_cast<size_t>(operands[k]) >= i)
        fail("scalar program: %{} ({}) uses %{}, which is not an earlier value", i, ir::scalar_op_name(s.op),
             operands[k]);
    if (s.op == ScalarOp::input && (s.index < 0 || s.index >= p.num_inputs))
      fail("scalar program: %{} reads input {} of {}", i, s.index, p.num_inputs);
  }
  for (int32_t r : p.results)
    if (r < 0 || static_cast<size_t>(r) >= p.instrs.size()) fail("scalar program: result %{} does not exist", r);
}

// Which instructions some result depends on: the others are never evaluated.
std::vector<bool> live_instrs(const ScalarProgram& p) {
  std::vector<bool> live(p.instrs.size(), false);
  for (int32_t r : p.results) live[r] = true;
  for (size_t i = p.instrs.size(); i-- > 0;) {
    if (!live[i]) continue;
    const ScalarInstr& s = p.instrs[i];
    const int arity = ir::scalar_op_arity(s.op);
    if (arity > 0) live[s.a] = true;
    if (arity > 1) live[s.b] = true;
    if (arity > 2) live[s.c] = true;
  }
  return live;
}

template <class T>
void evaluate(const ScalarProgram& p, const IndexSpace& space, int64_t total, std::vector<Tensor>& outputs) {
  const size_t count = p.instrs.size();
  const std::vector<bool> live = live_instrs(p);
  std::vector<T> regs(count * kBlock);
  // Each value is read through a pointer: usually its register, but a contiguous input that
  // is already in the compute type is read in place, without a copy.
  std::vector<const T*> value(count);
  std::vector<bool> direct(count, false);
  for (size_t i = 0; i < count; ++i) {
    const ScalarInstr& s = p.instrs[i];
    T* reg = regs.data() + i * kBlock;
    value[i] = reg;
    if (s.op == ScalarOp::constant) std::fill(reg, reg + kBlock, static_cast<T>(s.value));
    if (s.op == ScalarOp::input) {
      const Operand& o = space.operands[s.index];
      const bool same_type = (std::is_same_v<T, float> && o.dtype == DType::f32) ||
                             (std::is_same_v<T, double> && o.dtype == DType::f64);
      direct[i] = same_type && o.flat;
    }
  }

  for (int64_t start = 0; start < total; start += kBlock) {
    const int64_t n = std::min(kBlock, total - start);
    for (size_t i = 0; i < count; ++i) {
      if (!live[i]) continue;
      const ScalarInstr& s = p.instrs[i];
      T* reg = regs.data() + i * kBlock;
      if (s.op == ScalarOp::input) {
        const Operand& o = space.operands[s.index];
        if (direct[i]) {
          value[i] = static_cast<const T*>(o.data) + start;
        } else {
          dispatch_dtype(o.dtype, [&](auto d) { gather<decltype(d)::value, T>(o, space.extents, start, n, reg); });
        }
        continue;
      }
      if (s.op == ScalarOp::philox_bits24) {  // the element index is its row-major output index
        for (int64_t j = 0; j < n; ++j)
          reg[j] = static_cast<T>(ir::philox_bits24(s.seed, s.offset, static_cast<uint64_t>(start + j)));
        continue;
      }
      if (s.op == ScalarOp::philox_bits24_at) {  // as philox_bits24, the offset per element's step
        const T* step = value[s.a];
        for (int64_t j = 0; j < n; ++j) {
          const uint64_t offset = ir::philox_step_offset(s.offset, s.stride, static_cast<double>(step[j]));
          reg[j] = static_cast<T>(ir::philox_bits24(s.seed, offset, static_cast<uint64_t>(start + j)));
        }
        continue;
      }
      const int arity = ir::scalar_op_arity(s.op);
      run_instr<T>(s, reg, arity > 0 ? value[s.a] : nullptr, arity > 1 ? value[s.b] : nullptr,
                   arity > 2 ? value[s.c] : nullptr, n);
    }
    for (size_t k = 0; k < outputs.size(); ++k) {
      const T* src = value[p.results[k]];
      void* dst = outputs[k].raw();
      dispatch_dtype(outputs[k].dtype(), [&](auto d) {
        for (int64_t i = 0; i < n; ++i) store_one<decltype(d)::value, T>(dst, start + i, src[i]);
      });
    }
  }
}

}  // namespace

std::vector<Tensor> eval_scalar_program(const ir::ScalarProgram& p, const std::vector<const Tensor*>& inputs,
                                        const std::vector<TensorType>& out_types) {
  check_program(p);
  if (static_cast<int>(inputs.size()) != p.num_inputs)
    fail("scalar program takes {} inputs but {} were given", p.num_inputs, inputs.size());
  if (out_types.size() != p.results.size())
    fail("scalar program has {} results but {} output types were given", p.results.size(), out_types.size());
  if (out_types.empty()) return {};
  const Shape& out_shape = out_types[0].shape;
  for (size_t k = 1; k < out_types.size(); ++k)
    if (out_types[k].shape != out_shape)
      fail("output {} has shape {} but output 0 has {}; a scalar program's outputs share one shape", k,
           ir::shape_str(out_types[k].shape), ir::shape_str(out_shape));
  std::vector<DType> operand_dtypes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor* t = inputs[k];
    if (!t || t->empty_storage()) fail("input {} of the scalar program has no data", k);
    const Shape& s = t->shape();
    bool fits = s.size() <= out_shape.size();
    for (size_t j = 0; fits && j < s.size(); ++j)
      fits = s[s.size() - 1 - j] == 1 || s[s.size() - 1 - j] == out_shape[out_shape.size() - 1 - j];
    if (!fits)
      fail("input {} has shape {}, which does not broadcast to the output shape {}", k, ir::shape_str(s),
           ir::shape_str(out_shape));
    operand_dtypes.push_back(t->dtype());
  }
  for (const TensorType& t : out_types) operand_dtypes.push_back(t.dtype);

  std::vector<Tensor> outputs;
  for (const TensorType& t : out_types) outputs.emplace_back(t);
  const int64_t total = ir::num_elements(out_shape);
  if (total == 0) return outputs;
  const IndexSpace space = make_index_space(out_shape, inputs);
  if (ir::compute_type(operand_dtypes) == DType::f64) evaluate<double>(p, space, total, outputs);
  else evaluate<float>(p, space, total, outputs);
  return outputs;
}

}  // namespace ampfuse::runtime
