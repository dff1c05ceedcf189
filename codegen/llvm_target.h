// The CPU the JIT compiles kernels for: its choice (AMPFUSE_CPU), O3 optimization and
// assembly listings.
//
// AMPFUSE_CPU=native (the default) compiles for the machine the process runs on: LLVM's
// name for its CPU and every feature the CPU reports. AMPFUSE_CPU=x86-64-v3 (AVX2, FMA,
// F16C) and x86-64-v4 (v3 plus AVX-512) compile for the x86-64 psABI levels instead, so
// that one AVX-512 machine generates and tests the AVX2 code of older machines too. A
// level the machine cannot run is refused (its code would die of SIGILL).
//
// Every target compiles with floating-point contraction off: a multiply followed by an
// add must round twice, as the reference interpreter does, so no FMA is formed unless
// the IR asks for one.
#pragma once

#include "codegen/llvm_module.h"
#include "ir/error.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace ampfuse::codegen {

// The environment variable that chooses the JIT's target CPU.
inline constexpr const char* kTargetCpuVariable = "AMPFUSE_CPU";

// The machine the process runs on, as LLVM detects it.
struct HostCpu {
  std::string triple;                                // "x86_64-pc-linux-gnu"
  std::string name;                                  // "znver4", "skylake-avx512", ...
  std::map<std::string, bool, std::less<>> features;  // LLVM feature name -> present
};

// What the JIT compiles for.
struct JitTarget {
  std::string choice;    // AMPFUSE_CPU's value: "native", "x86-64-v3" or "x86-64-v4"
  std::string triple;
  std::string cpu;       // LLVM's CPU name: the host's for native ("znver4"), else the level
  std::string features;  // LLVM's feature string: "+avx2,+f16c,...", "-" for features turned off
  // Tells apart the code of different targets, as part of every compiled kernel's cache key:
  // the CPU name and a hash of the feature string (one CPU name can come with different
  // features, e.g. in a VM that hides AVX-512).
  std::string cache_tag;

  // Whether code for this target may use `feature` (LLVM's name: "avx512f", "f16c", ...).
  bool has(std::string_view feature) const;
};

// Thrown for an AMPFUSE_CPU level that needs instructions the host lacks: the test
// environment skips on it (tests/jit_target_environment.cpp); everyone else sees an Error.
class CpuLacksFeatures : public Error {
 public:
  using Error::Error;
};

// The target AMPFUSE_CPU=`choice` selects on `host` (a pure function; jit_target() passes
// "native" when the variable is unset). Throws Error naming the variable and the accepted
// values for an unknown choice, and CpuLacksFeatures naming the missing features for a
// level the host cannot run.
JitTarget resolve_jit_target(std::string_view choice, const HostCpu& host);

// The CPU this process runs on.
HostCpu detect_host_cpu();

// resolve_jit_target(AMPFUSE_CPU, detect_host_cpu()): read once per process and used by
// optimize_for_target, target_assembly and the JIT (runtime/jit.cpp) alike. Throws as
// resolve_jit_target does, on every call.
const JitTarget& jit_target();

// The width in bits of the vectors the loop vectorizer forms for jit_target(): 256 on
// AVX2, 512 on AVX-512 unless LLVM's tuning for the CPU prefers 256 (Skylake-X, whose
// clock drops with zmm registers).
int target_vector_bits();

// The width in bits of jit_target()'s widest vector registers: 512 on AVX-512, whatever
// LLVM's tuning prefers for loops (target_vector_bits), else target_vector_bits().
int target_register_bits();

// Sets the module's triple and data layout and each function's target-cpu/-features
// attributes for jit_target(), then runs the O3 pipeline with its TargetMachine (which
// the loop vectorizer needs to see the vector width). Thread-safe.
void optimize_for_target(LlvmModule& m);

// The assembly for jit_target() of the module (a copy is lowered; `m` is unchanged).
// Thread-safe.
std::string target_assembly(const LlvmModule& m);

}  // namespace ampfuse::codegen
