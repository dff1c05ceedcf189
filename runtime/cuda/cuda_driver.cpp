// The dlopen'ed CUDA driver (runtime/cuda/cuda_driver.h). The few types and enum values
// used are declared here, matching cuda.h, so this file needs no CUDA header.
#include "runtime/cuda/cuda_driver.h"

#include "codegen/cuda_emitter.h"
#include "ir/error.h"
#include "runtime/cuda/nvrtc_compiler.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ampfuse::runtime::cuda {

namespace {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUevent = void*;

constexpr CUresult kSuccess = 0;
constexpr CUresult kErrorNoDevice = 100;
constexpr CUresult kErrorStubLibrary = 34;

// CUdevice_attribute values (cuda.h).
enum Attribute : int {
  kMaxThreadsPerBlock = 1,
  kMaxGridDimX = 5,
  kMultiprocessorCount = 16,
  kMemoryClockRate = 36,
  kGlobalMemoryBusWidth = 37,
  kMaxThreadsPerMultiprocessor = 39,
  kComputeCapabilityMajor = 75,
  kComputeCapabilityMinor = 76,
};

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
};

struct Driver {
  std::string unavailable;  // "" when usable
  Api api{};
  CUdevice device = 0;
  CUcontext context = nullptr;
  DeviceProperties props;
  std::mutex mutex;  // the kernel cache
  std::unordered_map<std::string, std::shared_ptr<const CudaKernel>> kernels;
};

std::string error_text(const Api& api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
  if (api.cuGetErrorString) api.cuGetErrorString(r, &text);
  return fmt::format("{} ({}): {}", name ? name : "CUDA error", r, text ? text : "unknown error");
}

// Resolves every entry point, or says which one is missing. Versioned names first (the
// ones cuda.h's macros select), then the original ones for older drivers.
std::string resolve(void* lib, Api& api) {
  auto get = [&](auto& fn, std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names)
      if (void* p = dlsym(lib, n)) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
        return "";
      }
    return *names.begin();
  };
  const std::string missing[] = {
      get(api.cuInit, {"cuInit"}),
      get(api.cuDriverGetVersion, {"cuDriverGetVersion"}),
      get(api.cuDeviceGetCount, {"cuDeviceGetCount"}),
      get(api.cuDeviceGet, {"cuDeviceGet"}),
      get(api.cuDeviceGetName, {"cuDeviceGetName"}),
      get(api.cuDeviceGetAttribute, {"cuDeviceGetAttribute"}),
      get(api.cuDevicePrimaryCtxRetain, {"cuDevicePrimaryCtxRetain"}),
      get(api.cuCtxSetCurrent, {"cuCtxSetCurrent"}),
      get(api.cuCtxSynchronize, {"cuCtxSynchronize"}),
      get(api.cuMemAlloc, {"cuMemAlloc_v2"}),
      get(api.cuMemFree, {"cuMemFree_v2"}),
      get(api.cuMemcpyHtoD, {"cuMemcpyHtoD_v2"}),
      get(api.cuMemcpyDtoH, {"cuMemcpyDtoH_v2"}),
      get(api.cuMemsetD8, {"cuMemsetD8_v2"}),
      get(api.cuStreamCreate, {"cuStreamCreate"}),
      get(api.cuStreamDestroy, {"cuStreamDestroy_v2", "cuStreamDestroy"}),
      get(api.cuStreamSynchronize, {"cuStreamSynchronize"}),
      get(api.cuEventCreate, {"cuEventCreate"}),
      get(api.cuEventDestroy, {"cuEventDestroy_v2", "cuEventDestroy"}),
      get(api.cuEventRecord, {"cuEventRecord"}),
      get(api.cuEventSynchronize, {"cuEventSynchronize"}),
      get(api.cuEventElapsedTime, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}),
      get(api.cuModuleLoadData, {"cuModuleLoadData"}),
      get(api.cuModuleGetFunction, {"cuModuleGetFunction"}),
      get(api.cuLaunchKernel, {"cuLaunchKernel"}),
      get(api.cuGetErrorString, {"cuGetErrorString"}),
      get(api.cuGetErrorName, {"cuGetErrorName"}),
  };
  for (const std::string& m : missing)
    if (!m.empty()) return m;
  return "";
}

