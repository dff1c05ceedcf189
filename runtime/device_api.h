// A device for engine/execution/device_executor.h: memory, transfers, kernels, launch. Two of them:
//
//   cuda_device_api()      device 0 through runtime/cuda/cuda_driver.h (NVRTC kernels)
//   EmulatedDevice         "device memory" in separate host allocations, kernels from the
//                          CPU JIT (KernelCache) of the same KernelSpec
//
// The emulation exists so that the device path (what is uploaded, downloaded, aliased,
// pooled and launched where) is tested on machines without a GPU: its memory is never the
// host tensors' memory, new buffers are filled with a poison pattern, and every launch and
// copy is checked to stay inside one live allocation, so a missing upload or download, a
// buffer reused while still needed, or a pointer past its buffer shows up as a wrong value
// or an error. `ampfuse run --device cuda-emulated` runs it from the CLI.
#pragma once

#include "codegen/kernel_spec.h"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

namespace ampfuse::runtime {

class KernelCache;
class ThreadPool;

// Compiled code for one KernelSpec signature on a device (each device subclasses it).
struct DeviceKernel {
  virtual ~DeviceKernel() = default;
};

// Device addresses are integers: the executor adds byte offsets to them (slices) but never
// dereferences them.
using DevicePtr = uint64_t;

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual std::string name() const = 0;

  // `bytes` > 0 (the executor never asks for empty buffers). Throws ampfuse::Error when
  // the device is out of memory.
  virtual DevicePtr alloc(size_t bytes) = 0;
  virtual void free(DevicePtr buffer) noexcept = 0;
  // Copies to or from the start of a buffer alloc() returned. Downloads wait for the
  // kernels launched before them.
  virtual void upload(DevicePtr buffer, const void* host, size_t bytes) = 0;
  virtual void download(void* host, DevicePtr buffer, size_t bytes) = 0;

  // Compiles every spec whose kernel is not compiled yet, together where the device can
  // (much faster than one by one); returns how many it compiled. Throws when one fails
  // (then prepare() one by one tells which).
  virtual int precompile(std::span<const codegen::KernelSpec* const> specs) = 0;
  // The kernel for spec's signature, compiled if needed. Throws ampfuse::Error when it
  // cannot be compiled.
  virtual std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec) = 0;
  // Runs `kernel` (from prepare) over spec's iteration space, asynchronously, in order with
  // every other call. `data`: device addresses of the inputs then the outputs, addressed with
  // spec's strides; `flags`: a device array of spec.flags.size() int32 (0 without flags),
  // set to 1 when a non-finite value is seen, never cleared.
  virtual void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
                      DevicePtr flags) = 0;
  virtual void synchronize() = 0;
};

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
  void upload(DevicePtr buffer, const void* host, size_t bytes) override;
  void download(void* host, DevicePtr buffer, size_t bytes) override;
  int precompile(std::span<const codegen::KernelSpec* const> specs) override;
  std::shared_ptr<const DeviceKernel> prepare(const codegen::KernelSpec& spec) override;
  void launch(const DeviceKernel& kernel, const codegen::KernelSpec& spec, std::span<const DevicePtr> data,
              DevicePtr flags) override;
  void synchronize() override {}

  const EmulatedDeviceCounters& counters() const { return counters_; }

 private:
  // Throws unless [p, p + bytes) lies inside one live allocation; `what` names the access.
  void check_range(DevicePtr p, size_t bytes, const std::string& what) const;
  // The allocation that starts at `buffer` with at least `bytes`, else throws.
  void check_buffer(DevicePtr buffer, size_t bytes, const char* what) const;

  KernelCache* cache_;
  ThreadPool* pool_;
  std::map<DevicePtr, size_t> live_;  // start -> bytes
  EmulatedDeviceCounters counters_;
};

}  // namespace ampfuse::runtime
