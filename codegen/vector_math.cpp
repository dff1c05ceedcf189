#include "codegen/vector_math.h"

#include "codegen/float_ops.h"
#include "ir/error.h"

#include <llvm/IR/Module.h>

#include <array>
#include <cmath>
#include <limits>

namespace ampfuse::codegen {

namespace {

using llvm::Value;
using ir::ScalarOp;

constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;
// ln 2 split so that n * kLn2Hi is exact for the |n| <= 150 of f32 arguments (9 bits
// times 8 bits), which keeps x - n ln 2 accurate without FMA.
constexpr double kLn2Hi = 0.693359375;
constexpr double kLn2Lo = kLn2 - kLn2Hi;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// e^r - 1 - r = r^2 (1/2 + r/6 + ...): Taylor to r^7, enough for |r| <= ln2/2 in f32.
constexpr std::initializer_list<double> kExpTail = {1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040};
constexpr std::initializer_list<double> kExpm1Tail = {1.0 / 2,   1.0 / 6,    1.0 / 24,  1.0 / 120,
                                                      1.0 / 720, 1.0 / 5040, 1.0 / 40320};

// x, rounded to the nearest multiple of ln 2: n and the remainder r = x - n ln 2.
struct Reduced {
  Value* n;
  Value* r;
};
Reduced reduce_by_ln2(const FloatOps& f, Value* x) {
  Value* n = f.rint(f.mul(x, f.c(kLog2e)));
  Value* r = f.sub(f.sub(x, f.mul(n, f.c(kLn2Hi))), f.mul(n, f.c(kLn2Lo)));
  return {n, r};
}

Value* exp_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  // Past these e^x is 0 or Inf; clamping keeps n within two normal powers of two.
  const auto [n, r] = reduce_by_ln2(f, f.clamp(x, -104, 89));
  Value* y = f.add(f.c(1), f.add(r, f.mul(f.mul(r, r), f.horner(r, kExpTail))));
  // 2^n can be subnormal or 2^128; as two factors each is a normal float, and only the
  // second multiply rounds.
  Value* ni = f.to_int(n);
  Value* n1 = b.CreateAShr(ni, 1);
  Value* n2 = b.CreateSub(ni, n1);
  Value* result = f.mul(f.mul(y, f.pow2(n1)), f.pow2(n2));
  return f.sel(f.is_nan(x), x, result);
}

// log(xs) + correction for a positive normal xs, with kadj added to its exponent. Writes
// xs = 2^k m with m in [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f); then
// log(m) = 2 atanh(s) = f - (f^2/2 - s (f^2/2 + R)), R = 2s^2/3 + 2s^4/5 + ..., which keeps
// the exact f as the leading term.
Value* log_core(const FloatOps& f, Value* xs, Value* kadj, Value* correction) {
  llvm::IRBuilder<>& b = f.b;
  constexpr int64_t kSqrtHalfBits = 0x3F3504F3;  // bits of sqrt(1/2) as f32
  Value* t = b.CreateSub(f.bits(xs), f.ci(kSqrtHalfBits));
  Value* k = b.CreateAdd(b.CreateAShr(t, 23), kadj);
  Value* m = f.from_bits(b.CreateAdd(b.CreateAnd(t, f.ci(0x7FFFFF)), f.ci(kSqrtHalfBits)));
  Value* fm = f.sub(m, f.c(1));
  Value* s = f.div(fm, f.add(f.c(2), fm));
  Value* z = f.mul(s, s);
  Value* R = f.mul(z, f.horner(z, {2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9}));
  Value* hfsq = f.mul(f.mul(f.c(0.5), fm), fm);
  Value* kf = f.to_float(k);
  Value* tail = f.add(f.mul(s, f.add(hfsq, R)), f.add(f.mul(kf, f.c(kLn2Lo)), correction));
  return f.add(f.mul(kf, f.c(kLn2Hi)), f.sub(fm, f.sub(hfsq, tail)));
}

Value* log_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  Value* subnormal = f.lt(x, f.c(0x1p-126));
  Value* xs = f.sel(subnormal, f.mul(x, f.c(0x1p23)), x);
  Value* r = log_core(f, xs, b.CreateSelect(subnormal, f.ci(-23), f.ci(0)), f.c(0));
  r = f.sel(f.lt(x, f.c(0)), f.c(kNaN), r);
  r = f.sel(f.eq(x, f.c(0)), f.c(-kInf), r);
  r = f.sel(f.eq(x, f.c(kInf)), x, r);
  return f.sel(f.is_nan(x), x, r);
}