std::string open_driver(Driver& d) {
  // RTLD_LOCAL: nothing else in the process sees the driver's symbols.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    return fmt::format("no CUDA driver: libcuda.so.1 not found ({})", why ? why : "dlopen failed");
  }
  if (const std::string missing = resolve(lib, d.api); !missing.empty())
    return fmt::format("no CUDA driver: libcuda.so.1 lacks {} (driver too old)", missing);
  Api& a = d.api;
  if (const CUresult r = a.cuInit(0); r != kSuccess) {
    if (r == kErrorNoDevice) return "no CUDA device: cuInit found none";
    if (r == kErrorStubLibrary) return "no CUDA driver: libcuda.so.1 is the toolkit's stub library";
    return fmt::format("no CUDA device: cuInit failed with {}", error_text(a, r));
  }
  int count = 0;
  if (a.cuDeviceGetCount(&count) != kSuccess || count == 0) return "no CUDA device";
  if (const CUresult r = a.cuDeviceGet(&d.device, 0); r != kSuccess)
    return fmt::format("no CUDA device: cuDeviceGet(0) failed with {}", error_text(a, r));
  if (const CUresult r = a.cuDevicePrimaryCtxRetain(&d.context, d.device); r != kSuccess)
    return fmt::format("CUDA device 0 unusable: cuDevicePrimaryCtxRetain failed with {}", error_text(a, r));
  char name[256] = {};
  a.cuDeviceGetName(name, sizeof name - 1, d.device);
  d.props.name = name;
  auto attr = [&](int which) {
    int v = 0;
    return a.cuDeviceGetAttribute(&v, which, d.device) == kSuccess ? v : 0;
  };
  d.props.arch = attr(kComputeCapabilityMajor) * 10 + attr(kComputeCapabilityMinor);
  d.props.multiprocessors = attr(kMultiprocessorCount);
  d.props.max_threads_per_multiprocessor = attr(kMaxThreadsPerMultiprocessor);
  d.props.max_threads_per_block = attr(kMaxThreadsPerBlock);
  d.props.max_grid_x = attr(kMaxGridDimX);
  d.props.memory_clock_khz = attr(kMemoryClockRate);
  d.props.bus_width_bits = attr(kGlobalMemoryBusWidth);
  a.cuDriverGetVersion(&d.props.driver_version);
  return "";
}

Driver& driver() {
  static Driver* d = [] {
    auto* drv = new Driver;  // never destroyed: the driver outlives static destructors
    drv->unavailable = open_driver(*drv);
    return drv;
  }();
  return *d;
}

// The usable driver with device 0's context current on this thread, or an Error.
Driver& ready() {
  Driver& d = driver();
  if (!d.unavailable.empty()) fail("{}", d.unavailable);
  d.api.cuCtxSetCurrent(d.context);
  return d;
}

void check(CUresult r, const char* what) {
  if (r != kSuccess) fail("CUDA: {} failed with {}", what, error_text(driver().api, r));
}

NvrtcOptions device_options(const Driver& d) {
  NvrtcOptions opts;
  opts.arch = d.props.arch;
  opts.ptxas_verbose = true;
  return opts;
}

}  // namespace

std::string cuda_available() { return driver().unavailable; }

double DeviceProperties::peak_bandwidth_gbs() const {
  return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
}

const DeviceProperties& cuda_device() { return ready().props; }

