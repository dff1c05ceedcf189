// Loads and stores of every dtype in LLVM IR: how each is stored and how it converts to and
// from the compute type, bit for bit as ir/lowp.h and Tensor::get_f64/set_f64 define it.
//
//   f16  <-> f32: LLVM `half` fpext/fptrunc, which the host's F16C instructions implement
//                 exactly (round to nearest even, subnormals kept);
//   bf16 <-> f32: integer round to nearest even on the f32 bits (ir/lowp.h), because LLVM's
//                 own bfloat conversions either fail to select or call a libgcc routine that
//                 libgcc 12 lacks, and AVX512-BF16's converter flushes subnormals;
//   f64  ->  f16/bf16: round to odd into f32 first, so that the second rounding is exact;
//   float -> integer: truncate, saturate, NaN -> 0 (llvm.fptosi.sat); bool: x != 0, so NaN -> 1,
//                 as the reference evaluator (runtime/scalar_eval.cpp) stores it.
#pragma once

#include "ir/dtype.h"

#include <llvm/IR/IRBuilder.h>

namespace ampfuse::codegen {

llvm::Type* storage_type(llvm::LLVMContext& ctx, ir::DType t);

// The stored value as the compute type (float or double).
llvm::Value* widen_to_compute(llvm::IRBuilder<>& b, llvm::Value* stored, ir::DType from, llvm::Type* compute);

// A compute-type value rounded to `to`, as its stored representation.
llvm::Value* narrow_from_compute(llvm::IRBuilder<>& b, llvm::Value* v, ir::DType to);

// round_to: narrow, then widen back to v's type.
llvm::Value* round_in_compute(llvm::IRBuilder<>& b, llvm::Value* v, ir::DType to);

}  // namespace ampfuse::codegen