Value* log1p_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  // u = 1 + x rounds; log(1 + x) = log(u) + (x - (u - 1)) / u to first order, and u - 1 is
  // exact wherever the correction matters. u >= 2^-24 here, so it is never subnormal.
  Value* u = f.add(f.c(1), x);
  Value* correction = f.div(f.sub(x, f.sub(u, f.c(1))), u);
  Value* r = log_core(f, u, f.ci(0), correction);
  r = f.sel(f.lt(x, f.c(-1)), f.c(kNaN), r);
  r = f.sel(f.eq(x, f.c(-1)), f.c(-kInf), r);
  r = f.sel(f.eq(x, f.c(kInf)), x, r);
  return f.sel(b.CreateOr(f.is_nan(x), f.eq(x, f.c(0))), x, r);  // keeps -0
}

Value* expm1_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  // Below -30 the result rounds to -1; above 89 it overflows.
  const auto [n, r] = reduce_by_ln2(f, f.clamp(x, -30, 89));
  Value* p = f.add(r, f.mul(f.mul(r, r), f.horner(r, kExpm1Tail)));  // e^r - 1
  // e^x - 1 = (2^n - 1) + 2^n p: 2^n - 1 is exact for n <= 24 and 2^n p is exact, so the
  // sum rounds once. n = 128 uses 2^127 and doubles at the end.
  Value* ni = f.to_int(n);
  Value* over = b.CreateICmpSGT(ni, f.ci(127));
  Value* t = f.pow2(b.CreateSelect(over, f.ci(127), ni));
  Value* result = f.add(f.sub(t, f.c(1)), f.mul(t, p));
  result = f.sel(over, f.mul(result, f.c(2)), result);
  return f.sel(b.CreateOr(f.is_nan(x), f.eq(x, f.c(0))), x, result);
}

// Taylor coefficients of tanh from its differential equation tanh' = 1 - tanh^2: with
// tanh x = sum a_k x^k, (k+1) a_(k+1) = [k = 0] - sum_(i+j=k) a_i a_j. Odd ones, a_3 .. a_21.
constexpr int kTanhTerms = 10;
const std::array<double, kTanhTerms>& tanh_series() {
  static const std::array<double, kTanhTerms> odd = [] {
    std::array<long double, 2 * kTanhTerms + 2> a{};
    for (int k = 0; k + 1 < static_cast<int>(a.size()); ++k) {
      long double s = k == 0 ? 1 : 0;
      for (int i = 0; i <= k; ++i) s -= a[i] * a[k - i];
      a[k + 1] = s / (k + 1);
    }
    std::array<double, kTanhTerms> c{};
    for (int n = 0; n < kTanhTerms; ++n) c[n] = static_cast<double>(a[2 * n + 3]);
    return c;
  }();
  return odd;
}

Value* tanh_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  Value* a = f.fabs(x);
  a = f.sel(f.lt(a, f.c(10)), a, f.c(10));  // tanh(10) rounds to 1; NaN is restored below
  Value* e = expm1_f32(b, f.add(a, a));
  Value* large = f.div(e, f.add(e, f.c(2)));
  // Below 0.55 the series (terms shrink by about (2a/pi)^2 each) to a^21; above, the
  // rounding errors of expm1 and the division stay below 3 ulps.
  const std::array<double, kTanhTerms>& c = tanh_series();
  Value* z = f.mul(a, a);
  Value* q = f.c(c.back());
  for (int n = kTanhTerms - 2; n >= 0; --n) q = f.add(f.c(c[n]), f.mul(z, q));
  Value* small = f.add(a, f.mul(a, f.mul(z, q)));
  Value* r = f.copysign(f.sel(f.lt(a, f.c(0.55)), small, large), x);
  return f.sel(f.is_nan(x), x, r);
}

