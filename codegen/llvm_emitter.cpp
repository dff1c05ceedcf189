#include "codegen/llvm_emitter.h"

#include "codegen/body_lowering.h"
#include "codegen/dtype_lowering.h"
#include "codegen/dump.h"
#include "codegen/float_ops.h"
#include "codegen/llvm_target.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Module.h>

#include <cstdio>

namespace ampfuse::codegen {

namespace {

using llvm::Value;

// Field numbers of KernelArgs (codegen/kernel_abi.h).
enum ArgField : unsigned { kData, kShape, kStrides, kParams, kFlags, kStreaming };

// Streaming loops start on 64-element boundaries of 64-byte aligned outputs: an aligned
// 64-byte line for every dtype, so every full-width vector store is aligned.
constexpr int64_t kStreamAlignElements = 64;
constexpr unsigned kStreamAlignBytes = 64;
constexpr const char* kStreamingAttribute = "ampfuse-streaming";

// After optimization: in streaming loops, vector stores that LLVM proved aligned to their
// full width become non-temporal (x86 has no unaligned non-temporal vector store, and a
// misaligned one faults, so nothing is assumed that LLVM did not prove).
void mark_streaming_stores(llvm::Module& module) {
  const llvm::DataLayout& layout = module.getDataLayout();
  for (llvm::Function& f : module) {
    if (!f.hasFnAttribute(kStreamingAttribute)) continue;
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& inst : block) {
        auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (!store || !store->getValueOperand()->getType()->isVectorTy()) continue;
        const uint64_t bytes = layout.getTypeStoreSize(store->getValueOperand()->getType());
        if (store->getAlign().value() < bytes) continue;
        store->setMetadata(llvm::LLVMContext::MD_nontemporal,
                           llvm::MDNode::get(module.getContext(),
                                             {llvm::ConstantAsMetadata::get(
                                                 llvm::ConstantInt::get(llvm::Type::getInt32Ty(module.getContext()), 1))}));
      }
  }
}

class KernelEmitter {
 public:
  KernelEmitter(const KernelSignature& sig, llvm::Module& module);
  void emit(const std::string& symbol);

 private:
  int num_inputs() const { return static_cast<int>(sig_.inputs.size()); }
  int num_operands() const { return num_inputs() + static_cast<int>(sig_.outputs.size()); }
  const OperandSignature& operand(int k) const {
    return k < num_inputs() ? sig_.inputs[k] : sig_.outputs[k - num_inputs()];
  }

  // Starts a kernel-signature function: its entry block loads the arguments.
  llvm::Function* begin_function(const std::string& name, llvm::GlobalValue::LinkageTypes linkage);
  void load_arguments();
  void make_alias_scopes();
  void emit_flat_loop(bool streaming);
  void emit_flat_dispatch(const std::string& symbol, llvm::Function* loop, llvm::Function* stream);
  void emit_strided();
  // One element: loads at `offsets` (nullptr: element 0), the body, the stores, and the
  // flag accumulators updated from `flags_in`.
  std::vector<Value*> emit_element(const std::vector<Value*>& offsets, const std::vector<Value*>& flags_in);
  void store_flags(const std::vector<Value*>& accumulators);
  Value* field(ArgField f);

