// The two devices of runtime/device_api.h: CUDA device 0 and the emulated device.
#include "runtime/device_api.h"

#include "ir/error.h"
#include "runtime/cuda/cuda_driver.h"
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
    buffers_.emplace(p, std::move(buffer));
    return p;
  }
  void free(DevicePtr buffer) noexcept override { buffers_.erase(buffer); }
  void upload(DevicePtr buffer, const void* host, size_t bytes) override { find(buffer).upload(host, bytes); }
  void download(void* host, DevicePtr buffer, size_t bytes) override { find(buffer).download(host, bytes); }

  int precompile(std::span<const codegen::KernelSpec* const> specs) override {
    std::vector<codegen::KernelSpec> copies;
    for (const codegen::KernelSpec* s : specs) copies.push_back(*s);
    cu::cuda_precompile(copies);
    int compiled = 0;
    for (const codegen::KernelSpec* s : specs) compiled += remember(cu::cuda_kernel(*s).get());
    return compiled;
  }
  std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec) override {
    auto k = std::make_shared<CudaDeviceKernel>();
    k->kernel = cu::cuda_kernel(spec);
    remember(k->kernel.get());
    return k;
  }
  void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
              DevicePtr flags) override {
    cu::launch_cuda_kernel(*static_cast<const CudaDeviceKernel&>(kernel).kernel, spec, data, {}, flags);
  }
  void synchronize() override { cu::cuda_synchronize(); }

 private:
  cu::DeviceBuffer& find(DevicePtr buffer) {
    const auto it = buffers_.find(buffer);
    if (it == buffers_.end()) fail("cuda: {:#x} is not the start of a device buffer", buffer);
    return *it->second;
  }
  // The driver caches kernels per process without saying which it compiled just now: a
  // kernel this process's devices never returned before counts as compiled now.
  static int remember(const cu::CudaKernel* k) {
    static std::mutex mutex;
    static std::set<const cu::CudaKernel*> seen;
    std::lock_guard<std::mutex> lock(mutex);
    return seen.insert(k).second ? 1 : 0;
  }

  std::unordered_map<DevicePtr, std::unique_ptr<cu::DeviceBuffer>> buffers_;
};

struct EmulatedKernel final : DeviceKernel {
  std::shared_ptr<const CompiledKernel> compiled;
};

}  // namespace

std::unique_ptr<DeviceApi> cuda_device_api() {
  const std::string why = cu::cuda_available();
  if (!why.empty()) fail("{}", why);
  return std::make_unique<CudaDevice>();
}

EmulatedDevice::EmulatedDevice(KernelCache* cache, ThreadPool* pool)
    : cache_(cache ? cache : &KernelCache::global()), pool_(pool ? pool : &ThreadPool::global()) {}

EmulatedDevice::~EmulatedDevice() {
  for (const auto& [p, bytes] : live_) std::free(reinterpret_cast<void*>(p));
}

DevicePtr EmulatedDevice::alloc(size_t bytes) {
  if (bytes == 0) fail("cuda-emulated: allocation of 0 bytes");
  // 64-byte aligned like host tensors and cuMemAlloc's (256-byte) buffers, so that kernels
  // take the same aligned paths.
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) fail("cuda-emulated: out of memory allocating {} bytes", bytes);
  std::memset(p, kPoison, bytes);
  live_.emplace(reinterpret_cast<DevicePtr>(p), bytes);
  ++counters_.allocs;
  counters_.live_bytes += static_cast<int64_t>(bytes);
  return reinterpret_cast<DevicePtr>(p);
}

void EmulatedDevice::free(DevicePtr buffer) noexcept {
  const auto it = live_.find(buffer);
  if (it == live_.end()) {
    std::fprintf(stderr, "cuda-emulated: free of %#llx, which is not a live buffer\n",
                 static_cast<unsigned long long>(buffer));
    std::abort();  // a double free: the executor's bookkeeping is broken
  }
  counters_.live_bytes -= static_cast<int64_t>(it->second);
  ++counters_.frees;
  live_.erase(it);
  std::free(reinterpret_cast<void*>(buffer));
}

