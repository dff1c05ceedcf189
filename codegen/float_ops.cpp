#include "codegen/float_ops.h"

#include <vector>

namespace ampfuse::codegen {

FloatOps::FloatOps(llvm::IRBuilder<>& builder, llvm::Type* float_type)
    : b(builder),
      ft(float_type),
      it(float_type->isDoubleTy() ? builder.getInt64Ty() : builder.getInt32Ty()) {}

int FloatOps::mantissa_bits() const { return ft->isDoubleTy() ? 52 : 23; }
int FloatOps::exponent_bias() const { return ft->isDoubleTy() ? 1023 : 127; }

llvm::Value* FloatOps::c(double v) const { return llvm::ConstantFP::get(ft, v); }
llvm::Value* FloatOps::ci(int64_t v) const { return llvm::ConstantInt::get(it, static_cast<uint64_t>(v), true); }

llvm::Value* FloatOps::clamp(llvm::Value* x, double lo, double hi) const {
  llvm::Value* above = sel(gt(x, c(lo)), x, c(lo));
  return sel(lt(above, c(hi)), above, c(hi));
}

llvm::Value* FloatOps::copysign(llvm::Value* mag, llvm::Value* sign) const {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
}

llvm::Value* FloatOps::pow2(llvm::Value* k) const {
  return from_bits(b.CreateShl(b.CreateAdd(k, ci(exponent_bias())), ci(mantissa_bits())));
}

llvm::Value* FloatOps::horner(llvm::Value* x, std::initializer_list<double> coeffs) const {
  const std::vector<double> cs(coeffs);
  llvm::Value* acc = c(cs.back());
  for (size_t i = cs.size() - 1; i-- > 0;) acc = add(c(cs[i]), mul(x, acc));
  return acc;
}

llvm::Value* FloatOps::unary(llvm::Intrinsic::ID id, llvm::Value* x) const {
  return b.CreateUnaryIntrinsic(id, x);
}

}  // namespace ampfuse::codegen
