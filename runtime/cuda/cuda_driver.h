// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1"): never linked, so
// every ampfuse binary starts on machines without a GPU, and only what needs a device
// fails, with one clear message ("no CUDA driver: libcuda.so.1 not found", "no CUDA
// device").
//
// One process-wide device (ordinal 0) with its primary context, opened on first use.
// Kernels come from codegen/cuda_emitter.h through NVRTC (nvrtc_compiler.h) and are cached
// per process by cuda_cache_key().
#pragma once

#include "codegen/kernel_spec.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace ampfuse::runtime::cuda {

// "" when a CUDA device can be used, else the reason it cannot (the same text every error
// of this file starts with). Never throws; the first call loads the driver.
std::string cuda_available();

struct DeviceProperties {
  std::string name;
  int arch = 0;  // compute capability * 10
  int multiprocessors = 0;
  int max_threads_per_multiprocessor = 0;
  int max_threads_per_block = 0;
  int max_grid_x = 0;
  int memory_clock_khz = 0;  // 0 when the driver does not report it
  int bus_width_bits = 0;
  int driver_version = 0;    // 13000 for 13.0
  // 2 (double data rate) * memory clock * bus width / 8, in GB/s; 0 when unknown.
  double peak_bandwidth_gbs() const;
};

// Device 0. Throws ampfuse::Error with cuda_available()'s reason when there is none.
const DeviceProperties& cuda_device();

// Device memory, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint64_t ptr() const { return ptr_; }
  size_t size() const { return size_; }
  void upload(const void* host, size_t bytes);
  void download(void* host, size_t bytes) const;
  void zero();

 private:
  uint64_t ptr_ = 0;
  size_t size_ = 0;
};

// Copies between host memory and any device address (inside a DeviceBuffer); copies to
// the host wait for the kernels launched before them.
void copy_to_device(uint64_t device, const void* host, size_t bytes);
void copy_to_host(void* host, uint64_t device, size_t bytes);

// A compiled and loaded kernel for one signature on device 0.
struct CudaKernel {
  std::string key;   // cuda_cache_key
  std::string name;  // the __global__ function
  void* function = nullptr;  // CUfunction
  int vector_width = 1;
  int registers = 0;  // from ptxas -v, when reported
  double compile_seconds = 0;
};

// The kernel for spec's signature, compiled for the device's architecture on first request
// and cached by key. Throws when there is no device or compilation fails.
std::shared_ptr<const CudaKernel> cuda_kernel(const codegen::KernelSpec& spec);

// Compiles every spec whose kernel is not cached yet, 16 kernels to an NVRTC program (one
// module each), programs in parallel on every core, then caches each: much faster than
// one program per kernel when there are many.
void cuda_precompile(const std::vector<codegen::KernelSpec>& specs);

// Launches `kernel` over spec's iteration space on the default stream, asynchronously.
// `data`: device pointers, inputs then outputs, addressed with spec's strides; `flags`: a
// device array of spec.flags.size() ints (0 when there are none).
void launch_cuda_kernel(const CudaKernel& kernel, const codegen::KernelSpec& spec, std::span<const uint64_t> data,
                        std::span<const double> params = {}, uint64_t flags = 0);
void cuda_synchronize();

// Milliseconds `fn` takes on the device's default stream, timed with events.
double cuda_time_ms(const std::function<void()>& fn);

// Elements an operand's buffer needs: its largest offset plus one (0 for an empty space).
int64_t operand_extent(const codegen::KernelSpec& spec, const codegen::OperandSpec& o);

// The whole path for tests: copies the host buffers in (outputs too, so that elements a
// strided output skips keep their values), compiles, launches, copies outputs and flags
// back. Buffers hold operand_extent() elements each. `flags` are ORed into (not cleared).
void run_cuda_kernel(const codegen::KernelSpec& spec, std::span<const void* const> inputs,
                     std::span<void* const> outputs, std::span<const double> params = {},
                     std::span<int32_t> flags = {});

}  // namespace ampfuse::runtime::cuda
