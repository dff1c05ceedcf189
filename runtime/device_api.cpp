// The devices of runtime/device_api.h: the CPU, CUDA device 0 and the emulated device.
#include "runtime/device_api.h"

#include "ir/error.h"
#include "runtime/cuda/cuda_driver.h"
#include "runtime/fault_injection.h"
#include "runtime/kernel_cache.h"
#include "runtime/thread_pool.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

namespace ampfuse::runtime {

namespace {

namespace cu = runtime::cuda;

struct CudaDeviceKernel final : DeviceKernel {
  std::shared_ptr<const cu::CudaKernel> kernel;
};

class CudaDevice final : public DeviceApi {
 public:
  std::string name() const override {
    const cu::DeviceProperties& p = cu::cuda_device();
    return fmt::format("cuda: {} (sm_{}, {} SMs)", p.name, p.arch, p.multiprocessors);
  }

  DevicePtr alloc(size_t bytes) override {
    auto buffer = std::make_unique<cu::DeviceBuffer>(bytes);
    const DevicePtr p = buffer->ptr();
    std::lock_guard lock(mutex_);
    buffers_.emplace(p, std::move(buffer));
    return p;
  }
  void free(DevicePtr buffer) noexcept override {
    std::lock_guard lock(mutex_);
    buffers_.erase(buffer);
  }
  void upload(DevicePtr dst, const void* host, size_t bytes) override { cu::copy_to_device(dst, host, bytes); }
  void download(void* host, DevicePtr src, size_t bytes) override { cu::copy_to_host(host, src, bytes); }

  int precompile(std::span<const codegen::KernelSpec* const> specs) override {
    std::vector<codegen::KernelSpec> copies;
    for (const codegen::KernelSpec* s : specs) copies.push_back(*s);
    cu::cuda_precompile(copies);
    int compiled = 0;
    for (const codegen::KernelSpec* s : specs) compiled += remember(cu::cuda_kernel(*s).get());
    return compiled;
  }
  std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec, bool* compiled_now) override {
    auto k = std::make_shared<CudaDeviceKernel>();
    k->kernel = cu::cuda_kernel(spec);
    const bool first = remember(k->kernel.get());
    if (compiled_now) *compiled_now = first;
    return k;
  }
  void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
              DevicePtr flags) override {
    cu::launch_cuda_kernel(*static_cast<const CudaDeviceKernel&>(kernel).kernel, spec, data, {}, flags);
  }
  void synchronize() override { cu::cuda_synchronize(); }

 private:
  // The driver caches kernels per process without saying which it compiled just now: a
  // kernel this process's devices never returned before counts as compiled now.
  static bool remember(const cu::CudaKernel* k) {
    static std::mutex mutex;
    static std::set<const cu::CudaKernel*> seen;
    std::lock_guard<std::mutex> lock(mutex);
    return seen.insert(k).second;
  }

  std::mutex mutex_;
  std::unordered_map<DevicePtr, std::unique_ptr<cu::DeviceBuffer>> buffers_;
};

}  // namespace

std::unique_ptr<DeviceApi> cuda_device_api() {
  const std::string why = cu::cuda_available();
  if (!why.empty()) fail("{}", why);
  return std::make_unique<CudaDevice>();
}

// ---- Region checks ---------------------------------------------------------------------------

size_t RegionMap::remove(DevicePtr base, const char* device) {
  const auto it = live_.find(base);
  if (it == live_.end()) {
    std::fprintf(stderr, "%s: free of %#llx, which is not a live buffer\n", device, static_cast<unsigned long long>(base));
    std::abort();  // a double free: the executor's bookkeeping is broken
  }
  const size_t bytes = it->second.bytes;
  live_.erase(it);
  return bytes;
}

void RegionMap::declare(DevicePtr base, std::span<const DeviceRegion> regions, const char* device) {
  const auto it = live_.find(base);
  if (it == live_.end()) fail("{}: regions declared for {:#x}, which is not a live buffer", device, base);
  for (const DeviceRegion& r : regions)
    if (r.offset + r.bytes > it->second.bytes)
      fail("{}: region [{}, {}) lies outside the {}-byte buffer", device, r.offset, r.offset + r.bytes, it->second.bytes);
  it->second.regions.assign(regions.begin(), regions.end());
}

void RegionMap::check(DevicePtr p, size_t bytes, const std::string& what, const char* device) const {
  auto it = live_.upper_bound(p);
  if (it == live_.begin() || p >= std::prev(it)->first + std::prev(it)->second.bytes)
    fail("{}: {} at {:#x} is outside every buffer", device, what, p);
  --it;
  const size_t offset = p - it->first;
  const Allocation& a = it->second;
  if (offset + bytes > a.bytes)
    fail("{}: {} reads or writes {} bytes at offset {} of a {}-byte buffer", device, what, bytes, offset, a.bytes);
  if (a.regions.empty()) return;
  for (const DeviceRegion& r : a.regions)
    if (r.offset <= offset && offset + bytes <= r.offset + r.bytes) return;
  fail("{}: {} reads or writes bytes [{}, {}) of an arena, which no declared buffer holds", device, what, offset,
       offset + bytes);
}

