#include "codegen/dtype_lowering.h"

#include "codegen/float_ops.h"
#include "ir/int_conversion.h"

namespace ampfuse::codegen {

namespace {

using ir::DType;

llvm::Value* bf16_to_f32(llvm::IRBuilder<>& b, llvm::Value* bits16) {
  llvm::Value* wide = b.CreateShl(b.CreateZExt(bits16, b.getInt32Ty()), 16);
  return b.CreateBitCast(wide, b.getFloatTy());
}

// ir/lowp.h f32_to_bf16_bits: add 0x7FFF plus the lowest kept bit, drop 16 bits; NaN is
// quieted instead, so that the carry cannot turn it into Inf. NaN by a float compare (one
// instruction; the integer test |bits| > 0x7F800000 took three with AVX2).
llvm::Value* f32_to_bf16(llvm::IRBuilder<>& b, llvm::Value* x) {
  FloatOps f(b, b.getFloatTy());
  llvm::Value* u = f.bits(x);
  llvm::Value* is_nan = f.is_nan(x);
  llvm::Value* lowest_kept = b.CreateAnd(b.CreateLShr(u, 16), f.ci(1));
  llvm::Value* rounded = b.CreateLShr(b.CreateAdd(u, b.CreateAdd(f.ci(0x7FFF), lowest_kept)), 16);
  llvm::Value* quiet_nan = b.CreateOr(b.CreateLShr(u, 16), f.ci(0x40));
  return b.CreateTrunc(b.CreateSelect(is_nan, quiet_nan, rounded), b.getInt16Ty());
}

// ir/lowp.h f64_to_f32_round_to_odd: truncate toward zero, then set the lowest bit when
// inexact. fptrunc rounds to nearest, so step back one ulp when it rounded away from zero.
llvm::Value* f64_to_f32_round_to_odd(llvm::IRBuilder<>& b, llvm::Value* d) {
  FloatOps fd(b, b.getDoubleTy());
  FloatOps f(b, b.getFloatTy());
  llvm::Value* rounded = b.CreateFPTrunc(d, b.getFloatTy());
  llvm::Value* back = b.CreateFPExt(rounded, b.getDoubleTy());
  llvm::Value* inexact = b.CreateFCmpONE(back, d);
  llvm::Value* away = fd.gt(fd.fabs(back), fd.fabs(d));
  llvm::Value* u = f.bits(rounded);
  llvm::Value* toward_zero = b.CreateSelect(away, b.CreateSub(u, f.ci(1)), u);
  return f.from_bits(b.CreateSelect(inexact, b.CreateOr(toward_zero, f.ci(1)), u));
}

llvm::Value* to_f32_for_lowp(llvm::IRBuilder<>& b, llvm::Value* v) {
  return v->getType()->isDoubleTy() ? f64_to_f32_round_to_odd(b, v) : v;
}

// ir/int_conversion.h's rule (NaN -> 0, truncate, saturate) is llvm.fpto[su]i.sat's
// definition, at the width and signedness ir gives the type.
llvm::Value* float_to_int(llvm::IRBuilder<>& b, llvm::Value* v, DType to) {
  const ir::IntegerRange range = ir::integer_range(to);
  const auto id = range.is_signed ? llvm::Intrinsic::fptosi_sat : llvm::Intrinsic::fptoui_sat;
  return b.CreateIntrinsic(id, {b.getIntNTy(range.bits), v->getType()}, {v});
}

}  // namespace

llvm::Type* storage_type(llvm::LLVMContext& ctx, DType t) {
  switch (t) {
    case DType::f32: return llvm::Type::getFloatTy(ctx);
    case DType::f64: return llvm::Type::getDoubleTy(ctx);
    case DType::f16:
    case DType::bf16: return llvm::Type::getInt16Ty(ctx);
    case DType::i8:
    case DType::u8:
    case DType::boolean: return llvm::Type::getInt8Ty(ctx);
    case DType::i32: return llvm::Type::getInt32Ty(ctx);
    case DType::i64: return llvm::Type::getInt64Ty(ctx);
  }
  return nullptr;
}

llvm::Value* widen_to_compute(llvm::IRBuilder<>& b, llvm::Value* stored, DType from, llvm::Type* compute) {
  auto fp_to_compute = [&](llvm::Value* v) {
    if (v->getType() == compute) return v;
    return compute->isDoubleTy() ? b.CreateFPExt(v, compute) : b.CreateFPTrunc(v, compute);
  };
  switch (from) {
    case DType::f32:
    case DType::f64: return fp_to_compute(stored);
    case DType::f16: return fp_to_compute(b.CreateFPExt(b.CreateBitCast(stored, b.getHalfTy()), b.getFloatTy()));
    case DType::bf16: return fp_to_compute(bf16_to_f32(b, stored));
    case DType::i8:
    case DType::i32: return b.CreateSIToFP(stored, compute);
    // Tensor::get_f64 reads an i64 as a double; an f32 compute type rounds that double
    // again, which a direct i64 -> f32 conversion would not reproduce.
    case DType::i64: return fp_to_compute(b.CreateSIToFP(stored, b.getDoubleTy()));
    case DType::u8: return b.CreateUIToFP(stored, compute);
    case DType::boolean: return b.CreateUIToFP(b.CreateICmpNE(stored, b.getInt8(0)), compute);
  }
  return nullptr;
}

llvm::Value* narrow_from_compute(llvm::IRBuilder<>& b, llvm::Value* v, DType to) {
  switch (to) {
    case DType::f32: return v->getType()->isFloatTy() ? v : b.CreateFPTrunc(v, b.getFloatTy());
    case DType::f64: return v->getType()->isDoubleTy() ? v : b.CreateFPExt(v, b.getDoubleTy());
    case DType::f16:
      return b.CreateBitCast(b.CreateFPTrunc(to_f32_for_lowp(b, v), b.getHalfTy()), b.getInt16Ty());
    case DType::bf16: return f32_to_bf16(b, to_f32_for_lowp(b, v));
    case DType::i8:
    case DType::u8:
    case DType::i32:
    case DType::i64: return float_to_int(b, v, to);
    case DType::boolean:
      return b.CreateZExt(b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0)), b.getInt8Ty());
  }
  return nullptr;
}

llvm::Value* round_in_compute(llvm::IRBuilder<>& b, llvm::Value* v, DType to) {
  return widen_to_compute(b, narrow_from_compute(b, v, to), to, v->getType());
}

}  // namespace ampfuse::codegen
