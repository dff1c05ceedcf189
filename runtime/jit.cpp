#include "runtime/jit.h"

#include "codegen/llvm_target.h"
#include "ir/error.h"
#include "ir/special_functions.h"
#include "runtime/fault_injection.h"
#include "runtime/disk_cache.h"
#include "runtime/memory_maps.h"

#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/SymbolStringPool.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/Error.h>
#include <llvm/TargetParser/SubtargetFeature.h>

#include <ampfuse/version.h>

#include <mutex>
#include <vector>

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
  // The JIT's own IR compiler (owned by its compile layer): emit_object uses it, so that
  // objects get exactly the target machine LLJIT configured (relocation and code model
  // for its linker included).
  llvm::orc::IRCompileLayer::IRCompiler* compiler = nullptr;
  std::string identity;
  int64_t modules = 0;
  int64_t dylibs = 0;
  int64_t loaded = 0;  // objects in the session, released ones not yet removed included
  JitMapBudget maps{jit_map_limit()};
  // Libraries whose JitCode owners are all gone: removed by the next compile or load, under
  // `mutex` and never from the owner's destructor, which may run on any thread, inside a
  // caller's lock, or at exit after LLVM's own statics are gone.
  std::mutex released_mutex;
  std::vector<llvm::orc::JITDylib*> released;
  static constexpr int64_t kRemovalsPerNameSweep = 256;
  int64_t removed_since_sweep = 0;

  void remove_released();
  void refuse_near_map_cap(const char* doing, const std::string& symbol);
  void remove_library(llvm::orc::JITDylib& lib);
};

void Jit::Impl::remove_released() {
  std::vector<llvm::orc::JITDylib*> libs;
  {
    std::lock_guard lock(released_mutex);
    libs.swap(released);
  }
  if (libs.empty()) return;
  loaded -= static_cast<int64_t>(libs.size());
  std::vector<llvm::orc::JITDylibSP> held(libs.begin(), libs.end());
  if (llvm::Error e = jit->getExecutionSession().removeJITDylibs(std::move(held))) {
    static std::once_flag warned;
    std::string text = message(std::move(e));
    std::call_once(warned, [&] {
      fmt::print(stderr, "ampfuse: warning: LLVM JIT: removing the code of released kernels: {}\n", text);
    });
  }
  // ORC's symbol-name pool keeps the names of removed symbols until told to drop them
  // (about 150 bytes a kernel, each name unique); every so many removals, so that the sweep
  // over the pool stays cheap.
  removed_since_sweep += static_cast<int64_t>(libs.size());
  if (removed_since_sweep >= kRemovalsPerNameSweep) {
    jit->getExecutionSession().getSymbolStringPool()->clearDeadEntries();
    removed_since_sweep = 0;
  }
}

void Jit::Impl::remove_library(llvm::orc::JITDylib& lib) {
  if (llvm::Error e = jit->getExecutionSession().removeJITDylib(lib)) llvm::consumeError(std::move(e));
}

void Jit::Impl::refuse_near_map_cap(const char* doing, const std::string& symbol) {
  int64_t count = -1;
  if (maps.allows_load(&count)) return;
  fail("LLVM JIT: not {} '{}': the process holds {} memory maps and the JIT loads code only below {} ({} objects "
       "loaded; vm.max_map_count is {}); let go of executables no longer used, or raise the limit "
       "(AMPFUSE_JIT_MAX_MAPS, or the system's vm.max_map_count)",
       doing, symbol, count, maps.limit(), loaded, system_max_map_count());
}

