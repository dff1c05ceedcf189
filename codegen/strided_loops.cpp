// Strided kernels: rows of the innermost dimension, and interchanged slabs for transposes.
#include "codegen/kernel_emitter.h"

#include <fmt/format.h>

namespace ampfuse::codegen::detail {

void KernelEmitter::emit_strided() {
  const int rank = sig_.rank;
  llvm::BasicBlock* split = llvm::BasicBlock::Create(ctx_, "split", fn_);
  llvm::BasicBlock* outer = llvm::BasicBlock::Create(ctx_, "row", fn_);
  llvm::BasicBlock* inner = llvm::BasicBlock::Create(ctx_, "element", fn_);
  llvm::BasicBlock* row_end = llvm::BasicBlock::Create(ctx_, "row.end", fn_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  llvm::BasicBlock* entry = b_.GetInsertBlock();
  b_.CreateCondBr(b_.CreateICmpSLT(begin_, end_), split, exit);

  // The multi-index of `begin`, innermost dimension last. Extents are positive here,
  // since the range is not empty.
  b_.SetInsertPoint(split);
  std::vector<Value*> start(static_cast<size_t>(rank));
  Value* rest = begin_;
  for (int d = rank - 1; d >= 0; --d) {
    Value* q = b_.CreateUDiv(rest, shape_[d]);
    start[d] = b_.CreateSub(rest, b_.CreateMul(q, shape_[d]));
    rest = q;
  }
  b_.CreateBr(outer);

  b_.SetInsertPoint(outer);
  llvm::PHINode* pos = b_.CreatePHI(b_.getInt64Ty(), 2, "pos");
  pos->addIncoming(begin_, split);
  std::vector<llvm::PHINode*> idx;
  for (int d = 0; d < rank; ++d) {
    idx.push_back(b_.CreatePHI(b_.getInt64Ty(), 2, fmt::format("idx{}", d)));
    idx.back()->addIncoming(start[d], split);
  }
  std::vector<llvm::PHINode*> row_acc;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    row_acc.push_back(b_.CreatePHI(b_.getInt1Ty(), 2, "nonfinite.rows"));
    row_acc.back()->addIncoming(b_.getFalse(), split);
  }
  // Each strided operand's offset at the row start; zero strides contribute nothing.
  std::vector<Value*> row_offset(static_cast<size_t>(num_operands()), nullptr);
  for (int k = 0; k < num_operands(); ++k) {
    if (operand(k).layout != Layout::strided) continue;
    Value* off = llvm::ConstantInt::get(index_type_, 0);
    for (int d = 0; d < rank; ++d) {
      if (operand(k).strides[d] == StrideClass::zero) continue;
      off = offset_add(off, offset_mul(to_index(idx[d]), strides_[k][d]));
    }
    row_offset[k] = off;
  }
  Value* row_left = b_.CreateSub(shape_[rank - 1], idx[rank - 1]);
  Value* count = b_.CreateIntrinsic(llvm::Intrinsic::umin, {b_.getInt64Ty()}, {row_left, b_.CreateSub(end_, pos)});
  b_.CreateBr(inner);

  b_.SetInsertPoint(inner);
  llvm::PHINode* j = b_.CreatePHI(b_.getInt64Ty(), 2, "j");
  j->addIncoming(b_.getInt64(0), outer);
  std::vector<llvm::PHINode*> acc;
  std::vector<Value*> acc_values;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    acc.push_back(b_.CreatePHI(b_.getInt1Ty(), 2, "nonfinite"));
    acc.back()->addIncoming(row_acc[f], outer);
    acc_values.push_back(acc.back());
  }
  std::vector<Value*> offsets;
  Value* flat = b_.CreateNSWAdd(pos, j);
  for (int k = 0; k < num_operands(); ++k) {
    switch (operand(k).layout) {
      case Layout::contiguous: offsets.push_back(flat); break;
      case Layout::scalar: offsets.push_back(nullptr); break;
      case Layout::strided: {
        Value* jj = to_index(j);
        Value* step = nullptr;
        switch (operand(k).strides[rank - 1]) {
          case StrideClass::zero: step = nullptr; break;
          case StrideClass::unit: step = jj; break;
          case StrideClass::general: step = offset_mul(jj, strides_[k][rank - 1]); break;
        }
        offsets.push_back(step ? offset_add(row_offset[k], step) : row_offset[k]);
      }
    }
  }
  const std::vector<Value*> flags_out = emit_element(offsets, flat, acc_values);
  Value* j_next = b_.CreateNUWAdd(j, b_.getInt64(1));
  llvm::BasicBlock* inner_latch = b_.GetInsertBlock();
  j->addIncoming(j_next, inner_latch);
  for (size_t f = 0; f < acc.size(); ++f) acc[f]->addIncoming(flags_out[f], inner_latch);
  b_.CreateCondBr(b_.CreateICmpULT(j_next, count), inner, row_end);