// erf on [1/2, 4): Taylor expansions at the centres 3/4, 5/4, ..., 15/4, each used within
// 1/4 of its centre. erf^(n)(c) = 2/sqrt(pi) (-1)^(n-1) H_(n-1)(c) e^(-c^2) with the
// physicists' Hermite polynomials, so the coefficients follow from erf(c) and a recurrence;
// they are computed once in long double. The constant term is split into two floats.
constexpr int kErfCentres = 7;
constexpr int kErfDegree = 9;
constexpr int kErfRow = kErfDegree + 2;  // coefficients 0..degree, then the low part of 0
constexpr int kErfSmallTerms = 8;        // Taylor at 0 to x^15, for |x| < 1/2

using ErfTable = std::array<std::array<float, kErfRow>, kErfCentres>;

const ErfTable& erf_table() {
  static const ErfTable table = [] {
    ErfTable t{};
    const long double two_over_sqrt_pi = 2.0L / std::sqrt(std::acos(-1.0L));
    for (int k = 0; k < kErfCentres; ++k) {
      const long double c = 0.75L + 0.5L * k;
      const long double value = std::erf(c);
      t[k][0] = static_cast<float>(value);
      t[k][kErfRow - 1] = static_cast<float>(value - static_cast<long double>(t[k][0]));
      const long double gauss = two_over_sqrt_pi * std::exp(-c * c);
      long double h_prev = 1, h = 2 * c;  // H_0, H_1
      long double factorial = 1;
      for (int n = 1; n <= kErfDegree; ++n) {
        factorial *= n;
        const long double h_n_minus_1 = n == 1 ? h_prev : h;
        t[k][n] = static_cast<float>((n % 2 == 1 ? 1 : -1) * h_n_minus_1 * gauss / factorial);
        if (n >= 2) {  // advance to H_n: H_n = 2c H_(n-1) - 2(n-1) H_(n-2)
          const long double next = 2 * c * h - 2 * (n - 1) * h_prev;
          h_prev = h;
          h = next;
        }
      }
    }
    return t;
  }();
  return table;
}

llvm::GlobalVariable* erf_table_global(llvm::Module& m) {
  const char* name = "ampfuse.erf_table";
  if (llvm::GlobalVariable* g = m.getNamedGlobal(name)) return g;
  llvm::LLVMContext& ctx = m.getContext();
  llvm::ArrayType* row_type = llvm::ArrayType::get(llvm::Type::getFloatTy(ctx), kErfRow);
  llvm::ArrayType* table_type = llvm::ArrayType::get(row_type, kErfCentres);
  std::vector<llvm::Constant*> rows;
  for (const auto& row : erf_table()) {
    std::vector<llvm::Constant*> cs;
    for (float v : row) cs.push_back(llvm::ConstantFP::get(llvm::Type::getFloatTy(ctx), v));
    rows.push_back(llvm::ConstantArray::get(row_type, cs));
  }
  return new llvm::GlobalVariable(m, table_type, true, llvm::GlobalValue::PrivateLinkage,
                                  llvm::ConstantArray::get(table_type, rows), name);
}