DeviceBuffer::DeviceBuffer(size_t bytes) : size_(bytes) {
  Driver& d = ready();
  CUdeviceptr p = 0;
  check(d.api.cuMemAlloc(&p, std::max<size_t>(bytes, 1)), "cuMemAlloc");
  ptr_ = p;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().api.cuMemFree(ptr_);
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
  if (bytes > size_) fail("CUDA: upload of {} bytes into a buffer of {}", bytes, size_);
  if (bytes) check(ready().api.cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, size_t bytes) const {
  if (bytes > size_) fail("CUDA: download of {} bytes from a buffer of {}", bytes, size_);
  if (bytes) check(ready().api.cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

void copy_to_device(uint64_t device, const void* host, size_t bytes) {
  if (bytes) check(ready().api.cuMemcpyHtoD(device, host, bytes), "cuMemcpyHtoD");
}

void copy_to_host(void* host, uint64_t device, size_t bytes) {
  if (bytes) check(ready().api.cuMemcpyDtoH(host, device, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::zero() { check(ready().api.cuMemsetD8(ptr_, 0, std::max<size_t>(size_, 1)), "cuMemsetD8"); }

void cuda_precompile(const std::vector<codegen::KernelSpec>& specs) {
  Driver& d = ready();
  const NvrtcOptions opts = device_options(d);
  std::vector<std::shared_ptr<CudaKernel>> fresh;
  std::vector<std::string> sources;
  {
    std::lock_guard<std::mutex> lock(d.mutex);
    std::unordered_map<std::string, bool> seen;
    for (const codegen::KernelSpec& spec : specs) {
      const codegen::KernelSignature sig = codegen::signature(spec);
      auto k = std::make_shared<CudaKernel>();
      k->key = cuda_cache_key(sig, opts);
      if (d.kernels.count(k->key) || !seen.emplace(k->key, true).second) continue;
      k->name = codegen::cuda_kernel_name(sig);
      k->vector_width = codegen::cuda_vector_width(sig);
      sources.push_back(codegen::emit_cuda_kernel(sig, k->name));
      fresh.push_back(k);
    }
  }
  if (fresh.empty()) return;
  // Programs of up to kBatch kernels, compiled on every core (NVRTC is thread-safe across
  // programs), then loaded one module each.
  constexpr size_t kBatch = 16;
  const size_t programs = (fresh.size() + kBatch - 1) / kBatch;
  std::vector<NvrtcResult> compiled(programs);
  std::vector<std::string> errors(programs);
  // A program's CUBIN is cached under its kernels' keys together: the same model compiled
  // again forms the same batches.
  std::vector<char> from_disk(programs, 0);
  DiskCache* disk = DiskCache::process();
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t p; (p = next++) < programs;) {
      std::string src = codegen::cuda_prelude();
      std::string key;
      for (size_t i = p * kBatch; i < std::min(fresh.size(), (p + 1) * kBatch); ++i) {
        src += sources[i];
        key += fresh[i]->key + '\n';
      }
      try {
        bool loaded = false;
        compiled[p] = nvrtc_compile_cached(src, fmt::format("ampfuse_batch{}", p), opts, key, disk, &loaded);
        from_disk[p] = loaded;
      } catch (const Error& e) {
        errors[p] = e.what();
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n_threads = std::min<size_t>(programs, std::max(1u, std::thread::hardware_concurrency()));
  for (size_t t = 0; t < n_threads; ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  for (const std::string& e : errors)
    if (!e.empty()) fail("{}", e);
  std::lock_guard<std::mutex> lock(d.mutex);
  for (size_t p = 0; p < programs; ++p) {
    CUmodule module = nullptr;
    check(d.api.cuModuleLoadData(&module, compiled[p].binary.data()), "cuModuleLoadData");
    std::unordered_map<std::string, int> registers;
    for (const PtxasUsage& u : parse_ptxas_log(compiled[p].log)) registers[u.function] = u.registers;
    for (size_t i = p * kBatch; i < std::min(fresh.size(), (p + 1) * kBatch); ++i) {
      const std::shared_ptr<CudaKernel>& k = fresh[i];
      CUfunction fn = nullptr;
      check(d.api.cuModuleGetFunction(&fn, module, k->name.c_str()), "cuModuleGetFunction");
      k->function = fn;
      k->registers = registers[k->name];
      k->compile_seconds = compiled[p].seconds / static_cast<double>(kBatch);
      d.kernels.emplace(k->key, k);
      if (from_disk[p]) count_disk_load_on_this_thread();
    }
  }
}

std::shared_ptr<const CudaKernel> cuda_kernel(const codegen::KernelSpec& spec) {
  Driver& d = ready();
  const codegen::KernelSignature sig = codegen::signature(spec);
  const NvrtcOptions opts = device_options(d);
  const std::string key = cuda_cache_key(sig, opts);
  std::lock_guard<std::mutex> lock(d.mutex);
  if (auto it = d.kernels.find(key); it != d.kernels.end()) return it->second;
  auto k = std::make_shared<CudaKernel>();
  k->key = key;
  k->name = codegen::cuda_kernel_name(sig);
  k->vector_width = codegen::cuda_vector_width(sig);
  bool from_disk = false;
  const NvrtcResult compiled = with_context(fmt::format("kernel '{}'", spec.name), [&] {
    return nvrtc_compile_cached(codegen::emit_cuda_source(sig, k->name), k->name, opts, key, DiskCache::process(),
                                &from_disk);
  });
  if (from_disk) count_disk_load_on_this_thread();
  k->compile_seconds = compiled.seconds;
  for (const PtxasUsage& u : parse_ptxas_log(compiled.log))
    if (u.function == k->name) k->registers = u.registers;
  CUmodule module = nullptr;  // loaded for the life of the process, like the CPU JIT's code
  check(d.api.cuModuleLoadData(&module, compiled.binary.data()), "cuModuleLoadData");
  check(d.api.cuModuleGetFunction(&k->function, module, k->name.c_str()), "cuModuleGetFunction");
  d.kernels.emplace(key, k);
  return k;
}

void launch_cuda_kernel(const CudaKernel& kernel, const codegen::KernelSpec& spec, std::span<const uint64_t> data,
                        std::span<const double> params, uint64_t flags) {
  Driver& d = ready();
  const size_t operands = spec.inputs.size() + spec.outputs.size();
  if (data.size() != operands)
    fail("kernel '{}': {} device buffers for {} operands", spec.name, data.size(), operands);
  if (params.size() != static_cast<size_t>(spec.num_params))
    fail("kernel '{}': {} parameters given for {}", spec.name, params.size(), spec.num_params);
  if (!spec.flags.empty() && flags == 0) fail("kernel '{}' has flags but no flag buffer was given", spec.name);
  long long n = spec.num_elements();
  if (n == 0) return;
  // Argument storage in ABI order (codegen/cuda_emitter.h); kernelParams points into it.
  std::vector<long long> index;
  for (int64_t v : codegen::cuda_index_arguments(spec)) index.push_back(v);
  std::vector<void*> args;
  args.push_back(&n);
  for (const uint64_t& p : data) args.push_back(const_cast<uint64_t*>(&p));
  for (long long& v : index) args.push_back(&v);
  for (const double& p : params) args.push_back(const_cast<double*>(&p));
  uint64_t flag_ptr = flags;
  if (!spec.flags.empty()) args.push_back(&flag_ptr);
  const codegen::CudaDeviceLimits limits{d.props.multiprocessors, d.props.max_threads_per_multiprocessor,
                                         d.props.max_threads_per_block, d.props.max_grid_x};
  const codegen::CudaLaunchConfig c = codegen::cuda_launch_config(n, kernel.vector_width, limits);
  check(d.api.cuLaunchKernel(static_cast<CUfunction>(kernel.function), c.grid, 1, 1, c.block, 1, 1, 0, nullptr,
                             args.data(), nullptr),
        "cuLaunchKernel");
}

void cuda_synchronize() { check(ready().api.cuCtxSynchronize(), "cuCtxSynchronize"); }

double cuda_time_ms(const std::function<void()>& fn) {
  Driver& d = ready();
  CUevent start = nullptr, stop = nullptr;
  check(d.api.cuEventCreate(&start, 0), "cuEventCreate");
  check(d.api.cuEventCreate(&stop, 0), "cuEventCreate");
  check(d.api.cuEventRecord(start, nullptr), "cuEventRecord");
  fn();
  check(d.api.cuEventRecord(stop, nullptr), "cuEventRecord");
  check(d.api.cuEventSynchronize(stop), "cuEventSynchronize");
  float ms = 0;
  check(d.api.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  d.api.cuEventDestroy(start);
  d.api.cuEventDestroy(stop);
  return ms;
}

int64_t operand_extent(const codegen::KernelSpec& spec, const codegen::OperandSpec& o) {
  if (spec.num_elements() == 0) return 0;
  int64_t last = 0;
  for (size_t i = 0; i < spec.shape.size(); ++i) last += (spec.shape[i] - 1) * o.strides[i];
  return last + 1;
}

void run_cuda_kernel(const codegen::KernelSpec& spec, std::span<const void* const> inputs,
                     std::span<void* const> outputs, std::span<const double> params, std::span<int32_t> flags) {
  spec.validate();
  if (inputs.size() != spec.inputs.size() || outputs.size() != spec.outputs.size())
    fail("kernel '{}': {} inputs and {} outputs given for {} and {}", spec.name, inputs.size(), outputs.size(),
         spec.inputs.size(), spec.outputs.size());
  if (flags.size() != spec.flags.size())
    fail("kernel '{}': {} flag slots given for {} flags", spec.name, flags.size(), spec.flags.size());
  const std::shared_ptr<const CudaKernel> kernel = cuda_kernel(spec);
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<uint64_t> ptrs;
  auto add = [&](const codegen::OperandSpec& o, const void* host) {
    const size_t bytes = static_cast<size_t>(operand_extent(spec, o)) * ir::dtype_size(o.dtype);
    buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
    buffers.back()->upload(host, bytes);
    ptrs.push_back(buffers.back()->ptr());
  };
  for (size_t k = 0; k < inputs.size(); ++k) add(spec.inputs[k], inputs[k]);
  for (size_t k = 0; k < outputs.size(); ++k) add(spec.outputs[k], outputs[k]);
  DeviceBuffer flag_buffer(std::max<size_t>(flags.size(), 1) * sizeof(int32_t));
  flag_buffer.zero();
  launch_cuda_kernel(*kernel, spec, ptrs, params, flags.empty() ? 0 : flag_buffer.ptr());
  cuda_synchronize();
  for (size_t k = 0; k < outputs.size(); ++k)
    buffers[inputs.size() + k]->download(outputs[k], buffers[inputs.size() + k]->size());
  std::vector<int32_t> got(flags.size());
  flag_buffer.download(got.data(), got.size() * sizeof(int32_t));
  for (size_t f = 0; f < flags.size(); ++f) flags[f] |= got[f];
}

}  // namespace ampfuse::runtime::cuda