  const KernelSignature& sig_;
  llvm::LLVMContext& ctx_;
  llvm::Module& module_;
  llvm::IRBuilder<> b_;
  llvm::Type* compute_;
  llvm::Type* index_type_;  // i32 or i64, for strided offsets
  llvm::StructType* args_type_;
  llvm::FunctionType* fn_type_;
  llvm::Function* fn_ = nullptr;
  Value* begin_ = nullptr;
  Value* end_ = nullptr;
  Value* args_ = nullptr;
  std::vector<Value*> base_;                  // per operand
  std::vector<Value*> params_;                // in the compute type
  std::vector<Value*> shape_;                 // i64 extents (strided kernels)
  std::vector<std::vector<Value*>> strides_;  // per operand and dimension, index_type_
  std::vector<llvm::MDNode*> scope_, noalias_;
};

KernelEmitter::KernelEmitter(const KernelSignature& sig, llvm::Module& module)
    : sig_(sig),
      ctx_(module.getContext()),
      module_(module),
      b_(module.getContext()),
      compute_(sig.compute == ir::DType::f64 ? b_.getDoubleTy() : b_.getFloatTy()),
      index_type_(sig.wide_index ? b_.getInt64Ty() : b_.getInt32Ty()) {
  llvm::Type* ptr = b_.getPtrTy();
  args_type_ = llvm::StructType::create(ctx_, {ptr, ptr, ptr, ptr, ptr, b_.getInt64Ty()}, "KernelArgs");
  fn_type_ = llvm::FunctionType::get(b_.getVoidTy(), {b_.getInt64Ty(), b_.getInt64Ty(), ptr}, false);
}

llvm::Function* KernelEmitter::begin_function(const std::string& name, llvm::GlobalValue::LinkageTypes linkage) {
  fn_ = llvm::Function::Create(fn_type_, linkage, name, module_);
  fn_->addFnAttr(llvm::Attribute::NoUnwind);
  fn_->addParamAttr(2, llvm::Attribute::NoAlias);
  fn_->addParamAttr(2, llvm::Attribute::NoCapture);
  fn_->addParamAttr(2, llvm::Attribute::ReadOnly);
  begin_ = fn_->getArg(0);
  end_ = fn_->getArg(1);
  args_ = fn_->getArg(2);
  begin_->setName("begin");
  end_->setName("end");
  args_->setName("args");
  b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", fn_));
  base_.clear();
  params_.clear();
  shape_.clear();
  strides_.clear();
  scope_.clear();
  noalias_.clear();
  load_arguments();
  make_alias_scopes();
  return fn_;
}

Value* KernelEmitter::field(ArgField f) {
  Value* ptr = b_.CreateStructGEP(args_type_, args_, f);
  return b_.CreateLoad(args_type_->getElementType(f), ptr);
}

void KernelEmitter::load_arguments() {
  Value* data = field(kData);
  for (int k = 0; k < num_operands(); ++k) {
    Value* slot = b_.CreateConstInBoundsGEP1_64(b_.getPtrTy(), data, static_cast<uint64_t>(k));
    base_.push_back(b_.CreateLoad(b_.getPtrTy(), slot, fmt::format("operand{}", k)));
  }
  if (sig_.num_params > 0) {
    Value* params = field(kParams);
    for (int j = 0; j < sig_.num_params; ++j) {
      Value* slot = b_.CreateConstInBoundsGEP1_64(b_.getDoubleTy(), params, static_cast<uint64_t>(j));
      Value* v = b_.CreateLoad(b_.getDoubleTy(), slot);
      params_.push_back(compute_->isDoubleTy() ? v : b_.CreateFPTrunc(v, compute_));
    }
  }
  if (sig_.flat()) return;
  Value* shape = field(kShape);
  Value* strides = field(kStrides);
  for (int d = 0; d < sig_.rank; ++d)
    shape_.push_back(b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), shape, d)));
  strides_.resize(static_cast<size_t>(num_operands()));
  for (int k = 0; k < num_operands(); ++k) {
    const OperandSignature& o = operand(k);
    if (o.layout != Layout::strided) continue;
    for (int d = 0; d < sig_.rank; ++d) {
      Value* s = nullptr;
      switch (o.strides[d]) {
        case StrideClass::zero: s = llvm::ConstantInt::get(index_type_, 0); break;
        case StrideClass::unit: s = llvm::ConstantInt::get(index_type_, 1); break;
        case StrideClass::general: {
          const uint64_t at = static_cast<uint64_t>(k) * sig_.rank + d;
          Value* v = b_.CreateLoad(b_.getInt64Ty(), b_.CreateConstInBoundsGEP1_64(b_.getInt64Ty(), strides, at));
          s = b_.CreateTrunc(v, index_type_);
        }
      }
      strides_[k].push_back(s);
    }
  }
}

