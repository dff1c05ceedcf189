#include "codegen/llvm_target.h"

#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/xxhash.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <fmt/ranges.h>

#include <cstdlib>
#include <mutex>
#include <vector>

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

// An x86-64 psABI micro-architecture level, by the LLVM features it needs. Each level
// lists the groups of the levels below it too; it is offered only where the host has every
// feature of every group.
struct FeatureGroup {
  std::string_view isa;  // for error messages
  std::vector<std::string_view> features;
};

struct Level {
  std::string_view name;  // AMPFUSE_CPU's value and LLVM's CPU name
  std::vector<FeatureGroup> groups;
  std::string_view tuning;  // appended to the feature string; not a host requirement
};

const std::vector<Level>& levels() {
  static const std::vector<Level> all = [] {
    const FeatureGroup v2 = {"SSE4.2", {"cx16", "popcnt", "sahf", "sse3", "sse4.1", "sse4.2", "ssse3"}};
    // F16C: without it, LLVM lowers the f16 conversions of codegen/dtype_lowering.cpp to
    // library calls, one element at a time.
    const FeatureGroup v3 = {"AVX2", {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}};
    // LLVM 18 split the 512-bit registers off AVX-512 as "evex512" (AVX10/256 CPUs lack
    // them); this level is about zmm code, so the host must have them.
    const FeatureGroup v4 = {"AVX-512", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "evex512"}};
    // LLVM tunes x86-64-v4 like Skylake-X, whose clock drops with 512-bit instructions, so
    // its loop vectorizer would keep to ymm registers. The kernels are memory-bound, and
    // what the level is for is AVX-512 code (Zen 4 and Intel's newer cores use zmm anyway).
    return std::vector<Level>{
        {"x86-64-v3", {v2, v3}, ""},
        {"x86-64-v4", {v2, v3, v4}, "-prefer-256-bit"},
    };
  }();
  return all;
}

// Short enough to prefix every cache key. XXH3 is a fixed algorithm (std::hash is not), so a
// tag stays the same from one process to the next, as a disk cache will need.
std::string tag_for(const std::string& cpu, const std::string& features) {
  return fmt::format("{}/{:016x}", cpu, llvm::xxh3_64bits(features));
}

// Host features the JIT turns off. AVX512-FP16: LLVM 19 commutes a masked f16 compare
// (vcmpph with a memory operand) without swapping its predicate (llvm/llvm-project#159723,
// fixed in LLVM 22), so a fused `b < 1` over f16 inputs computed `1 < b` on Sapphire Rapids.
// The kernels compute in f32 and only reach f16 arithmetic where LLVM narrows an operation
// (a compare with a constant exact in f16), so nothing is lost; the conversions are
// AVX-512F / F16C instructions. AVX10 implies AVX512-FP16, so it goes too.
bool withheld_feature(std::string_view name) { return name == "avx512fp16" || name.starts_with("avx10."); }

JitTarget native_target(const HostCpu& host) {
  JitTarget t;
  t.choice = "native";
  t.triple = host.triple;
  t.cpu = host.name;
  for (const auto& [name, present] : host.features) {
    if (!t.features.empty()) t.features += ',';
    t.features += present && !withheld_feature(name) ? '+' : '-';
    t.features += name;
  }
  t.cache_tag = tag_for(t.cpu, t.features);
  return t;
}

// The level's features are spelled out, although LLVM's CPU name implies them, so that the
// feature string says what the code may use: JitTarget::has and the cache tag read it.
JitTarget level_target(const Level& level, const HostCpu& host) {
  std::vector<std::string> missing_by_isa;
  for (const FeatureGroup& group : level.groups) {
    std::vector<std::string_view> missing;
    for (std::string_view f : group.features) {
      const auto it = host.features.find(f);
      if (it == host.features.end() || !it->second) missing.push_back(f);
    }
    if (!missing.empty()) missing_by_isa.push_back(fmt::format("{} ({})", group.isa, fmt::join(missing, ", ")));
  }
  if (!missing_by_isa.empty())
    throw CpuLacksFeatures(fmt::format("{}={} needs {}, which this CPU lacks", kTargetCpuVariable, level.name,
                                       fmt::join(missing_by_isa, " and ")));
  JitTarget t;
  t.choice = level.name;
  t.triple = host.triple;
  t.cpu = level.name;
  for (const FeatureGroup& group : level.groups)
    for (std::string_view f : group.features) {
      if (!t.features.empty()) t.features += ',';
      t.features += '+';
      t.features += f;
    }
  if (!level.tuning.empty()) t.features += fmt::format(",{}", level.tuning);
  t.cache_tag = tag_for(t.cpu, t.features);
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
    const JitTarget& t = jit_target();
    std::string error;
    const llvm::Target* target = llvm::TargetRegistry::lookupTarget(t.triple, error);
    if (!target) fail("LLVM has no target for the triple {}: {}", t.triple, error);
    llvm::TargetOptions options;
    options.AllowFPOpFusion = llvm::FPOpFusion::Strict;
    auto* s = new TargetState;
    s->machine.reset(target->createTargetMachine(t.triple, t.cpu, t.features, options, llvm::Reloc::PIC_,
                                                 std::nullopt, llvm::CodeGenOptLevel::Aggressive));
    if (!s->machine) fail("LLVM could not create a target machine for {} ({})", t.triple, t.cpu);
    return s;
  }();
  return *state;
}

