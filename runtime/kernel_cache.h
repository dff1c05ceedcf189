// Compiled CPU kernels, in memory, keyed by the JIT's target and KernelSpec::cache_key().
//
// The key holds the target CPU (codegen::JitTarget::cache_tag, so that code for one ISA is
// never taken for another's) and the spec's structure, dtypes, rank and layout pattern but
// no sizes, so running a graph again with a new batch size finds every kernel compiled. A
// lookup computes the key and searches a hash map: microseconds. Concurrent requests for
// one missing key compile it once; the others wait for that compile.
//
// The cache keeps the most recently used kernels, AMPFUSE_KERNELS_IN_MEMORY of them
// (kernels_in_memory()), and lets go of older ones: their code leaves the process once no
// executable holds them either (runtime/jit.h), so a process that compiles ever new kernels
// (a server, the fuzzer) does not accumulate code until Linux's cap on memory maps stops
// it. A kernel asked for again after that is compiled again, or loaded from the disk cache.
//
// Behind the map, the JIT's compiler (jit_compile) asks the disk cache (runtime/disk_cache.h,
// AMPFUSE_CACHE_DIR) first: a kernel another process compiled is loaded from its object
// file, with no LLVM optimization or code generation.
#pragma once

#include "codegen/kernel_abi.h"
#include "codegen/kernel_spec.h"
#include "runtime/disk_cache.h"
#include "runtime/thread_pool.h"

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

namespace ampfuse::runtime {

struct CompiledKernel {
  codegen::KernelFn fn = nullptr;
  std::shared_ptr<const void> code;  // keeps fn's machine code loaded (JitCode::owner)
  // Compiled with the streaming loops (codegen::KernelSignature::streams, part of the key):
  // launchers ask for non-temporal stores where the outputs are aligned.
  bool streams = false;
  std::string key;  // "<target cache tag>|<spec cache key>"
  std::string symbol;
  double compile_seconds = 0;  // emit + optimize + machine code (or the disk load)
  bool from_disk = false;      // loaded from the disk cache's object file
};

struct KernelCacheStats {
  int64_t compilations = 0;  // kernels not found in memory: compiled, or loaded from disk
  int64_t disk_loads = 0;    // of those, loaded from the disk cache
  int64_t hits = 0;          // found in memory
  int64_t failures = 0;
  int64_t evictions = 0;     // kernels let go of, the least recently used past the capacity
  double compile_seconds = 0;
};

inline constexpr int64_t kDefaultKernelsInMemory = 1024;
inline constexpr int64_t kMinDefaultKernelsInMemory = 64;

// AMPFUSE_KERNELS_IN_MEMORY when set (an Error naming it unless a count from 1 to 2^31),
// else kDefaultKernelsInMemory, or an eighth of the JIT's map limit (jit_map_limit()) when
// that is less (but at least kMinDefaultKernelsInMemory). Read once.
int64_t kernels_in_memory();

class KernelCache {
 public:
  // What turns a spec into code: the JIT (jit_compile) unless a test substitutes one.
  using Compiler = std::function<std::shared_ptr<const CompiledKernel>(const codegen::KernelSpec&, std::string key)>;

  // Compiles for codegen::jit_target(): throws its Error when AMPFUSE_CPU is unknown or
  // names a level this CPU cannot run, and AMPFUSE_JIT_MAX_MAPS's Error when it is
  // malformed (runtime/memory_maps.h), before any kernel is asked for. Without an argument
  // with the process's disk cache (DiskCache::process()); `disk` null: none. Keeps
  // `capacity` kernels (at least 1).
  KernelCache();
  explicit KernelCache(DiskCache* disk);
  explicit KernelCache(Compiler compile, int64_t capacity = kernels_in_memory());
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  static KernelCache& global();

  // The kernel for spec's signature, compiled on first request (then *compiled_now is
  // true, whether LLVM compiled it or the disk cache had it: CompiledKernel::from_disk;
  // false when found in memory). Throws ampfuse::Error for an invalid spec or when
  // compilation fails; requests
  // waiting for that compile get the same error, and a later request tries again (a
  // failure may be passing: out of memory, a full disk).
  std::shared_ptr<const CompiledKernel> get(const codegen::KernelSpec& spec, bool* compiled_now = nullptr);

  KernelCacheStats stats() const;
  int64_t size() const;  // kernels held, compiles in flight included

 private:
  struct Entry;
  void evict_past_capacity();  // with mutex_ held

  Compiler compile_;
  const std::string target_tag_;
  const int64_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  std::list<std::string> recency_;  // entries_' keys, the most recently used first
  KernelCacheStats stats_;
};

// Compiles `spec` with the process's JIT (runtime/jit.h). With `disk`, loads the object
// file stored under the kernel's key when there is one (a bad entry or one that does not
// link is warned about and compiled afresh), else stores the compiled one (a failed store
// is warned about; the kernel is still returned). Throws ampfuse::Error when LLVM fails.
std::shared_ptr<const CompiledKernel> jit_compile(const codegen::KernelSpec& spec, std::string key,
                                                  DiskCache* disk = nullptr);


// How run_kernel splits a launch, and the multi-tensor launcher of engine/training too:
// below kLaunchMinElementsPerThread elements per thread, waking a worker costs more than it
// saves; chunk boundaries fall on multiples of kLaunchChunkAlign elements, so every
// operand's chunk starts on a 64-byte line when its base does (threads never write the same
// line, vector loops start aligned); a kernel whose outputs pass kLaunchStreamingBytes
// (CompiledKernel::streams) writes them with non-temporal stores when they are 64-byte
// aligned (codegen/kernel_abi.h says why).
inline constexpr int64_t kLaunchMinElementsPerThread = 16384;
inline constexpr int64_t kLaunchChunkAlign = 64;
inline constexpr int64_t kLaunchStreamingBytes = codegen::kStreamingOutputBytes;
inline constexpr uintptr_t kLaunchStreamingAlign = 64;

// Runs `kernel` (compiled for spec's signature) over spec's iteration space, split across
// `pool` (a row kernel, KernelSpec::row: whole rows, at least kLaunchMinElementsPerThread
// elements a thread). `data`: a base pointer per input then per output, addressed with spec's
// strides; `params`: spec.num_params values; `flags`: one per spec.flags entry, set to 1
// when a non-finite value is found (never cleared: zero them first). Outputs must not
// overlap inputs or each other. Throws ampfuse::Error when the counts do not match.
void run_kernel(const CompiledKernel& kernel, const codegen::KernelSpec& spec, std::span<void* const> data,
                std::span<const double> params = {}, std::span<int32_t> flags = {},
                ThreadPool& pool = ThreadPool::global());

}  // namespace ampfuse::runtime