  // Next row: advance the innermost index by the row's count and carry outwards.
  b_.SetInsertPoint(row_end);
  std::vector<llvm::PHINode*> row_flags;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    row_flags.push_back(b_.CreatePHI(b_.getInt1Ty(), 1));
    row_flags.back()->addIncoming(flags_out[f], inner_latch);
  }
  Value* pos_next = b_.CreateNSWAdd(pos, count);
  std::vector<Value*> next(idx.begin(), idx.end());
  next[rank - 1] = b_.CreateAdd(idx[rank - 1], count);
  for (int d = rank - 1; d >= 1; --d) {
    Value* wrap = b_.CreateICmpEQ(next[d], shape_[d]);
    next[d] = b_.CreateSelect(wrap, b_.getInt64(0), next[d]);
    next[d - 1] = b_.CreateAdd(next[d - 1], b_.CreateZExt(wrap, b_.getInt64Ty()));
  }
  pos->addIncoming(pos_next, row_end);
  for (int d = 0; d < rank; ++d) idx[d]->addIncoming(next[d], row_end);
  for (size_t f = 0; f < row_acc.size(); ++f) row_acc[f]->addIncoming(row_flags[f], row_end);
  b_.CreateCondBr(b_.CreateICmpSLT(pos_next, end_), outer, exit);

  b_.SetInsertPoint(exit);
  std::vector<Value*> merged;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    llvm::PHINode* phi = b_.CreatePHI(b_.getInt1Ty(), 2);
    phi->addIncoming(b_.getFalse(), entry);
    phi->addIncoming(row_flags[f], row_end);
    merged.push_back(phi);
  }
  store_flags(merged);
}

// A transpose reads (or writes) some operand with a large stride along the innermost
// dimension but unit stride along the one before it. Walking rows touches a new cache line
// of that operand for every element; interchanging the two innermost loops (the second-
// innermost dimension innermost, in blocks of kTileBlock) walks it contiguously instead.
// Measured on the cast + NCHW->NHWC benchmark: 1.7x faster for C = 64, 2x for C = 3.
bool KernelEmitter::wants_tiles() const {
  if (sig_.rank < 2) return false;
  for (int k = 0; k < num_operands(); ++k)
    if (is_transposed(k)) return true;
  return false;
}

// [begin, end) is a whole number of slabs (extent(r-2) * extent(r-1) elements). For each
// slab: for each block of rows, for each column, for each row of the block. Flags are
// accumulated in stack slots, which LLVM promotes back to registers.
KernelEmitter::SlabFlags KernelEmitter::begin_slabs() {
  SlabFlags flags;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    flags.slots.push_back(b_.CreateAlloca(b_.getInt1Ty()));
    b_.CreateStore(b_.getFalse(), flags.slots.back());
  }
  llvm::BasicBlock* work = llvm::BasicBlock::Create(ctx_, "slabs", fn_);
  flags.exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(begin_, end_), work, flags.exit);
  b_.SetInsertPoint(work);
  return flags;
}

void KernelEmitter::slab_element(const SlabFlags& flags, const std::vector<Value*>& offsets, Value* flat_index) {
  std::vector<Value*> acc;
  for (llvm::AllocaInst* a : flags.slots) acc.push_back(b_.CreateLoad(b_.getInt1Ty(), a));
  const std::vector<Value*> updated = emit_element(offsets, flat_index, acc);
  for (size_t f = 0; f < flags.slots.size(); ++f) b_.CreateStore(updated[f], flags.slots[f]);
}

