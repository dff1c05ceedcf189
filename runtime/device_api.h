// A device for the executor (engine/execution/executor.h): memory, transfers, kernels,
// launch. Three of them:
//
//   cpu_device(), CpuDevice  host memory, kernels from the CPU JIT (KernelCache) run on the
//                            thread pool; device addresses are host addresses, so the
//                            executor keeps every value in one memory and never copies
//   cuda_device_api()        device 0 through runtime/cuda/cuda_driver.h (NVRTC kernels)
//   EmulatedDevice           "device memory" in separate host allocations, kernels from the
//                            CPU JIT of the same KernelSpec
//
// The emulation exists so that the device path (what is uploaded, downloaded, aliased and
// launched where) is tested on machines without a GPU: its memory is never the host
// tensors' memory, new allocations are filled with a poison pattern, and every launch and
// copy is checked to stay inside one buffer the executor declared, so a missing upload or
// download, a buffer reused while still needed, or a pointer past its buffer shows up as a
// wrong value or an error. `ampfuse run --device cuda-emulated` runs it from the CLI.
//
// Every method may be called from several threads at once (runs of one executable).
#pragma once

#include "codegen/kernel_spec.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime {

class KernelCache;
class ThreadPool;

// Compiled code for one KernelSpec signature on a device (each device subclasses it).
struct DeviceKernel {
  virtual ~DeviceKernel() = default;
};

// Device addresses are integers: the executor adds byte offsets to them (arena slots,
// slices) but never dereferences them, unless the device is host_addressable().
using DevicePtr = uint64_t;

// A part of an allocation that the executor uses as one buffer: bytes [offset, offset + bytes).
struct DeviceRegion {
  size_t offset = 0;
  size_t bytes = 0;
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual std::string name() const = 0;
  // Whether device addresses are host addresses that host code may read and write (the
  // CPU): then values need no copies between the host and the device.
  virtual bool host_addressable() const { return false; }

  // `bytes` > 0; 64-byte aligned at least. Throws ampfuse::Error when the device is out of
  // memory.
  virtual DevicePtr alloc(size_t bytes) = 0;
  virtual void free(DevicePtr buffer) noexcept = 0;
  // Copies to or from any address inside a live allocation. Downloads wait for the kernels
  // launched before them.
  virtual void upload(DevicePtr dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, DevicePtr src, size_t bytes) = 0;
  // The buffers the executor carves out of allocation `base` (regions may overlap: they are
  // used at different times). A device may check every access against them.
  virtual void declare_regions(DevicePtr base, std::span<const DeviceRegion> regions) {}

  // Compiles every spec whose kernel is not compiled yet, together where the device can
  // (much faster than one by one); returns how many it compiled. Throws when one fails
  // (then prepare() one by one tells which).
  virtual int precompile(std::span<const codegen::KernelSpec* const> specs) = 0;
  // The kernel for spec's signature, compiled if needed (then *compiled_now is set).
  // Throws ampfuse::Error when it cannot be compiled.
  virtual std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec, bool* compiled_now = nullptr) = 0;
  // Runs `kernel` (from prepare) over spec's iteration space, asynchronously, in order with
  // every other call from the same thread. `data`: device addresses of the inputs then the
  // outputs, addressed with spec's strides (an output may be an input's own address when
  // both are read and written element by element in the same order); `flags`: a device
  // array of spec.flags.size() int32 (0 without flags), set to 1 when a non-finite value
  // is seen, never cleared.
  virtual void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
                      DevicePtr flags) = 0;
  virtual void synchronize() = 0;
};

// Live allocations and the regions declared in them, to check that every access stays
// inside one buffer: always on the emulated device, and on the CPU in sanitizer builds
// (AddressSanitizer cannot see the buffers inside an arena). Not thread-safe: callers lock.
class RegionMap {
 public:
  void add(DevicePtr base, size_t bytes) { live_.emplace(base, Allocation{bytes, {}}); }
  // The allocation's bytes; throws when `base` is not the start of a live one.
  size_t remove(DevicePtr base, const char* device);
  void declare(DevicePtr base, std::span<const DeviceRegion> regions, const char* device);
  // Throws unless [p, p + bytes) lies inside one live allocation, and inside one of its
  // declared regions if it has any; `what` names the access.
  void check(DevicePtr p, size_t bytes, const std::string& what, const char* device) const;
  // Every operand of a launch (and its flags).
  void check_launch(const codegen::KernelSpec& spec, std::span<const DevicePtr> data, DevicePtr flags,
                    const char* device) const;
  bool empty() const { return live_.empty(); }
  const auto& live() const { return live_; }