void EmulatedDevice::check_range(DevicePtr p, size_t bytes, const std::string& what) const {
  auto it = live_.upper_bound(p);
  if (it == live_.begin() || p >= std::prev(it)->first + std::prev(it)->second)
    fail("cuda-emulated: {} at {:#x} is outside every buffer", what, p);
  --it;
  if (p + bytes > it->first + it->second)
    fail("cuda-emulated: {} reads or writes {} bytes at offset {} of a {}-byte buffer", what, bytes, p - it->first,
         it->second);
}

void EmulatedDevice::check_buffer(DevicePtr buffer, size_t bytes, const char* what) const {
  const auto it = live_.find(buffer);
  if (it == live_.end()) fail("cuda-emulated: {} of {:#x}, which is not the start of a live buffer", what, buffer);
  if (bytes > it->second) fail("cuda-emulated: {} of {} bytes into a {}-byte buffer", what, bytes, it->second);
}

void EmulatedDevice::upload(DevicePtr buffer, const void* host, size_t bytes) {
  check_buffer(buffer, bytes, "upload");
  std::memcpy(reinterpret_cast<void*>(buffer), host, bytes);
  ++counters_.uploads;
  counters_.upload_bytes += static_cast<int64_t>(bytes);
}

void EmulatedDevice::download(void* host, DevicePtr buffer, size_t bytes) {
  check_buffer(buffer, bytes, "download");
  std::memcpy(host, reinterpret_cast<const void*>(buffer), bytes);
  ++counters_.downloads;
  counters_.download_bytes += static_cast<int64_t>(bytes);
}

int EmulatedDevice::precompile(std::span<const codegen::KernelSpec* const> specs) {
  const int64_t before = cache_->stats().compilations;
  for (const codegen::KernelSpec* s : specs) cache_->get(*s);
  return static_cast<int>(cache_->stats().compilations - before);
}

std::shared_ptr<const DeviceKernel> EmulatedDevice::prepare(const codegen::KernelSpec& spec) {
  auto k = std::make_shared<EmulatedKernel>();
  k->compiled = cache_->get(spec);
  return k;
}

void EmulatedDevice::launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec,
                            std::span<const DevicePtr> data, DevicePtr flags) {
  if (spec.num_elements() == 0) return;  // nothing to read or write, as on a GPU
  const size_t operands = spec.inputs.size() + spec.outputs.size();
  if (data.size() != operands) fail("kernel '{}': {} device buffers for {} operands", spec.name, data.size(), operands);
  if (!spec.flags.empty() && flags == 0) fail("kernel '{}' has flags but no flag buffer was given", spec.name);
  std::vector<void*> host_view;
  for (size_t i = 0; i < operands; ++i) {
    const codegen::OperandSpec& o = i < spec.inputs.size() ? spec.inputs[i] : spec.outputs[i - spec.inputs.size()];
    const size_t bytes = static_cast<size_t>(cu::operand_extent(spec, o)) * ir::dtype_size(o.dtype);
    check_range(data[i], bytes, fmt::format("kernel '{}' operand {}", spec.name, i));
    host_view.push_back(reinterpret_cast<void*>(data[i]));
  }
  std::span<int32_t> flag_view;
  if (!spec.flags.empty()) {
    check_range(flags, spec.flags.size() * sizeof(int32_t), fmt::format("kernel '{}' flags", spec.name));
    flag_view = {reinterpret_cast<int32_t*>(flags), spec.flags.size()};
  }
  ++counters_.launches;
  run_kernel(*static_cast<const EmulatedKernel&>(kernel).compiled, spec, host_view, {}, flag_view, *pool_);
}

}  // namespace ampfuse::runtime