void KernelEmitter::make_alias_scopes() {
  llvm::MDBuilder md(ctx_);
  llvm::MDNode* domain = md.createAnonymousAliasScopeDomain("ampfuse.operands");
  std::vector<llvm::Metadata*> scopes;
  for (int k = 0; k < num_operands(); ++k) scopes.push_back(md.createAnonymousAliasScope(domain));
  for (int k = 0; k < num_operands(); ++k) {
    scope_.push_back(llvm::MDNode::get(ctx_, {scopes[k]}));
    std::vector<llvm::Metadata*> others;
    for (int j = 0; j < num_operands(); ++j)
      if (j != k) others.push_back(scopes[j]);
    noalias_.push_back(llvm::MDNode::get(ctx_, others));
  }
}

std::vector<Value*> KernelEmitter::emit_element(const std::vector<Value*>& offsets,
                                                const std::vector<Value*>& flags_in) {
  auto address = [&](int k) {
    llvm::Type* elem = storage_type(ctx_, operand(k).dtype);
    return offsets[k] ? b_.CreateInBoundsGEP(elem, base_[k], offsets[k]) : base_[k];
  };
  auto tag = [&](llvm::Instruction* inst, int k) {
    inst->setMetadata(llvm::LLVMContext::MD_alias_scope, scope_[k]);
    inst->setMetadata(llvm::LLVMContext::MD_noalias, noalias_[k]);
  };
  std::vector<bool> needed(static_cast<size_t>(num_inputs()), false);
  for (const ir::ScalarInstr& s : sig_.body.instrs)
    if (s.op == ir::ScalarOp::input && s.index < num_inputs()) needed[s.index] = true;
  for (const std::vector<int>& f : sig_.flags)
    for (int k : f)
      if (k < num_inputs()) needed[k] = true;

  std::vector<Value*> program_inputs;
  for (int k = 0; k < num_inputs(); ++k) {
    Value* v = nullptr;
    if (needed[k]) {
      llvm::LoadInst* raw = b_.CreateLoad(storage_type(ctx_, operand(k).dtype), address(k));
      tag(raw, k);
      v = widen_to_compute(b_, raw, operand(k).dtype, compute_);
    } else {
      v = llvm::UndefValue::get(compute_);  // never read by the body
    }
    program_inputs.push_back(v);
  }
  for (Value* p : params_) program_inputs.push_back(p);
  const std::vector<Value*> results = lower_scalar_program(b_, sig_.body, program_inputs, compute_);

  std::vector<Value*> stored_as_compute(results.size());
  for (size_t o = 0; o < results.size(); ++o) {
    const int k = num_inputs() + static_cast<int>(o);
    const ir::DType dtype = operand(k).dtype;
    Value* raw = narrow_from_compute(b_, results[o], dtype);
    llvm::StoreInst* store = b_.CreateStore(raw, address(k));
    tag(store, k);
    if (!sig_.flags.empty() && ir::is_float(dtype)) stored_as_compute[o] = widen_to_compute(b_, raw, dtype, compute_);
  }

  std::vector<Value*> flags_out;
  FloatOps f(b_, compute_);
  for (size_t i = 0; i < sig_.flags.size(); ++i) {
    Value* acc = flags_in[i];
    for (int k : sig_.flags[i]) {
      if (!ir::is_float(operand(k).dtype)) continue;  // integers are always finite
      Value* v = k < num_inputs() ? program_inputs[k] : stored_as_compute[k - num_inputs()];
      acc = b_.CreateOr(acc, b_.CreateFCmpUEQ(f.fabs(v), f.c(kInf)));  // NaN or +-Inf
    }
    flags_out.push_back(acc);
  }
  return flags_out;
}