void RegionMap::check_launch(const codegen::KernelSpec& spec, std::span<const DevicePtr> data, DevicePtr flags,
                             const char* device) const {
  const size_t operands = spec.inputs.size() + spec.outputs.size();
  if (data.size() != operands) fail("kernel '{}': {} device buffers for {} operands", spec.name, data.size(), operands);
  if (!spec.flags.empty() && flags == 0) fail("kernel '{}' has flags but no flag buffer was given", spec.name);
  for (size_t i = 0; i < operands; ++i) {
    const codegen::OperandSpec& o = i < spec.inputs.size() ? spec.inputs[i] : spec.outputs[i - spec.inputs.size()];
    const size_t bytes = static_cast<size_t>(cu::operand_extent(spec, o)) * ir::dtype_size(o.dtype);
    check(data[i], bytes, fmt::format("kernel '{}' operand {}", spec.name, i), device);
  }
  if (!spec.flags.empty()) check(flags, spec.flags.size() * sizeof(int32_t), fmt::format("kernel '{}' flags", spec.name), device);
}

// ---- CPU -----------------------------------------------------------------------------------

namespace {

// The CPU JIT's code for a spec: the CPU's kernels, and the emulated device's.
struct CpuKernel final : DeviceKernel {
  std::shared_ptr<const CompiledKernel> compiled;
};

std::shared_ptr<const DeviceKernel> cpu_kernel(KernelCache& cache, const codegen::KernelSpec& spec, bool* compiled_now) {
  auto k = std::make_shared<CpuKernel>();
  k->compiled = cache.get(spec, compiled_now);
  return k;
}

// Runs a CpuKernel on the host: device addresses are host addresses on both host devices.
void run_on_host(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
                 DevicePtr flags, ThreadPool& pool) {
  thread_local std::vector<void*> pointers;
  pointers.clear();
  for (DevicePtr p : data) pointers.push_back(reinterpret_cast<void*>(p));
  const std::span<int32_t> flag_view(reinterpret_cast<int32_t*>(flags), flags ? spec.flags.size() : 0);
  run_kernel(*static_cast<const CpuKernel&>(kernel).compiled, spec, pointers, {}, flag_view, pool);
}

int compile_all(KernelCache& cache, std::span<const codegen::KernelSpec* const> specs) {
  int compiled = 0;
  for (const codegen::KernelSpec* s : specs) {
    bool now = false;
    cache.get(*s, &now);
    compiled += now;
  }
  return compiled;
}

// Allocations from this size on get transparent huge pages: a first touch then faults 2 MiB
// at once instead of 4 KiB (a 256 MiB arena: about 10 ms instead of 0.4 s).
constexpr size_t kHugePageThreshold = size_t{4} << 20;
constexpr size_t kPageBytes = 4096;

// AddressSanitizer sees an arena as one allocation, so in sanitizer builds the CPU device
// checks every launch against the buffers the executor declared, as the emulated device does.
#ifdef __SANITIZE_ADDRESS__
constexpr bool kCheckCpuLaunches = true;
#else
constexpr bool kCheckCpuLaunches = false;
#endif

}  // namespace

CpuDevice::CpuDevice(KernelCache* cache, ThreadPool* pool)
    : cache_(cache ? cache : &KernelCache::global()), pool_(pool ? pool : &ThreadPool::global()) {}

CpuDevice::~CpuDevice() {
  for (const auto& [p, a] : live_.live()) munmap(reinterpret_cast<void*>(p), a.bytes);
}

CpuDevice& cpu_device() {
  static CpuDevice* device = new CpuDevice();  // never destroyed: executables may outlive statics
  return *device;
}

DevicePtr CpuDevice::alloc(size_t bytes) {
  if (bytes == 0) fail("cpu: allocation of 0 bytes");
  if (fault_strikes(Fault::alloc)) fail("cpu: out of memory allocating {} bytes {}", bytes, injected_fault_note());
  const size_t mapped = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cpu: out of memory allocating {} bytes", bytes);
  if (mapped >= kHugePageThreshold) madvise(p, mapped, MADV_HUGEPAGE);
  // Pre-fault now, once, rather than on some run's first write to each page.
  auto* bytes_of = static_cast<volatile unsigned char*>(p);
  for (size_t i = 0; i < mapped; i += kPageBytes) bytes_of[i] = 0;
  std::lock_guard lock(mutex_);
  live_.add(reinterpret_cast<DevicePtr>(p), mapped);
  ++allocations_;
  return reinterpret_cast<DevicePtr>(p);
}

void CpuDevice::free(DevicePtr buffer) noexcept {
  size_t mapped = 0;
  {
    std::lock_guard lock(mutex_);
    mapped = live_.remove(buffer, "cpu");
  }
  munmap(reinterpret_cast<void*>(buffer), mapped);
}

int64_t CpuDevice::allocations() const {
  std::lock_guard lock(mutex_);
  return allocations_;
}

void CpuDevice::upload(DevicePtr dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(reinterpret_cast<void*>(dst), host, bytes);
}

