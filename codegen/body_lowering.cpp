#include "codegen/body_lowering.h"

#include "codegen/dtype_lowering.h"
#include "codegen/float_ops.h"
#include "codegen/vector_math.h"
#include "ir/error.h"

#include <algorithm>
#include <iterator>

namespace ampfuse::codegen {

namespace {

using ir::ScalarOp;
using llvm::Value;

Value* from_bool(const FloatOps& f, Value* cond) { return f.sel(cond, f.c(1), f.c(0)); }

// NaN-propagating, in the reference evaluator's form so that even NaN payloads and the
// sign of max(-0, +0) agree: a if it wins the compare, else a if it is NaN, else b.
Value* nan_max_min(const FloatOps& f, Value* a, Value* b, bool is_max) {
  return f.sel(is_max ? f.gt(a, b) : f.lt(a, b), a, f.sel(f.is_nan(a), a, b));
}

// ir::philox_bits24 in i32 arithmetic: each round's 32x32->64 products as one i64
// multiply of zero-extended words (vectorizes as widening multiplies; no calls), and the
// key schedule folded into constants. `offset` is an i64 value: a constant for
// philox_bits24 (folded as before), computed from the step for philox_bits24_at.
Value* philox_bits24(llvm::IRBuilder<>& b, uint64_t seed, Value* offset, Value* index) {
  llvm::Type* i32 = b.getInt32Ty();
  llvm::Type* i64 = b.getInt64Ty();
  const auto word = [&](uint64_t v) -> Value* { return b.getInt32(static_cast<uint32_t>(v)); };
  const auto mul_hi_lo = [&](uint32_t m, Value* x) {
    Value* p = b.CreateMul(b.CreateZExt(x, i64), llvm::ConstantInt::get(i64, m), "", /*HasNUW=*/true);
    return std::pair{b.CreateTrunc(b.CreateLShr(p, 32), i32), b.CreateTrunc(p, i32)};
  };
  Value* c[4] = {b.CreateTrunc(index, i32), b.CreateTrunc(b.CreateLShr(index, 32), i32), b.CreateTrunc(offset, i32),
                 b.CreateTrunc(b.CreateLShr(offset, 32), i32)};
  uint32_t key0 = static_cast<uint32_t>(seed), key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) key0 += 0x9E3779B9u, key1 += 0xBB67AE85u;
    const auto [hi0, lo0] = mul_hi_lo(0xD2511F53u, c[0]);
    const auto [hi1, lo1] = mul_hi_lo(0xCD9E8D57u, c[2]);
    Value* next[4] = {b.CreateXor(b.CreateXor(hi1, c[1]), word(key0)), lo1, b.CreateXor(b.CreateXor(hi0, c[3]), word(key1)),
                      lo0};
    std::copy(std::begin(next), std::end(next), std::begin(c));
  }
  return b.CreateLShr(c[0], 8);
}

// ir::philox_step_offset of the step `step` (compute type): the step clamped to [0, 2^53]
// in floating point (NaN -> 0) before the conversion, so fptoui never sees a value out of
// its range, then offset + count * stride in wrapping i64 arithmetic.
Value* step_offset(const FloatOps& f, const ir::ScalarInstr& s, Value* step) {
  llvm::IRBuilder<>& b = f.b;
  Value* limit = f.c(9007199254740992.0);  // 2^53, exact in f32 and f64
  Value* clamped = f.sel(f.ge(step, f.c(0)), f.sel(f.lt(step, limit), step, limit), f.c(0));
  Value* count = b.CreateFPToUI(clamped, b.getInt64Ty());
  return b.CreateAdd(b.getInt64(s.offset), b.CreateMul(count, b.getInt64(s.stride)));
}

