#include "runtime/jit.h"

#include "codegen/llvm_target.h"
#include "ir/error.h"
#include "ir/special_functions.h"
#include "runtime/fault_injection.h"

#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <mutex>

namespace ampfuse::runtime {

namespace {

std::string message(llvm::Error e) { return llvm::toString(std::move(e)); }

template <class T>
T take(llvm::Expected<T> value, const char* what) {
  if (!value) fail("LLVM JIT: {}: {}", what, message(value.takeError()));
  return std::move(*value);
}

}  // namespace

struct Jit::Impl {
  std::mutex mutex;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  int64_t modules = 0;
};

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  const codegen::JitTarget& target = codegen::jit_target();  // initializes LLVM's native target
  llvm::orc::JITTargetMachineBuilder machine{llvm::Triple(target.triple)};
  machine.setCPU(target.cpu);
  llvm::SubtargetFeatures features(target.features);
  machine.addFeatures(features.getFeatures());
  machine.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  machine.getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;

  impl_->jit = take(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(machine)).create(), "create");
  const char prefix = impl_->jit->getDataLayout().getGlobalPrefix();
  auto process = take(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols");
  impl_->jit->getMainJITDylib().addGenerator(std::move(process));
  // The kernel helpers (ir/special_functions.h) live in this executable, whose symbols the
  // process search above need not see: bind them by address.
  llvm::orc::SymbolMap helpers;
  for (const ir::KernelHelperSymbol& s : ir::kernel_helper_symbols())
    helpers[impl_->jit->mangleAndIntern(s.name)] = {llvm::orc::ExecutorAddr::fromPtr(s.address),
                                                    llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  if (llvm::Error e = impl_->jit->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(helpers))))
    fail("LLVM JIT: defining kernel helper symbols: {}", message(std::move(e)));
}

Jit::~Jit() = default;

Jit& Jit::global() {
  // Never destroyed: kernels may still run from other static destructors at exit.
  static Jit* jit = new Jit();
  return *jit;
}

void* Jit::compile(codegen::LlvmModule module) {
  std::lock_guard lock(impl_->mutex);
  const std::string symbol = module.symbol;
  if (fault_strikes(Fault::compile))
    fail("LLVM JIT: adding module '{}': compilation failed {}", symbol, injected_fault_note());
  llvm::orc::ThreadSafeModule tsm(std::move(module.module), std::move(module.context));
  if (llvm::Error e = impl_->jit->addIRModule(std::move(tsm)))
    fail("LLVM JIT: adding module '{}': {}", symbol, message(std::move(e)));
  const llvm::orc::ExecutorAddr address = take(impl_->jit->lookup(symbol), "lookup");
  ++impl_->modules;
  return address.toPtr<void*>();
}

int64_t Jit::modules() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->modules;
}

}  // namespace ampfuse::runtime
