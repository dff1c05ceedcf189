// An LLVM module with the context that owns it, passed from codegen to the JIT.
//
// Declared without LLVM headers so that code handing modules around (the kernel cache)
// does not pull them in; the files that build or consume modules include LLVM themselves.
#pragma once

#include <memory>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace ampfuse::codegen {

struct LlvmModule {
  LlvmModule();
  LlvmModule(LlvmModule&&) noexcept;
  LlvmModule& operator=(LlvmModule&&) noexcept;
  ~LlvmModule();

  // The context outlives the module: members are destroyed in reverse order.
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  std::string symbol;  // the kernel function's name in the module
};

// The module as LLVM IR text.
std::string ir_text(const LlvmModule& m);

}  // namespace ampfuse::codegen