Jit::Jit() : impl_(std::make_unique<Impl>()) {
  const codegen::JitTarget& target = codegen::jit_target();  // initializes LLVM's native target
  llvm::orc::JITTargetMachineBuilder machine{llvm::Triple(target.triple)};
  machine.setCPU(target.cpu);
  llvm::SubtargetFeatures features(target.features);
  machine.addFeatures(features.getFeatures());
  machine.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  machine.getOptions().AllowFPOpFusion = llvm::FPOpFusion::Strict;

  Impl* impl = impl_.get();
  auto compiler_for = [impl](llvm::orc::JITTargetMachineBuilder jtmb)
      -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
    auto tm = jtmb.createTargetMachine();
    if (!tm) return tm.takeError();
    auto compiler = std::make_unique<llvm::orc::TMOwningSimpleCompiler>(std::move(*tm));
    impl->compiler = compiler.get();
    return compiler;
  };
  impl_->jit = take(llvm::orc::LLJITBuilder()
                        .setJITTargetMachineBuilder(std::move(machine))
                        .setCompileFunctionCreator(compiler_for)
                        .create(),
                    "create");
  if (!impl_->compiler) fail("LLVM JIT: the JIT did not create its IR compiler");
  // Everything that changes the machine code besides the kernel itself (the disk cache's key).
  impl_->identity = fmt::format("ampfuse {} | build {} | LLVM {} | {} | cpu {} | features {} | O3, fp-contract off",
                                AMPFUSE_VERSION, DiskCache::build_identity(), LLVM_VERSION_STRING, target.triple, target.cpu,
                                target.features);
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

JitCode Jit::compile(codegen::LlvmModule module) {
  const std::string symbol = module.symbol;
  return load_object(emit_object(std::move(module)), symbol);
}

std::string Jit::emit_object(codegen::LlvmModule module) {
  std::lock_guard lock(impl_->mutex);
  const std::string symbol = module.symbol;
  impl_->remove_released();
  // LLVM allocates freely while compiling and aborts when an allocation fails.
  impl_->refuse_near_map_cap("compiling", symbol);
  if (fault_strikes(Fault::compile))
    fail("LLVM JIT: compiling module '{}': compilation failed {}", symbol, injected_fault_note());
  auto object = (*impl_->compiler)(*module.module);
  if (!object) fail("LLVM JIT: compiling module '{}': {}", symbol, message(object.takeError()));
  return std::string((*object)->getBuffer());
}

JitCode Jit::load_object(std::string_view object, const std::string& symbol) {
  std::lock_guard lock(impl_->mutex);
  impl_->remove_released();
  impl_->refuse_near_map_cap("loading", symbol);
  // A library of its own per object: objects from the disk cache were named by the process
  // that compiled them, so their symbols may repeat ours; and a library is what the JIT
  // removes when the object's owner is gone. It links against main (the helpers, the C
  // library).
  auto created = impl_->jit->createJITDylib(fmt::format("ampfuse_object_{}", impl_->dylibs++));
  if (!created) fail("LLVM JIT: creating a library for '{}': {}", symbol, message(created.takeError()));
  llvm::orc::JITDylib& lib = *created;
  lib.addToLinkOrder(impl_->jit->getMainJITDylib());
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(object.data(), object.size()), symbol);
  if (llvm::Error e = impl_->jit->addObjectFile(lib, std::move(buffer))) {
    impl_->remove_library(lib);
    fail("LLVM JIT: adding the object of '{}': {}", symbol, message(std::move(e)));
  }
  auto address = impl_->jit->lookup(lib, symbol);
  if (!address) {
    std::string why = message(address.takeError());
    impl_->remove_library(lib);
    fail("LLVM JIT: lookup: {}", why);
  }
  ++impl_->modules;
  ++impl_->loaded;
  impl_->maps.loaded();
  Impl* impl = impl_.get();  // the JIT is never destroyed (global())
  JitCode code;
  code.address = address->toPtr<void*>();
  code.owner = std::shared_ptr<const void>(&lib, [impl](const void* library) noexcept {
    try {
      std::lock_guard released_lock(impl->released_mutex);
      impl->released.push_back(static_cast<llvm::orc::JITDylib*>(const_cast<void*>(library)));
    } catch (...) {
      // No memory to note it: the code stays loaded, which is safe.
    }
  });
  return code;
}

const std::string& Jit::identity() const { return impl_->identity; }

int64_t Jit::modules() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->modules;
}

int64_t Jit::loaded_objects() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->loaded;
}

}  // namespace ampfuse::runtime
