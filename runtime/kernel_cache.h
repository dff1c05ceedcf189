// Compiled CPU kernels, in memory, keyed by the JIT's target and KernelSpec::cache_key().
//
// The key holds the target CPU (codegen::JitTarget::cache_tag, so that code for one ISA is
// never taken for another's) and the spec's structure, dtypes, rank and layout pattern but
// no sizes, so running a graph again with a new batch size finds every kernel compiled. A
// lookup computes the key and searches a hash map: microseconds. Concurrent requests for
// one missing key compile it once; the others wait for that compile.
#pragma once

#include "codegen/kernel_abi.h"
#include "codegen/kernel_spec.h"
#include "runtime/thread_pool.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>

namespace ampfuse::runtime {

struct CompiledKernel {
  codegen::KernelFn fn = nullptr;
  std::string key;  // "<target cache tag>|<spec cache key>"
  std::string symbol;
  double compile_seconds = 0;  // emit + optimize + machine code
};

struct KernelCacheStats {
  int64_t compilations = 0;
  int64_t hits = 0;
  int64_t failures = 0;
  double compile_seconds = 0;
};

class KernelCache {
 public:
  // Compiles for codegen::jit_target(): throws its Error when AMPFUSE_CPU is unknown or
  // names a level this CPU cannot run, before any kernel is asked for.
  KernelCache();
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  static KernelCache& global();

  // The kernel for spec's signature, compiled on first request. Throws ampfuse::Error for
  // an invalid spec or when compilation fails (every later request for that key throws
  // the same error without recompiling; callers fall back to the interpreter).
  std::shared_ptr<const CompiledKernel> get(const codegen::KernelSpec& spec);

  KernelCacheStats stats() const;

 private:
  struct Entry;
  const std::string target_tag_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  KernelCacheStats stats_;
};

// Runs `kernel` (compiled for spec's signature) over spec's iteration space, split across
// `pool`. `data`: a base pointer per input then per output, addressed with spec's
// strides; `params`: spec.num_params values; `flags`: one per spec.flags entry, set to 1
// when a non-finite value is found (never cleared: zero them first). Outputs must not
// overlap inputs or each other. Throws ampfuse::Error when the counts do not match.
void run_kernel(const CompiledKernel& kernel, const codegen::KernelSpec& spec, std::span<void* const> data,
                std::span<const double> params = {}, std::span<int32_t> flags = {},
                ThreadPool& pool = ThreadPool::global());

}  // namespace ampfuse::runtime
