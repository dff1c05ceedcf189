// Arithmetic on one floating-point type and its same-width integer type, over IRBuilder.
//
// The emitters write scalar code (one element per loop iteration) and leave vectorizing to
// LLVM's loop vectorizer, so everything here is branch-free: selects, not control flow.
// Constants follow the value's type, so the same helpers serve float and double.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <cstdint>
#include <initializer_list>
#include <limits>

namespace ampfuse::codegen {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

class FloatOps {
 public:
  FloatOps(llvm::IRBuilder<>& b, llvm::Type* float_type);

  llvm::IRBuilder<>& b;
  llvm::Type* const ft;  // float or double
  llvm::Type* const it;  // i32 or i64
  int mantissa_bits() const;  // 23 or 52
  int exponent_bias() const;  // 127 or 1023

  llvm::Value* c(double v) const;  // rounded to ft
  llvm::Value* ci(int64_t v) const;

  // IEEE operations, no fast-math flags: each rounds once, as C++ does with contraction off.
  llvm::Value* add(llvm::Value* x, llvm::Value* y) const { return b.CreateFAdd(x, y); }
  llvm::Value* sub(llvm::Value* x, llvm::Value* y) const { return b.CreateFSub(x, y); }
  llvm::Value* mul(llvm::Value* x, llvm::Value* y) const { return b.CreateFMul(x, y); }
  llvm::Value* div(llvm::Value* x, llvm::Value* y) const { return b.CreateFDiv(x, y); }
  llvm::Value* neg(llvm::Value* x) const { return b.CreateFNeg(x); }

  // Ordered compares are false when either side is NaN; `ne` is true then.
  llvm::Value* lt(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpOLT(x, y); }
  llvm::Value* le(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpOLE(x, y); }
  llvm::Value* gt(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpOGT(x, y); }
  llvm::Value* ge(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpOGE(x, y); }
  llvm::Value* eq(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpOEQ(x, y); }
  llvm::Value* ne(llvm::Value* x, llvm::Value* y) const { return b.CreateFCmpUNE(x, y); }
  llvm::Value* is_nan(llvm::Value* x) const { return b.CreateFCmpUNO(x, x); }
  llvm::Value* is_inf(llvm::Value* x) const { return b.CreateFCmpOEQ(fabs(x), c(kInf)); }
  llvm::Value* is_finite(llvm::Value* x) const { return b.CreateFCmpOLT(fabs(x), c(kInf)); }
  llvm::Value* sign_bit(llvm::Value* x) const { return b.CreateICmpSLT(bits(x), ci(0)); }

  llvm::Value* sel(llvm::Value* cond, llvm::Value* x, llvm::Value* y) const { return b.CreateSelect(cond, x, y); }
  // Clamps to [lo, hi]; NaN becomes lo, so that integer conversions after it stay defined.
  llvm::Value* clamp(llvm::Value* x, double lo, double hi) const;

  llvm::Value* fabs(llvm::Value* x) const { return unary(llvm::Intrinsic::fabs, x); }
  llvm::Value* rint(llvm::Value* x) const { return unary(llvm::Intrinsic::rint, x); }
  llvm::Value* floor(llvm::Value* x) const { return unary(llvm::Intrinsic::floor, x); }
  llvm::Value* ceil(llvm::Value* x) const { return unary(llvm::Intrinsic::ceil, x); }
  llvm::Value* trunc(llvm::Value* x) const { return unary(llvm::Intrinsic::trunc, x); }
  llvm::Value* sqrt(llvm::Value* x) const { return unary(llvm::Intrinsic::sqrt, x); }
  llvm::Value* copysign(llvm::Value* mag, llvm::Value* sign) const;

  llvm::Value* bits(llvm::Value* x) const { return b.CreateBitCast(x, it); }
  llvm::Value* from_bits(llvm::Value* i) const { return b.CreateBitCast(i, ft); }
  llvm::Value* to_int(llvm::Value* x) const { return b.CreateFPToSI(x, it); }  // x must be in range
  llvm::Value* to_float(llvm::Value* i) const { return b.CreateSIToFP(i, ft); }
  // 2^k for an integer k in the normal exponent range, built from its exponent bits.
  llvm::Value* pow2(llvm::Value* k) const;

  // c[0] + x*(c[1] + x*(c[2] + ...)), innermost first.
  llvm::Value* horner(llvm::Value* x, std::initializer_list<double> coeffs) const;

 private:
  llvm::Value* unary(llvm::Intrinsic::ID id, llvm::Value* x) const;
};

}  // namespace ampfuse::codegen