void KernelEmitter::end_slabs(const SlabFlags& flags) {
  b_.CreateBr(flags.exit);
  b_.SetInsertPoint(flags.exit);
  std::vector<Value*> acc;
  for (llvm::AllocaInst* a : flags.slots) acc.push_back(b_.CreateLoad(b_.getInt1Ty(), a));
  store_flags(acc);
}

void KernelEmitter::emit_tiles() {
  const int rank = sig_.rank;
  const SlabFlags flags = begin_slabs();
  Value* rows = shape_[rank - 2];
  Value* cols = shape_[rank - 1];
  Value* slab = b_.CreateMul(rows, cols);
  Value* one = b_.getInt64(1);
  counted_loop("slab", b_.CreateUDiv(begin_, slab), b_.CreateUDiv(end_, slab), one, [&](Value* q) {
    std::vector<std::pair<int, Value*>> outer;
    Value* rest = q;
    for (int d = rank - 3; d >= 0; --d) {
      Value* quotient = b_.CreateUDiv(rest, shape_[d]);
      outer.emplace_back(d, b_.CreateSub(rest, b_.CreateMul(quotient, shape_[d])));
      rest = quotient;
    }
    std::vector<Value*> slab_offset(static_cast<size_t>(num_operands()), nullptr);
    for (int k = 0; k < num_operands(); ++k)
      if (operand(k).layout == Layout::strided)
        slab_offset[k] = strided_offset(k, llvm::ConstantInt::get(index_type_, 0), outer);
    Value* slab_start = b_.CreateMul(q, slab);
    counted_loop("block", b_.getInt64(0), rows, b_.getInt64(kTileBlock), [&](Value* first_row) {
      Value* block_rows = b_.CreateBinaryIntrinsic(llvm::Intrinsic::umin, b_.getInt64(kTileBlock),
                                                   b_.CreateSub(rows, first_row));
      counted_loop("col", b_.getInt64(0), cols, one, [&](Value* col) {
        counted_loop("tile", b_.getInt64(0), block_rows, one, [&](Value* t) {
          Value* row = b_.CreateNUWAdd(first_row, t);
          Value* flat = b_.CreateNUWAdd(slab_start, b_.CreateNUWAdd(b_.CreateNUWMul(row, cols), col));
          std::vector<Value*> offsets;
          for (int k = 0; k < num_operands(); ++k) {
            switch (operand(k).layout) {
              case Layout::contiguous: offsets.push_back(flat); break;
              case Layout::scalar: offsets.push_back(nullptr); break;
              case Layout::strided:
                offsets.push_back(strided_offset(k, slab_offset[k], {{rank - 2, row}, {rank - 1, col}}));
            }
          }
          slab_element(flags, offsets, flat);
        });
      });
    });
  });
  end_slabs(flags);
}

// The exported function of a tiled kernel: rows up to the first slab boundary, whole slabs
// tiled, rows after the last boundary (for staged tiles, boundaries of single rows).
void KernelEmitter::emit_tiled_dispatch(const std::string& symbol, llvm::Function* rows, llvm::Function* tiles) {
  begin_function(symbol, llvm::Function::ExternalLinkage);
  llvm::BasicBlock* work = llvm::BasicBlock::Create(ctx_, "work", fn_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(begin_, end_), work, exit);
  b_.SetInsertPoint(work);
  // The tiles take whole slabs, or whole rows when staged; > 0: the range is not empty.
  Value* slab = stages_tiles() ? shape_[sig_.rank - 1] : b_.CreateMul(shape_[sig_.rank - 2], shape_[sig_.rank - 1]);
  Value* up = b_.CreateMul(b_.CreateUDiv(b_.CreateAdd(begin_, b_.CreateSub(slab, b_.getInt64(1))), slab), slab);
  Value* first = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, up, end_);
  Value* last = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smax, first, b_.CreateMul(b_.CreateUDiv(end_, slab), slab));
  b_.CreateCall(rows, {begin_, first, args_});
  b_.CreateCall(tiles, {first, last, args_});
  b_.CreateCall(rows, {last, end_, args_});
  b_.CreateBr(exit);
  b_.SetInsertPoint(exit);
  b_.CreateRetVoid();
}

}  // namespace ampfuse::codegen::detail