// A whole function: for i in [begin, end) one element, then the flags. The streaming copy
// may assume what the dispatcher guarantees, that `begin` and every output base are
// 64-byte aligned, so that LLVM can prove its vector stores aligned
// (mark_streaming_stores below turns exactly those into non-temporal stores).
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
  const std::vector<Value*> flags_out = emit_element(offsets, acc_values);
  Value* next = b_.CreateNSWAdd(i, b_.getInt64(1));
  llvm::BasicBlock* latch = b_.GetInsertBlock();
  i->addIncoming(next, latch);
  for (size_t f = 0; f < acc.size(); ++f) acc[f]->addIncoming(flags_out[f], latch);
  b_.CreateCondBr(b_.CreateICmpSLT(next, end_), loop, exit);

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
      off = b_.CreateAdd(off, b_.CreateMul(b_.CreateTrunc(idx[d], index_type_), strides_[k][d]));
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
        Value* jj = b_.CreateTrunc(j, index_type_);
        Value* step = nullptr;
        switch (operand(k).strides[rank - 1]) {
          case StrideClass::zero: step = nullptr; break;
          case StrideClass::unit: step = jj; break;
          case StrideClass::general: step = b_.CreateMul(jj, strides_[k][rank - 1]); break;
        }
        offsets.push_back(step ? b_.CreateAdd(row_offset[k], step) : row_offset[k]);
      }
    }
  }
  const std::vector<Value*> flags_out = emit_element(offsets, acc_values);
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

// One relaxed atomic store per flag and call, outside every loop: threads racing to set
// the same flag all write 1.
void KernelEmitter::store_flags(const std::vector<Value*>& accumulators) {
  if (accumulators.empty()) {
    b_.CreateRetVoid();
    return;
  }
  Value* flags = field(kFlags);
  for (size_t f = 0; f < accumulators.size(); ++f) {
    llvm::BasicBlock* set = llvm::BasicBlock::Create(ctx_, "flag.set", fn_);
    llvm::BasicBlock* next = llvm::BasicBlock::Create(ctx_, "flag.next", fn_);
    b_.CreateCondBr(accumulators[f], set, next);
    b_.SetInsertPoint(set);
    Value* slot = b_.CreateConstInBoundsGEP1_64(b_.getInt32Ty(), flags, f);
    llvm::StoreInst* store = b_.CreateStore(b_.getInt32(1), slot);
    store->setAtomic(llvm::AtomicOrdering::Monotonic);
    store->setAlignment(llvm::Align(4));
    b_.CreateBr(next);
    b_.SetInsertPoint(next);
  }
  b_.CreateRetVoid();
}

void KernelEmitter::emit(const std::string& symbol) {
  if (!sig_.flat()) {
    begin_function(symbol, llvm::Function::ExternalLinkage);
    emit_strided();
    return;
  }
  llvm::Function* loop = begin_function(symbol + ".loop", llvm::Function::InternalLinkage);
  loop->addFnAttr(llvm::Attribute::AlwaysInline);
  emit_flat_loop(false);
  llvm::Function* stream = nullptr;
  if (!sig_.outputs.empty()) {
    stream = begin_function(symbol + ".stream", llvm::Function::InternalLinkage);
    stream->addFnAttr(llvm::Attribute::NoInline);
    stream->addFnAttr(kStreamingAttribute);
    emit_flat_loop(true);
  }
  emit_flat_dispatch(symbol, loop, stream);
}

}  // namespace

LlvmModule emit_kernel_module(const KernelSignature& sig, const std::string& symbol) {
  LlvmModule m;
  m.context = std::make_unique<llvm::LLVMContext>();
  m.module = std::make_unique<llvm::Module>(symbol, *m.context);
  m.symbol = symbol;
  KernelEmitter(sig, *m.module).emit(symbol);
  return m;
}

LlvmModule build_kernel_module(const KernelSpec& spec, const std::string& symbol) {
  LlvmModule m = emit_kernel_module(signature(spec), symbol);
  optimize_for_host(m);
  mark_streaming_stores(*m.module);
  if (dump_requested("code"))
    std::fprintf(stderr, "=== kernel %s\n%s=== LLVM IR (optimized)\n%s", symbol.c_str(), print_kernel_spec(spec).c_str(),
                 ir_text(m).c_str());
  if (dump_requested("asm"))
    std::fprintf(stderr, "=== %s assembly (%s)\n%s", symbol.c_str(), host_target().cpu.c_str(),
                 host_assembly(m).c_str());
  return m;
}

}  // namespace ampfuse::codegen