void CpuDevice::download(void* host, DevicePtr src, size_t bytes) {
  if (bytes) std::memcpy(host, reinterpret_cast<const void*>(src), bytes);
}

void CpuDevice::declare_regions(DevicePtr base, std::span<const DeviceRegion> regions) {
  if (!kCheckCpuLaunches) return;
  std::lock_guard lock(mutex_);
  live_.declare(base, regions, "cpu");
}

int CpuDevice::precompile(std::span<const codegen::KernelSpec* const> specs) { return compile_all(*cache_, specs); }

std::shared_ptr<const DeviceKernel> CpuDevice::prepare(const codegen::KernelSpec& spec, bool* compiled_now) {
  return cpu_kernel(*cache_, spec, compiled_now);
}

void CpuDevice::launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
                       DevicePtr flags) {
  if (kCheckCpuLaunches && spec.num_elements() > 0) {
    // Only accesses into arenas are checked; other addresses are the caller's tensors,
    // which AddressSanitizer watches itself.
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
      const auto it = live_.live().upper_bound(data[i]);
      if (it == live_.live().begin() || data[i] >= std::prev(it)->first + std::prev(it)->second.bytes) continue;
      const codegen::OperandSpec& o = i < spec.inputs.size() ? spec.inputs[i] : spec.outputs[i - spec.inputs.size()];
      live_.check(data[i], static_cast<size_t>(cu::operand_extent(spec, o)) * ir::dtype_size(o.dtype),
                  fmt::format("kernel '{}' operand {}", spec.name, i), "cpu");
    }
  }
  run_on_host(kernel, spec, data, flags, *pool_);
}

// ---- Emulated CUDA --------------------------------------------------------------------------

EmulatedDevice::EmulatedDevice(KernelCache* cache, ThreadPool* pool)
    : cache_(cache ? cache : &KernelCache::global()), pool_(pool ? pool : &ThreadPool::global()) {}

EmulatedDevice::~EmulatedDevice() {
  for (const auto& [p, a] : live_.live()) std::free(reinterpret_cast<void*>(p));
}

EmulatedDeviceCounters EmulatedDevice::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

DevicePtr EmulatedDevice::alloc(size_t bytes) {
  if (bytes == 0) fail("cuda-emulated: allocation of 0 bytes");
  if (fault_strikes(Fault::alloc))
    fail("cuda-emulated: out of memory allocating {} bytes {}", bytes, injected_fault_note());
  // 64-byte aligned like host tensors and cuMemAlloc's (256-byte) buffers, so that kernels
  // take the same aligned paths.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail("cuda-emulated: out of memory allocating {} bytes", bytes);
  std::memset(p, kPoison, bytes);
  std::lock_guard lock(mutex_);
  live_.add(reinterpret_cast<DevicePtr>(p), bytes);
  ++counters_.allocs;
  counters_.live_bytes += static_cast<int64_t>(bytes);
  return reinterpret_cast<DevicePtr>(p);
}

void EmulatedDevice::free(DevicePtr buffer) noexcept {
  {
    std::lock_guard lock(mutex_);
    counters_.live_bytes -= static_cast<int64_t>(live_.remove(buffer, "cuda-emulated"));
    ++counters_.frees;
  }
  std::free(reinterpret_cast<void*>(buffer));
}

void EmulatedDevice::declare_regions(DevicePtr base, std::span<const DeviceRegion> regions) {
  std::lock_guard lock(mutex_);
  live_.declare(base, regions, "cuda-emulated");
}

void EmulatedDevice::upload(DevicePtr dst, const void* host, size_t bytes) {
  std::lock_guard lock(mutex_);
  live_.check(dst, bytes, "upload", "cuda-emulated");
  std::memcpy(reinterpret_cast<void*>(dst), host, bytes);
  ++counters_.uploads;
  counters_.upload_bytes += static_cast<int64_t>(bytes);
}

void EmulatedDevice::download(void* host, DevicePtr src, size_t bytes) {
  std::lock_guard lock(mutex_);
  live_.check(src, bytes, "download", "cuda-emulated");
  std::memcpy(host, reinterpret_cast<const void*>(src), bytes);
  ++counters_.downloads;
  counters_.download_bytes += static_cast<int64_t>(bytes);
}

int EmulatedDevice::precompile(std::span<const codegen::KernelSpec* const> specs) { return compile_all(*cache_, specs); }

std::shared_ptr<const DeviceKernel> EmulatedDevice::prepare(const codegen::KernelSpec& spec, bool* compiled_now) {
  return cpu_kernel(*cache_, spec, compiled_now);
}

void EmulatedDevice::launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec,
                            std::span<const DevicePtr> data, DevicePtr flags) {
  if (spec.num_elements() == 0) return;  // nothing to read or write, as on a GPU
  {
    std::lock_guard lock(mutex_);
    live_.check_launch(spec, data, flags, "cuda-emulated");
    ++counters_.launches;
  }
  run_on_host(kernel, spec, data, flags, *pool_);
}

}  // namespace ampfuse::runtime
