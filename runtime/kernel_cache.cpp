#include "runtime/kernel_cache.h"

#include "codegen/llvm_emitter.h"
#include "codegen/llvm_target.h"
#include "ir/error.h"
#include "runtime/env_count.h"
#include "runtime/jit.h"
#include "runtime/memory_maps.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>

namespace ampfuse::runtime {

struct KernelCache::Entry {
  std::list<std::string>::iterator recency;  // under KernelCache::mutex_
  bool compiled = false;                     // under KernelCache::mutex_: may be evicted
  std::mutex mutex;
  std::condition_variable ready_cv;
  bool ready = false;
  std::shared_ptr<const CompiledKernel> kernel;
  std::optional<std::string> error;
};

namespace {

std::string next_symbol() {
  static std::atomic<int64_t> counter{0};
  return "ampfuse_kernel_" + std::to_string(counter.fetch_add(1));
}

}  // namespace

namespace {

// A disk entry's payload: the symbol, a NUL, the object file.
std::string pack(const std::string& symbol, std::string_view object) {
  std::string payload = symbol;
  payload += '\0';
  payload += object;
  return payload;
}

}  // namespace

std::shared_ptr<const CompiledKernel> jit_compile(const codegen::KernelSpec& spec, std::string key, DiskCache* disk) {
  const auto start = std::chrono::steady_clock::now();
  auto kernel = std::make_shared<CompiledKernel>();
  Jit& jit = Jit::global();
  // The disk key: the in-memory key (target tag, spec) plus what else changes the code.
  const std::string disk_key = disk ? jit.identity() + " | cpu kernel | " + key : std::string();
  if (disk) {
    if (std::optional<std::string> payload = disk->load(disk_key)) {
      const size_t nul = payload->find('\0');
      try {
        if (nul == std::string::npos) fail("no symbol name");
        kernel->symbol = payload->substr(0, nul);
        JitCode code = jit.load_object(std::string_view(*payload).substr(nul + 1), kernel->symbol);
        kernel->fn = reinterpret_cast<codegen::KernelFn>(code.address);
        kernel->code = std::move(code.owner);
        kernel->from_disk = true;
      } catch (const Error& e) {
        // A whole entry (its checksum held) whose object does not link: written by a
        // broken build, say. Compile afresh; the store below replaces the entry.
        fmt::print(stderr, "ampfuse: warning: kernel cache: the object of kernel '{}' in '{}' does not load ({}); "
                   "recompiling\n", spec.name, disk->path_of(disk_key), e.what());
      }
    }
  }
  if (!kernel->from_disk) {
    kernel->symbol = next_symbol();
    std::string object = jit.emit_object(codegen::build_kernel_module(spec, kernel->symbol));
    JitCode code = jit.load_object(object, kernel->symbol);
    kernel->fn = reinterpret_cast<codegen::KernelFn>(code.address);
    kernel->code = std::move(code.owner);
    if (disk) disk->store(disk_key, pack(kernel->symbol, object));  // only what linked
  } else {
    count_disk_load_on_this_thread();
  }
  kernel->streams = codegen::signature(spec).streams;
  kernel->key = std::move(key);
  kernel->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return kernel;
}

int64_t kernels_in_memory() {
  static const int64_t count = [] {
    if (const std::optional<int64_t> kernels =
            env_count("AMPFUSE_KERNELS_IN_MEMORY", "a kernel count", 1, int64_t{1} << 31))
      return *kernels;
    // Each kernel holds about two maps: keep the cache's to a quarter of the JIT's limit.
    const int64_t limit = jit_map_limit();
    if (limit < 0) return kDefaultKernelsInMemory;
    return std::clamp(limit / 8, kMinDefaultKernelsInMemory, kDefaultKernelsInMemory);
  }();
  return count;
}

KernelCache::KernelCache() : KernelCache(DiskCache::process()) {}
KernelCache::KernelCache(DiskCache* disk)
    : KernelCache([disk](const codegen::KernelSpec& spec, std::string key) { return jit_compile(spec, std::move(key), disk); }) {}
KernelCache::KernelCache(Compiler compile, int64_t capacity)
    : compile_(std::move(compile)), target_tag_(codegen::jit_target().cache_tag), capacity_(std::max<int64_t>(1, capacity)) {
  jit_map_limit();  // a malformed AMPFUSE_JIT_MAX_MAPS is an error now, not a failure of every compile
}

KernelCache& KernelCache::global() {
  static KernelCache* cache = new KernelCache();  // never destroyed, like the code it points to
  return *cache;
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const codegen::KernelSpec& spec, bool* compiled_now) {
  std::string key = target_tag_ + '|' + spec.cache_key();  // validates the spec
  if (compiled_now) *compiled_now = false;
  std::shared_ptr<Entry> entry;
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = entries_.try_emplace(key);
    if (inserted) {
      it->second = std::make_shared<Entry>();
      recency_.push_front(key);
      it->second->recency = recency_.begin();
    } else {
      ++stats_.hits;
      recency_.splice(recency_.begin(), recency_, it->second->recency);
    }
    entry = it->second;
    first = inserted;
  }
  if (first) {
    std::shared_ptr<const CompiledKernel> kernel;
    std::optional<std::string> error;
    try {
      kernel = compile_(spec, key);
    } catch (const Error& e) {
      error = fmt::format("kernel '{}': compilation failed: {}", spec.name, e.what());
    }
    {
      std::lock_guard lock(mutex_);
      if (kernel) {
        ++stats_.compilations;
        stats_.disk_loads += kernel->from_disk;
        stats_.compile_seconds += kernel->compile_seconds;
        entry->compiled = true;
        evict_past_capacity();
      } else {
        ++stats_.failures;
        recency_.erase(entry->recency);
        entries_.erase(key);  // the next request compiles again; waiters still see this error
      }
    }
    {
      std::lock_guard lock(entry->mutex);
      entry->kernel = kernel;
      entry->error = error;
      entry->ready = true;
    }
    entry->ready_cv.notify_all();
    if (compiled_now) *compiled_now = kernel != nullptr;
  }
  std::unique_lock lock(entry->mutex);
  entry->ready_cv.wait(lock, [&] { return entry->ready; });
  if (entry->error) throw Error(*entry->error);
  return entry->kernel;
}

void KernelCache::evict_past_capacity() {
  // From the least recently used end; compiles in flight stay (their requests wait on them).
  auto position = recency_.end();
  while (static_cast<int64_t>(entries_.size()) > capacity_ && position != recency_.begin()) {
    --position;
    const auto found = entries_.find(*position);
    if (!found->second->compiled) continue;
    entries_.erase(found);
    position = recency_.erase(position);
    ++stats_.evictions;
  }
}

int64_t KernelCache::size() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(entries_.size());
}

KernelCacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace ampfuse::runtime