Value* lower_instr(const FloatOps& f, const ir::ScalarInstr& s, Value* a, Value* b, Value* c) {
  switch (s.op) {
    case ScalarOp::neg: return f.neg(a);
    case ScalarOp::abs: return f.fabs(a);
    // a + 0 turns -0 into +0 and keeps NaN.
    case ScalarOp::sign: return f.sel(f.gt(a, f.c(0)), f.c(1), f.sel(f.lt(a, f.c(0)), f.c(-1), f.add(a, f.c(0))));
    case ScalarOp::sqrt: return f.sqrt(a);
    case ScalarOp::rsqrt: return f.div(f.c(1), f.sqrt(a));
    case ScalarOp::floor: return f.floor(a);
    case ScalarOp::ceil: return f.ceil(a);
    case ScalarOp::trunc: return f.trunc(a);
    case ScalarOp::round: return f.b.CreateUnaryIntrinsic(llvm::Intrinsic::round, a);  // halves away from 0
    case ScalarOp::fmod: return f.b.CreateFRem(a, b);  // LLVM's frem is C's fmod
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
    case ScalarOp::erfinv: return emit_library_call(f.b, s.op, a);
    case ScalarOp::isfinite: return from_bool(f, f.is_finite(a));
    case ScalarOp::round_to: return round_in_compute(f.b, a, s.dtype);
    case ScalarOp::add: return f.add(a, b);
    case ScalarOp::sub: return f.sub(a, b);
    case ScalarOp::mul: return f.mul(a, b);
    case ScalarOp::div: return f.div(a, b);
    case ScalarOp::max: return nan_max_min(f, a, b, true);
    case ScalarOp::min: return nan_max_min(f, a, b, false);
    case ScalarOp::eq: return from_bool(f, f.eq(a, b));
    case ScalarOp::ne: return from_bool(f, f.ne(a, b));
    case ScalarOp::lt: return from_bool(f, f.lt(a, b));
    case ScalarOp::le: return from_bool(f, f.le(a, b));
    case ScalarOp::gt: return from_bool(f, f.gt(a, b));
    case ScalarOp::ge: return from_bool(f, f.ge(a, b));
    case ScalarOp::select: return f.sel(f.ne(a, f.c(0)), b, c);
    case ScalarOp::exp:
    case ScalarOp::log:
    case ScalarOp::log1p:
    case ScalarOp::expm1:
    case ScalarOp::tanh:
    case ScalarOp::erf: return emit_transcendental(f.b, s.op, {a});
    case ScalarOp::pow: return emit_transcendental(f.b, s.op, {a, b});
    case ScalarOp::input:
    case ScalarOp::constant:
    case ScalarOp::philox_bits24:
    case ScalarOp::philox_bits24_at: break;
  }
  fail("internal error: cannot lower scalar op {}", ir::scalar_op_name(s.op));
}

}  // namespace

std::vector<Value*> lower_scalar_program(llvm::IRBuilder<>& b, const ir::ScalarProgram& p,
                                         llvm::ArrayRef<Value*> inputs, Value* element_index, llvm::Type* compute) {
  FloatOps f(b, compute);
  std::vector<Value*> values;
  values.reserve(p.instrs.size());
  for (const ir::ScalarInstr& s : p.instrs) {
    if (s.op == ScalarOp::input) {
      values.push_back(inputs[static_cast<size_t>(s.index)]);
    } else if (s.op == ScalarOp::constant) {
      values.push_back(f.c(s.value));  // ConstantFP rounds the double to nearest, as a C++ cast does
    } else if (s.op == ScalarOp::philox_bits24) {
      if (!element_index) fail("internal error: philox_bits24 in a program without an element index");
      values.push_back(b.CreateUIToFP(philox_bits24(b, s.seed, b.getInt64(s.offset), element_index), compute));  // exact: < 2^24
    } else if (s.op == ScalarOp::philox_bits24_at) {
      if (!element_index) fail("internal error: philox_bits24_at in a program without an element index");
      Value* offset = step_offset(f, s, values[static_cast<size_t>(s.a)]);
      values.push_back(b.CreateUIToFP(philox_bits24(b, s.seed, offset, element_index), compute));  // exact: < 2^24
    } else {
      auto operand = [&](int32_t i) { return i >= 0 ? values[static_cast<size_t>(i)] : nullptr; };
      values.push_back(lower_instr(f, s, operand(s.a), operand(s.b), operand(s.c)));
    }
  }
  std::vector<Value*> results;
  for (int32_t r : p.results) results.push_back(values[static_cast<size_t>(r)]);
  return results;
}

}  // namespace ampfuse::codegen