 private:
  struct Allocation {
    size_t bytes = 0;
    std::vector<DeviceRegion> regions;  // declared by the executor; empty: the whole allocation
  };
  std::map<DevicePtr, Allocation> live_;  // by start address
};

// The CPU: host memory (pre-faulted, huge pages advised for large allocations), JIT kernels
// from `cache` run on `pool`.
class CpuDevice final : public DeviceApi {
 public:
  // null: KernelCache::global(), ThreadPool::global().
  explicit CpuDevice(KernelCache* cache = nullptr, ThreadPool* pool = nullptr);
  ~CpuDevice() override;

  std::string name() const override { return "cpu"; }
  bool host_addressable() const override { return true; }
  DevicePtr alloc(size_t bytes) override;
  void free(DevicePtr buffer) noexcept override;
  void upload(DevicePtr dst, const void* host, size_t bytes) override;
  void download(void* host, DevicePtr src, size_t bytes) override;
  void declare_regions(DevicePtr base, std::span<const DeviceRegion> regions) override;
  int precompile(std::span<const codegen::KernelSpec* const> specs) override;
  std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec, bool* compiled_now = nullptr) override;
  void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
              DevicePtr flags) override;
  void synchronize() override {}

  // Allocations made so far (the executor's arenas): tests count them.
  int64_t allocations() const;

 private:
  KernelCache* cache_;
  ThreadPool* pool_;
  mutable std::mutex mutex_;
  RegionMap live_;  // mapped bytes per allocation; regions checked in sanitizer builds
  int64_t allocations_ = 0;
};

// The process's CPU device (global kernel cache and thread pool).
CpuDevice& cpu_device();

// Device 0 through the CUDA driver. Throws ampfuse::Error with cuda::cuda_available()'s
// reason when there is no usable device.
std::unique_ptr<DeviceApi> cuda_device_api();

// What an EmulatedDevice did, for tests.
struct EmulatedDeviceCounters {
  int64_t allocs = 0, frees = 0;
  int64_t uploads = 0, upload_bytes = 0;
  int64_t downloads = 0, download_bytes = 0;
  int64_t launches = 0;
  int64_t live_bytes = 0;
};

class EmulatedDevice final : public DeviceApi {
 public:
  // Every byte of a new buffer: 0x7B7B is 61280 in f16, 0x7B7B7B7B about 1.3e36 in f32 and
  // bf16, finite and far from anything a test computes (NaN would compare equal to NaN).
  static constexpr unsigned char kPoison = 0x7B;

  // null: KernelCache::global(), ThreadPool::global().
  explicit EmulatedDevice(KernelCache* cache = nullptr, ThreadPool* pool = nullptr);
  ~EmulatedDevice() override;

  std::string name() const override { return "cuda-emulated (CPU kernels, separate memory)"; }
  DevicePtr alloc(size_t bytes) override;
  void free(DevicePtr buffer) noexcept override;
  void upload(DevicePtr dst, const void* host, size_t bytes) override;
  void download(void* host, DevicePtr src, size_t bytes) override;
  void declare_regions(DevicePtr base, std::span<const DeviceRegion> regions) override;
  int precompile(std::span<const codegen::KernelSpec* const> specs) override;
  std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec, bool* compiled_now = nullptr) override;
  void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
              DevicePtr flags) override;
  void synchronize() override {}

  EmulatedDeviceCounters counters() const;

 private:
  KernelCache* cache_;
  ThreadPool* pool_;
  mutable std::mutex mutex_;
  RegionMap live_;
  EmulatedDeviceCounters counters_;
};

}  // namespace ampfuse::runtime