Value* erf_f32(llvm::IRBuilder<>& b, Value* x) {
  FloatOps f(b, b.getFloatTy());
  Value* a = f.fabs(x);

  // |x| < 1/2: x * 2/sqrt(pi) * sum (-1)^n x^2n / (n! (2n+1)), the leading constant split.
  std::vector<long double> series;
  long double factorial = 1;
  const long double two_over_sqrt_pi = 2.0L / std::sqrt(std::acos(-1.0L));
  for (int n = 0; n < kErfSmallTerms; ++n) {
    if (n > 0) factorial *= n;
    series.push_back((n % 2 ? -1 : 1) * two_over_sqrt_pi / (factorial * (2 * n + 1)));
  }
  const float lead_hi = static_cast<float>(series[0]);
  const float lead_lo = static_cast<float>(series[0] - lead_hi);
  Value* z = f.mul(x, x);
  Value* q = f.c(static_cast<double>(series.back()));
  for (int n = kErfSmallTerms - 2; n >= 1; --n) q = f.add(f.c(static_cast<double>(series[n])), f.mul(z, q));
  Value* small = f.add(f.mul(x, f.c(lead_hi)), f.mul(x, f.add(f.c(lead_lo), f.mul(z, q))));

  // 1/2 <= |x| < 4: the nearest centre's row of the table.
  llvm::GlobalVariable* table = erf_table_global(*b.GetInsertBlock()->getModule());
  Value* ac = f.clamp(a, 0.5, 3.99);
  Value* k = f.to_int(f.mul(f.sub(ac, f.c(0.5)), f.c(2)));
  Value* h = f.sub(ac, f.add(f.mul(f.to_float(k), f.c(0.5)), f.c(0.75)));
  Value* k64 = b.CreateSExt(k, b.getInt64Ty());
  auto coeff = [&](int n) {
    Value* ptr = b.CreateInBoundsGEP(table->getValueType(), table, {b.getInt64(0), k64, b.getInt64(n)});
    return b.CreateLoad(f.ft, ptr);
  };
  Value* p = coeff(kErfDegree);
  for (int n = kErfDegree - 1; n >= 1; --n) p = f.add(coeff(n), f.mul(h, p));
  Value* mid = f.add(coeff(0), f.add(coeff(kErfRow - 1), f.mul(h, p)));
  mid = f.sel(f.ge(a, f.c(4)), f.c(1), mid);  // erf rounds to 1 from about 3.83

  Value* r = f.sel(f.lt(a, f.c(0.5)), small, f.copysign(mid, x));
  return f.sel(b.CreateOr(f.is_nan(x), f.eq(x, f.c(0))), x, r);  // keeps -0
}

// log2 of a positive double as in log_core, to about 2^-50 relative: the atanh series to
// s^17 (|s| <= 0.172). 0 and Inf are special-cased by the caller's selects.
Value* log2_f64(const FloatOps& d, Value* x) {
  llvm::IRBuilder<>& b = d.b;
  constexpr int64_t kSqrtHalfBits = 0x3FE6A09E667F3BCD;  // bits of sqrt(1/2) as f64
  Value* t = b.CreateSub(d.bits(x), d.ci(kSqrtHalfBits));
  Value* k = b.CreateAShr(t, 52);
  Value* m = d.from_bits(b.CreateAdd(b.CreateAnd(t, d.ci((int64_t{1} << 52) - 1)), d.ci(kSqrtHalfBits)));
  Value* fm = d.sub(m, d.c(1));
  Value* s = d.div(fm, d.add(d.c(2), fm));
  Value* z = d.mul(s, s);
  Value* R = d.mul(z, d.horner(z, {2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9, 2.0 / 11, 2.0 / 13, 2.0 / 15, 2.0 / 17}));
  Value* ln_m = d.add(d.add(s, s), d.mul(s, R));
  Value* result = d.add(d.to_float(k), d.mul(ln_m, d.c(kLog2e)));
  result = d.sel(d.eq(x, d.c(0)), d.c(-kInf), result);
  return d.sel(d.eq(x, d.c(kInf)), d.c(kInf), result);
}

Value* is_signalling_nan(const FloatOps& f, Value* x) {
  Value* quiet_bit = f.b.CreateAnd(f.bits(x), f.ci(0x400000));
  return f.b.CreateAnd(f.is_nan(x), f.b.CreateICmpEQ(quiet_bit, f.ci(0)));
}

