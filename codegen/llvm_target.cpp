#include "codegen/llvm_target.h"

#include "ir/error.h"

#include <llvm/ADT/SmallString.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <mutex>

namespace ampfuse::codegen {

LlvmModule::LlvmModule() = default;
LlvmModule::LlvmModule(LlvmModule&&) noexcept = default;
LlvmModule& LlvmModule::operator=(LlvmModule&&) noexcept = default;
LlvmModule::~LlvmModule() = default;

std::string ir_text(const LlvmModule& m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.module->print(os, nullptr);
  return os.str();
}

namespace {

HostTarget detect_host() {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::InitializeNativeTargetAsmParser();
  HostTarget t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = llvm::sys::getHostCPUName().str();
  std::string features;
  for (const auto& [name, enabled] : llvm::sys::getHostCPUFeatures()) {
    if (!features.empty()) features += ',';
    features += enabled ? '+' : '-';
    features.append(name.data(), name.size());
  }
  t.features = features;
  return t;
}

// One TargetMachine for optimization and listings, used under a lock: compiles are rare
// and a TargetMachine is not documented as safe to share between threads.
struct TargetState {
  std::mutex mutex;
  std::unique_ptr<llvm::TargetMachine> machine;
};

TargetState& target_state() {
  static TargetState* state = [] {
    const HostTarget& host = host_target();
    std::string error;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(host.triple, error);
    if (!target) fail("LLVM has no target for the host triple {}: {}", host.triple, error);
    llvm::TargetOptions options;
    options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
    auto* s = new TargetState;
    s->machine.reset(target->createTargetMachine(host.triple, host.cpu, host.features, options,
                                                 llvm::Reloc::PIC_, std::nullopt,
                                                 llvm::CodeGenOptLevel::Aggressive));
    if (!s->machine) fail("LLVM could not create a target machine for {} ({})", host.triple, host.cpu);
    return s;
  }();
  return *state;
}

void prepare_for_host(llvm::Module& module, llvm::TargetMachine& machine) {
  const HostTarget& host = host_target();
  module.setTargetTriple(host.triple);
  module.setDataLayout(machine.createDataLayout());
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", host.cpu);
    f.addFnAttr("target-features", host.features);
  }
}

}  // namespace

const HostTarget& host_target() {
  static const HostTarget host = detect_host();
  return host;
}

void optimize_for_host(LlvmModule& m) {
  TargetState& state = target_state();
  std::lock_guard lock(state.mutex);
  prepare_for_host(*m.module, *state.machine);

  std::string errors;
  llvm::raw_string_ostream es(errors);
  if (llvm::verifyModule(*m.module, &es)) fail("internal error: generated LLVM IR is invalid: {}", es.str());

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder builder(state.machine.get(), tuning);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager passes = builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  passes.run(*m.module, mam);
}

std::string host_assembly(const LlvmModule& m) {
  TargetState& state = target_state();
  std::lock_guard lock(state.mutex);
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(*m.module);
  prepare_for_host(*copy, *state.machine);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager passes;
  if (state.machine->addPassesToEmitFile(passes, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    fail("internal error: LLVM cannot emit assembly for {}", host_target().triple);
  passes.run(*copy);
  return std::string(text.str());
}

}  // namespace ampfuse::codegen