void prepare_for_target(llvm::Module& module, llvm::TargetMachine& machine) {
  const JitTarget& t = jit_target();
  module.setTargetTriple(t.triple);
  module.setDataLayout(machine.createDataLayout());
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", t.cpu);
    f.addFnAttr("target-features", t.features);
  }
}

}  // namespace

bool JitTarget::has(std::string_view feature) const {
  return fmt::format(",{},", features).find(fmt::format(",+{},", feature)) != std::string::npos;
}

JitTarget resolve_jit_target(std::string_view choice, const HostCpu& host) {
  if (choice == "native") return native_target(host);
  for (const Level& level : levels())
    if (choice == level.name) return level_target(level, host);
  std::vector<std::string_view> accepted;
  for (const Level& level : levels()) accepted.push_back(level.name);
  accepted.push_back("native");
  fail("{}='{}' is not a target CPU; use one of {}", kTargetCpuVariable, choice, fmt::join(accepted, ", "));
}

HostCpu detect_host_cpu() {
  HostCpu host;
  host.triple = llvm::sys::getProcessTriple();
  host.name = llvm::sys::getHostCPUName().str();
  for (const auto& [name, present] : llvm::sys::getHostCPUFeatures()) host.features.emplace(name.str(), present);
  return host;
}

const JitTarget& jit_target() {
  // Function-local statics: a throwing initializer runs again on the next call, so an
  // error is reported to every caller rather than only the first.
  static const JitTarget target = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    const char* choice = std::getenv(kTargetCpuVariable);
    return resolve_jit_target(choice ? choice : "native", detect_host_cpu());
  }();
  return target;
}

int target_vector_bits() {
  static const int bits = [] {
    // Asked of a function with the kernels' attributes: tuning is per function in LLVM.
    llvm::LLVMContext context;
    llvm::Module module("vector_width_probe", context);
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), false);
    llvm::Function* probe = llvm::Function::Create(type, llvm::Function::ExternalLinkage, "probe", module);
    llvm::IRBuilder<>(llvm::BasicBlock::Create(context, "entry", probe)).CreateRetVoid();
    TargetState& state = target_state();
    std::lock_guard lock(state.mutex);
    prepare_for_target(module, *state.machine);
    const llvm::TargetTransformInfo info = state.machine->getTargetTransformInfo(*probe);
    return static_cast<int>(
        info.getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector).getFixedValue());
  }();
  return bits;
}

int target_register_bits() {
  const JitTarget& target = jit_target();
  return target.has("avx512f") && target.has("evex512") ? 512 : target_vector_bits();
}

void optimize_for_target(LlvmModule& m) {
  TargetState& state = target_state();
  std::lock_guard lock(state.mutex);
  prepare_for_target(*m.module, *state.machine);

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

std::string target_assembly(const LlvmModule& m) {
  TargetState& state = target_state();
  std::lock_guard lock(state.mutex);
  std::unique_ptr<llvm::Module> copy = llvm::CloneModule(*m.module);
  prepare_for_target(*copy, *state.machine);
  llvm::SmallString<0> text;
  llvm::raw_svector_ostream os(text);
  llvm::legacy::PassManager passes;
  if (state.machine->addPassesToEmitFile(passes, os, nullptr, llvm::CodeGenFileType::AssemblyFile))
    fail("internal error: LLVM cannot emit assembly for {} ({})", jit_target().triple, jit_target().cpu);
  passes.run(*copy);
  return std::string(text.str());
}

}  // namespace ampfuse::codegen
