// The host CPU as a code generation target: O3 optimization and assembly listings.
//
// Kernels are compiled for the machine they run on (sys::getHostCPUName and its features),
// with floating-point contraction off: a multiply followed by an add must round twice, as
// the reference interpreter does, so no FMA is formed unless the IR asks for one.
#pragma once

#include "codegen/llvm_module.h"

#include <string>

namespace ampfuse::codegen {

struct HostTarget {
  std::string triple;
  std::string cpu;       // "znver4", "skylake-avx512", ...
  std::string features;  // "+avx2,+f16c,..."
};

// Detected once per process.
const HostTarget& host_target();

// Sets the module's triple and data layout and each function's target-cpu/-features
// attributes for the host, then runs the O3 pipeline with the host TargetMachine (which
// the loop vectorizer needs to see the vector width). Thread-safe.
void optimize_for_host(LlvmModule& m);

// The host assembly for the module (a copy is lowered; `m` is unchanged). Thread-safe.
std::string host_assembly(const LlvmModule& m);

}  // namespace ampfuse::codegen
