// NVRTC compilation (runtime/cuda/nvrtc_compiler.h).
#include "runtime/cuda/nvrtc_compiler.h"

#include "codegen/cuda_emitter.h"
#include "ir/error.h"

#include <ampfuse/version.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <regex>
#include <sstream>

#ifdef AMPFUSE_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace ampfuse::runtime::cuda {

#ifdef AMPFUSE_HAVE_NVRTC

namespace {

void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) fail("NVRTC: {} failed: {}", what, nvrtcGetErrorString(r));
}

// Destroys the program on every path out of nvrtc_compile.
struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

bool nvrtc_available() { return true; }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::vector<int> nvrtc_supported_archs() {
  int n = 0;
  check(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
  std::vector<int> archs(static_cast<size_t>(n));
  if (n > 0) check(nvrtcGetSupportedArchs(archs.data()), "nvrtcGetSupportedArchs");
  return archs;
}

NvrtcResult nvrtc_compile(const std::string& source, const std::string& program_name, const NvrtcOptions& opts) {
  NvrtcResult out;
  out.arch = opts.arch;
  out.options = nvrtc_options(opts);
  out.cubin = out.options.end() != std::find(out.options.begin(), out.options.end(),
                                             fmt::format("--gpu-architecture=sm_{}", opts.arch));
  Program prog;
  check(nvrtcCreateProgram(&prog.p, source.c_str(), (program_name + ".cu").c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::vector<const char*> argv;
  for (const std::string& o : out.options) argv.push_back(o.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const nvrtcResult status = nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t log_size = 0;
  check(nvrtcGetProgramLogSize(prog.p, &log_size), "nvrtcGetProgramLogSize");
  out.log.resize(log_size);
  if (log_size > 0) check(nvrtcGetProgramLog(prog.p, out.log.data()), "nvrtcGetProgramLog");
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (status != NVRTC_SUCCESS)
    fail("NVRTC could not compile '{}' for sm_{} ({}):\n{}", program_name, opts.arch, nvrtcGetErrorString(status),
         out.log);
  size_t ptx_size = 0;
  if (nvrtcGetPTXSize(prog.p, &ptx_size) == NVRTC_SUCCESS && ptx_size > 1) {
    out.ptx.resize(ptx_size);
    check(nvrtcGetPTX(prog.p, out.ptx.data()), "nvrtcGetPTX");
    out.ptx.resize(ptx_size - 1);  // drop the NUL
  }
  if (out.cubin) {
    size_t size = 0;
    check(nvrtcGetCUBINSize(prog.p, &size), "nvrtcGetCUBINSize");
    out.binary.resize(size);
    check(nvrtcGetCUBIN(prog.p, out.binary.data()), "nvrtcGetCUBIN");
  } else {
    if (out.ptx.empty()) fail("NVRTC produced no PTX for '{}' (compute_{})", program_name, opts.arch);
    out.binary.assign(out.ptx.begin(), out.ptx.end());
    out.binary.push_back('\0');
  }
  return out;
}

#else  // !AMPFUSE_HAVE_NVRTC

namespace {
[[noreturn]] void unavailable() {
  fail("NVRTC is not available: ampfuse was built without the CUDA toolkit (CMake found no CUDAToolkit)");
}
}  // namespace

bool nvrtc_available() { return false; }
std::string nvrtc_version() { unavailable(); }
std::vector<int> nvrtc_supported_archs() { unavailable(); }
NvrtcResult nvrtc_compile(const std::string&, const std::string&, const NvrtcOptions&) { unavailable(); }

#endif

std::vector<std::string> nvrtc_options(const NvrtcOptions& opts) {
  std::vector<std::string> o = {"-std=c++17", "-default-device"};
  for (const char* m : kNvrtcMathOptions) o.push_back(m);
  static const std::vector<int> archs = nvrtc_supported_archs();
  const bool real = std::find(archs.begin(), archs.end(), opts.arch) != archs.end();
  // A device newer than this NVRTC: PTX for the newest architecture it knows below the
  // device's, which the driver compiles at load time (PTX runs on later architectures).
  int virt = opts.arch;
  for (int a : archs)
    if (a < opts.arch && (virt == opts.arch || a > virt)) virt = a;
  o.push_back(real ? fmt::format("--gpu-architecture=sm_{}", opts.arch) : fmt::format("--gpu-architecture=compute_{}", virt));
  if (opts.ptxas_verbose && real) o.push_back("--ptxas-options=-v");
  o.insert(o.end(), opts.extra.begin(), opts.extra.end());
  return o;
}

NvrtcResult nvrtc_compile_cached(const std::string& source, const std::string& program_name, const NvrtcOptions& opts,
                                 const std::string& key, DiskCache* disk, bool* from_disk) {
  if (from_disk) *from_disk = false;
  if (!disk) return nvrtc_compile(source, program_name, opts);
  const std::string disk_key = fmt::format("ampfuse {} | build {} | cuda binary | {}", AMPFUSE_VERSION,
                                           DiskCache::build_identity(), key);
  // Payload: "<arch> <cubin 0|1> <log bytes>\n" log binary.
  if (std::optional<std::string> payload = disk->load(disk_key)) {
    std::istringstream in(*payload);
    NvrtcResult r;
    size_t log_bytes = 0;
    int cubin = 0;
    if (in >> r.arch >> cubin >> log_bytes && in.get() == '\n') {
      const size_t at = static_cast<size_t>(in.tellg());
      if (at + log_bytes <= payload->size()) {
        r.cubin = cubin != 0;
        r.log = payload->substr(at, log_bytes);
        r.binary.assign(payload->begin() + static_cast<std::ptrdiff_t>(at + log_bytes), payload->end());
        r.options = nvrtc_options(opts);
        if (from_disk) *from_disk = true;
        return r;
      }
    }
    // A whole entry (checksummed) that does not parse: another build's layout. Compile.
  }
  NvrtcResult r = nvrtc_compile(source, program_name, opts);
  std::string payload = fmt::format("{} {} {}\n", r.arch, r.cubin ? 1 : 0, r.log.size());
  payload += r.log;
  payload.append(r.binary.data(), r.binary.size());
  disk->store(disk_key, payload);
  return r;
}

std::string cuda_cache_key(const codegen::KernelSignature& sig, const NvrtcOptions& opts) {
  const std::vector<std::string> o = nvrtc_options(opts);
  return fmt::format("cuda|nvrtc {}|sm_{}|{}|{}", nvrtc_version(), opts.arch, fmt::join(o, " "),
                     codegen::cuda_signature_key(sig));
}

std::vector<PtxasUsage> parse_ptxas_log(const std::string& log) {
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  std::vector<PtxasUsage> out;
  std::istringstream in(log);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) {
      out.push_back({m[1].str()});
    } else if (!out.empty() && std::regex_search(line, m, spills)) {
      out.back().spill_stores = std::stoi(m[1].str());
      out.back().spill_loads = std::stoi(m[2].str());
    } else if (!out.empty() && std::regex_search(line, m, used)) {
      out.back().registers = std::stoi(m[1].str());
    }
  }
  return out;
}

}  // namespace ampfuse::runtime::cuda
