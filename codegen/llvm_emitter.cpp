#include "codegen/llvm_emitter.h"

#include "ir/dump.h"
#include "codegen/kernel_emitter.h"
#include "codegen/llvm_target.h"

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdio>

namespace ampfuse::codegen {

namespace {

// After optimization: in streaming loops, vector stores that LLVM proved aligned to their
// full width become non-temporal (x86 has no unaligned non-temporal vector store, and a
// misaligned one faults, so nothing is assumed that LLVM did not prove).
void mark_streaming_stores(llvm::Module& module) {
  const llvm::DataLayout& layout = module.getDataLayout();
  llvm::LLVMContext& ctx = module.getContext();
  llvm::MDNode* one = llvm::MDNode::get(ctx, {llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), 1))});
  for (llvm::Function& f : module) {
    if (!f.hasFnAttribute(detail::kStreamingAttribute)) continue;
    for (llvm::BasicBlock& block : f)
      for (llvm::Instruction& inst : block) {
        auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (!store || !store->getValueOperand()->getType()->isVectorTy()) continue;
        const uint64_t bytes = layout.getTypeStoreSize(store->getValueOperand()->getType());
        if (store->getAlign().value() < bytes) continue;
        // Stack buffers (the staged blocks of codegen/tiled_loops.cpp) are read back at once.
        if (llvm::isa<llvm::AllocaInst>(llvm::getUnderlyingObject(store->getPointerOperand()))) continue;
        store->setMetadata(llvm::LLVMContext::MD_nontemporal, one);
      }
  }
}

}  // namespace

LlvmModule emit_kernel_module(const KernelSignature& sig, const std::string& symbol) {
  LlvmModule m;
  m.context = std::make_unique<llvm::LLVMContext>();
  m.module = std::make_unique<llvm::Module>(symbol, *m.context);
  m.symbol = symbol;
  detail::KernelEmitter(sig, *m.module).emit(symbol);
  return m;
}

LlvmModule build_kernel_module(const KernelSpec& spec, const std::string& symbol) {
  LlvmModule m = emit_kernel_module(signature(spec), symbol);
  optimize_for_target(m);
  mark_streaming_stores(*m.module);
  if (dump_enabled("code"))
    std::fprintf(stderr, "=== kernel %s\n%s=== LLVM IR (optimized)\n%s", symbol.c_str(), print_kernel_spec(spec).c_str(),
                 ir_text(m).c_str());
  if (dump_enabled("asm"))
    std::fprintf(stderr, "=== %s assembly (%s, %d-bit vectors)\n%s", symbol.c_str(), jit_target().cpu.c_str(),
                 target_vector_bits(), target_assembly(m).c_str());
  return m;
}

}  // namespace ampfuse::codegen
