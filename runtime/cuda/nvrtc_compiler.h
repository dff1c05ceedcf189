// NVRTC: CUDA C++ source (codegen/cuda_emitter.h) -> CUBIN for a real architecture, or PTX
// for one this NVRTC cannot assemble for (the driver JIT-compiles PTX at module load).
//
// Built only when CMake finds the CUDA toolkit (AMPFUSE_HAVE_NVRTC); otherwise every call
// throws "NVRTC is not available". Links libnvrtc only, never libcuda (see cuda_driver.h).
#pragma once

#include "codegen/kernel_spec.h"
#include "runtime/disk_cache.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampfuse::runtime::cuda {

// The floating-point options every kernel is compiled with: IEEE add/mul/div/sqrt without
// contraction or flushing, so that results equal the CPU's (codegen/cuda_emitter.h).
inline constexpr const char* kNvrtcMathOptions[] = {"--fmad=false", "--prec-div=true", "--prec-sqrt=true",
                                                    "--ftz=false"};

struct NvrtcResult {
  int arch = 0;                // 80 for sm_80
  bool cubin = false;          // true: `binary` is a CUBIN; false: it is PTX text (compute_XX)
  std::vector<char> binary;    // what cuModuleLoadData takes (PTX NUL-terminated)
  std::string ptx;             // the PTX, when NVRTC produced it (for ptxas and dumps)
  std::string log;             // NVRTC's log; with ptxas_verbose, ptxas's register report
  std::vector<std::string> options;
  double seconds = 0;          // wall time of nvrtcCompileProgram
};

struct NvrtcOptions {
  int arch = 80;               // compute capability * 10
  bool ptxas_verbose = false;  // --ptxas-options=-v: register and spill counts in the log
  std::vector<std::string> extra;  // appended after the defaults
};

// True when this build has NVRTC.
bool nvrtc_available();
// "13.0" for the NVRTC this binary uses. Throws when NVRTC is not available.
std::string nvrtc_version();
// Architectures (compute capability * 10) NVRTC can produce CUBIN for.
std::vector<int> nvrtc_supported_archs();

// The option list compile() passes for `opts`: -std=c++17, -default-device, the math
// options, --gpu-architecture=sm_XX (compute_XX when NVRTC lacks sm_XX), the extras.
std::vector<std::string> nvrtc_options(const NvrtcOptions& opts);

// Compiles one translation unit. Throws ampfuse::Error with NVRTC's log on a compile error,
// naming `program_name`.
NvrtcResult nvrtc_compile(const std::string& source, const std::string& program_name, const NvrtcOptions& opts);

// nvrtc_compile through the disk cache (runtime/disk_cache.h): the binary stored under
// `key` (cuda_cache_key's, or several joined for a batch; the build's identity is added)
// when `disk` has it, with *from_disk set; else compiles and stores it. PTX text and seconds
// are not stored (a loaded result has binary, arch, cubin, log and options).
NvrtcResult nvrtc_compile_cached(const std::string& source, const std::string& program_name, const NvrtcOptions& opts,
                                 const std::string& key, DiskCache* disk, bool* from_disk = nullptr);

// The cache key of a compiled kernel: codegen::cuda_signature_key, the NVRTC version, the options
// and the architecture. Two keys are equal only when the CUBIN would be.
std::string cuda_cache_key(const codegen::KernelSignature& sig, const NvrtcOptions& opts);

// ptxas register report, parsed from a log ("Used 32 registers", "8 bytes spill stores").
struct PtxasUsage {
  std::string function;
  int registers = 0;
  int spill_stores = 0;  // bytes
  int spill_loads = 0;   // bytes
};
std::vector<PtxasUsage> parse_ptxas_log(const std::string& log);

}  // namespace ampfuse::runtime::cuda
