// Flat kernels (every operand contiguous or scalar): the plain loop and the streaming copy.
#include "codegen/kernel_emitter.h"

namespace ampfuse::codegen::detail {

// A whole function: for i in [begin, end) one element, then the flags. The streaming copy
// may assume what the dispatcher guarantees, that `begin` and every output base are
// 64-byte aligned, so that LLVM can prove its vector stores aligned
// (mark_streaming_stores in llvm_emitter.cpp turns exactly those into non-temporal stores).
void KernelEmitter::emit_flat_loop(bool streaming) {
  if (streaming) {
    b_.CreateAssumption(b_.CreateICmpEQ(b_.CreateAnd(begin_, b_.getInt64(kStreamAlignElements - 1)), b_.getInt64(0)));
    for (int k = num_inputs(); k < num_operands(); ++k)
      b_.CreateAlignmentAssumption(module_.getDataLayout(), base_[k], kStreamAlignBytes);
  }
  llvm::BasicBlock* entry = b_.GetInsertBlock();
  llvm::BasicBlock* loop = llvm::BasicBlock::Create(ctx_, "loop", fn_);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx_, "exit", fn_);
  b_.CreateCondBr(b_.CreateICmpSLT(begin_, end_), loop, exit);

  b_.SetInsertPoint(loop);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2, "i");
  i->addIncoming(begin_, entry);
  std::vector<llvm::PHINode*> acc;
  std::vector<Value*> acc_values;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    acc.push_back(b_.CreatePHI(b_.getInt1Ty(), 2, "nonfinite"));
    acc.back()->addIncoming(b_.getFalse(), entry);
    acc_values.push_back(acc.back());
  }
  std::vector<Value*> offsets;
  for (int k = 0; k < num_operands(); ++k) offsets.push_back(operand(k).layout == Layout::scalar ? nullptr : i);
  const std::vector<Value*> flags_out = emit_element(offsets, i, acc_values);
  Value* next = b_.CreateNSWAdd(i, b_.getInt64(1));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  i->addIncoming(next, latch);
  for (size_t f = 0; f < acc.size(); ++f) acc[f]->addIncoming(flags_out[f], latch);
  llvm::BranchInst* back = b_.CreateCondBr(b_.CreateICmpSLT(next, end_), loop, exit);
  if (streaming) hint_loop(back, streaming_width(), false);

  b_.SetInsertPoint(exit);
  std::vector<Value*> merged;
  for (size_t f = 0; f < sig_.flags.size(); ++f) {
    llvm::PHINode* phi = b_.CreatePHI(b_.getInt1Ty(), 2);
    phi->addIncoming(b_.getFalse(), entry);
    phi->addIncoming(flags_out[f], latch);
    merged.push_back(phi);
  }
  store_flags(merged);
}

// The exported function of a flat kernel: the plain loop, or with args->streaming the plain
// loop up to the first 64-element boundary and the streaming loop from there.
void KernelEmitter::emit_flat_dispatch(const std::string& symbol, llvm::Function* loop, llvm::Function* stream) {
  begin_function(symbol, llvm::Function::ExternalLinkage);
  if (!stream) {
    b_.CreateCall(loop, {begin_, end_, args_});
    b_.CreateRetVoid();
    return;
  }
  llvm::BasicBlock* regular = llvm::BasicBlock::Create(ctx_, "regular", fn_);
  llvm::BasicBlock* streaming = llvm::BasicBlock::Create(ctx_, "streaming", fn_);
  b_.CreateCondBr(b_.CreateICmpNE(field(kStreaming), b_.getInt64(0)), streaming, regular);
  b_.SetInsertPoint(regular);
  b_.CreateCall(loop, {begin_, end_, args_});
  b_.CreateRetVoid();
  b_.SetInsertPoint(streaming);
  Value* aligned = b_.CreateAnd(b_.CreateAdd(begin_, b_.getInt64(kStreamAlignElements - 1)),
                                b_.getInt64(-kStreamAlignElements));
  Value* split = b_.CreateBinaryIntrinsic(llvm::Intrinsic::smin, aligned, end_);
  b_.CreateCall(loop, {begin_, split, args_});
  b_.CreateCall(stream, {split, end_, args_});
  b_.CreateRetVoid();
}

}  // namespace ampfuse::codegen::detail