// |x|^y = 2^(y log2|x|) in double, rounded once to float: the double result is within
// about 2^-45 relative, so the float is the nearest one except within that of a tie.
Value* pow_f32(llvm::IRBuilder<>& b, Value* x, Value* y) {
  FloatOps f(b, b.getFloatTy());
  FloatOps d(b, b.getDoubleTy());
  Value* t = d.mul(b.CreateFPExt(y, d.ft), log2_f64(d, b.CreateFPExt(f.fabs(x), d.ft)));
  t = d.clamp(t, -300, 300);  // beyond +-150 the float result is Inf or 0 anyway
  Value* n = d.rint(t);
  Value* u = d.mul(d.sub(t, n), d.c(kLn2));  // |u| <= ln2/2: Taylor of e^u to u^11
  Value* e = d.horner(u, {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
                          1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800});
  Value* result = b.CreateFPTrunc(d.mul(e, d.pow2(d.to_int(n))), f.ft);

  Value* y_integer = f.eq(f.trunc(y), y);  // Inf counts as an even integer
  Value* half = f.mul(y, f.c(0.5));
  Value* y_odd = b.CreateAnd(y_integer, f.ne(f.trunc(half), half));
  result = f.sel(b.CreateAnd(f.sign_bit(x), y_odd), f.neg(result), result);
  Value* negative_base = b.CreateAnd(f.lt(x, f.c(0)), f.is_finite(x));
  Value* fractional_exponent = b.CreateAnd(b.CreateNot(y_integer), f.is_finite(y));
  result = f.sel(b.CreateAnd(negative_base, fractional_exponent), f.c(kNaN), result);
  result = f.sel(b.CreateOr(f.is_nan(x), f.is_nan(y)), f.c(kNaN), result);
  result = f.sel(b.CreateAnd(f.eq(x, f.c(-1)), f.is_inf(y)), f.c(1), result);
  result = f.sel(b.CreateAnd(f.eq(x, f.c(1)), b.CreateNot(is_signalling_nan(f, y))), f.c(1), result);
  return f.sel(b.CreateAnd(f.eq(y, f.c(0)), b.CreateNot(is_signalling_nan(f, x))), f.c(1), result);
}

const char* libm_name(ScalarOp op) {
  switch (op) {
    case ScalarOp::exp: return "exp";
    case ScalarOp::log: return "log";
    case ScalarOp::log1p: return "log1p";
    case ScalarOp::expm1: return "expm1";
    case ScalarOp::tanh: return "tanh";
    case ScalarOp::erf: return "erf";
    case ScalarOp::pow: return "pow";
    default: return nullptr;
  }
}

// A call to the C library's double function, declared as reading no memory so that LLVM
// may hoist it out of loops (errno is never read by a kernel).
Value* call_libm(llvm::IRBuilder<>& b, ScalarOp op, llvm::ArrayRef<Value*> args) {
  llvm::Module& m = *b.GetInsertBlock()->getModule();
  std::vector<llvm::Type*> params(args.size(), b.getDoubleTy());
  llvm::FunctionType* type = llvm::FunctionType::get(b.getDoubleTy(), params, false);
  llvm::FunctionCallee callee = m.getOrInsertFunction(libm_name(op), type);
  if (auto* fn = llvm::dyn_cast<llvm::Function>(callee.getCallee())) {
    fn->setDoesNotAccessMemory();
    fn->setDoesNotThrow();
    fn->setWillReturn();
  }
  return b.CreateCall(callee, args);
}

}  // namespace

bool calls_c_library(ScalarOp op, ir::DType compute) {
  return ir::is_library_call(op) || (compute == ir::DType::f64 && ir::is_transcendental(op));
}

Value* emit_transcendental(llvm::IRBuilder<>& b, ScalarOp op, llvm::ArrayRef<Value*> args) {
  if (!ir::is_transcendental(op)) fail("internal error: {} is not a transcendental op", ir::scalar_op_name(op));
  if (args[0]->getType()->isDoubleTy()) return call_libm(b, op, args);
  switch (op) {
    case ScalarOp::exp: return exp_f32(b, args[0]);
    case ScalarOp::log: return log_f32(b, args[0]);
    case ScalarOp::log1p: return log1p_f32(b, args[0]);
    case ScalarOp::expm1: return expm1_f32(b, args[0]);
    case ScalarOp::tanh: return tanh_f32(b, args[0]);
    case ScalarOp::erf: return erf_f32(b, args[0]);
    case ScalarOp::pow: return pow_f32(b, args[0], args[1]);
    default: return nullptr;
  }
}

}  // namespace ampfuse::codegen
