// KernelEmitter: function setup, argument loads, alias scopes, one element and the flags.
#include "codegen/kernel_emitter.h"

#include "codegen/body_lowering.h"
#include "codegen/dtype_lowering.h"
#include "codegen/float_ops.h"
#include "codegen/llvm_target.h"
#include "codegen/vector_math.h"

#include <fmt/format.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/MDBuilder.h>

namespace ampfuse::codegen::detail {

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
          s = to_index(v);
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

std::vector<Value*> KernelEmitter::emit_element(const std::vector<Value*>& offsets, Value* flat_index,
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
  const std::vector<Value*> results = lower_scalar_program(b_, sig_.body, program_inputs, flat_index, compute_);

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

void KernelEmitter::counted_loop(const char* name, Value* from, Value* to, Value* step,
                                 const std::function<void(Value*)>& body, unsigned vector_width, bool fold_tail) {
  llvm::BasicBlock* pre = b_.GetInsertBlock();
  llvm::BasicBlock* header = llvm::BasicBlock::Create(ctx_, name, fn_);
  llvm::BasicBlock* after = llvm::BasicBlock::Create(ctx_, std::string(name) + ".end", fn_);
  b_.CreateBr(header);
  b_.SetInsertPoint(header);
  llvm::PHINode* iv = b_.CreatePHI(b_.getInt64Ty(), 2, name);
  iv->addIncoming(from, pre);
  body(iv);
  Value* next = b_.CreateNUWAdd(iv, step);
  iv->addIncoming(next, b_.GetInsertBlock());
  hint_loop(b_.CreateCondBr(b_.CreateICmpULT(next, to), header, after), vector_width, fold_tail);
  b_.SetInsertPoint(after);
}

void KernelEmitter::hint_loop(llvm::BranchInst* latch, unsigned vector_width, bool fold_tail) {
  if (vector_width == 0 && !fold_tail) return;
  // A width alone, not vectorize.enable: a body LLVM cannot vectorize (a library call)
  // then stays scalar without a "loop not vectorized" warning on stderr.
  auto hint = [&](const char* name, int value) -> llvm::Metadata* {
    return llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, name), llvm::ConstantAsMetadata::get(b_.getInt32(value))});
  };
  llvm::TempMDTuple self = llvm::MDNode::getTemporary(ctx_, {});
  std::vector<llvm::Metadata*> ops = {self.get()};
  if (vector_width > 0) ops.push_back(hint("llvm.loop.vectorize.width", static_cast<int>(vector_width)));
  if (fold_tail) {
    ops.push_back(hint("llvm.loop.vectorize.predicate.enable", 1));
    ops.push_back(hint("llvm.loop.interleave.count", 1));
  }
  if (vector_width == kScalarLoop) {
    ops.push_back(hint("llvm.loop.interleave.count", 1));
    ops.push_back(llvm::MDNode::get(ctx_, {llvm::MDString::get(ctx_, "llvm.loop.unroll.disable")}));
  }
  llvm::MDNode* id = llvm::MDNode::getDistinct(ctx_, ops);
  id->replaceOperandWith(0, id);
  latch->setMetadata(llvm::LLVMContext::MD_loop, id);
}

unsigned KernelEmitter::streaming_width() const {
  for (const ir::ScalarInstr& instr : sig_.body.instrs)
    if (calls_c_library(instr.op, sig_.compute)) return 0;
  for (const OperandSignature& o : sig_.outputs)
    if (ir::dtype_size(o.dtype) == 2) return static_cast<unsigned>(target_register_bits() / 16);
  return 0;
}

Value* KernelEmitter::strided_offset(int k, Value* base, const std::vector<std::pair<int, Value*>>& dims) {
  Value* off = base;
  for (const auto& [d, index] : dims) {
    switch (operand(k).strides[d]) {
      case StrideClass::zero: break;
      case StrideClass::unit: off = offset_add(off, to_index(index)); break;
      case StrideClass::general: off = offset_add(off, offset_mul(to_index(index), strides_[k][d])); break;
    }
  }
  return off;
}

void KernelEmitter::emit(const std::string& symbol) {
  if (sig_.row) {
    begin_function(symbol, llvm::Function::ExternalLinkage);
    // Row kernels are bound by their exponentials, not by memory: full-width vectors where
    // the CPU has them (LLVM's tuning for AVX-512 CPUs otherwise stops at 256 bits; on AVX2
    // the widest is 256 whatever this says).
    fn_->addFnAttr("prefer-vector-width", "512");
    emit_rows();
    return;
  }
  if (!sig_.flat() && !wants_tiles()) {
    begin_function(symbol, llvm::Function::ExternalLinkage);
    emit_strided();
    return;
  }
  if (!sig_.flat()) {
    llvm::Function* rows = begin_function(symbol + ".rows", llvm::Function::InternalLinkage);
    rows->addFnAttr(llvm::Attribute::NoInline);  // called twice: compiled once
    emit_strided();
    llvm::Function* tiles = begin_function(symbol + ".tiles", llvm::Function::InternalLinkage);
    if (stages_tiles()) {
      if (sig_.streams) tiles->addFnAttr(kStreamingAttribute);  // only its aligned output loops' stores
      tiles->addFnAttr(llvm::Attribute::NoInline);  // keeps the attribute to itself
      emit_staged_tiles();
    }
    else
      emit_tiles();
    emit_tiled_dispatch(symbol, rows, tiles);
    return;
  }
  llvm::Function* loop = begin_function(symbol + ".loop", llvm::Function::InternalLinkage);
  // Called twice when streaming (up to the first aligned element, and alone): compiled
  // once, not twice, which took a fifth of the fuzzer's time.
  loop->addFnAttr(llvm::Attribute::NoInline);
  emit_flat_loop(false);
  llvm::Function* stream = nullptr;
  if (sig_.streams) {
    stream = begin_function(symbol + ".stream", llvm::Function::InternalLinkage);
    stream->addFnAttr(llvm::Attribute::NoInline);
    stream->addFnAttr(kStreamingAttribute);
    emit_flat_loop(true);
  }
  emit_flat_dispatch(symbol, loop, stream);
}

}  // namespace ampfuse::codegen::detail
