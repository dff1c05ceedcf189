#include "runtime/kernel_cache.h"

#include "codegen/llvm_emitter.h"
#include "codegen/llvm_target.h"
#include "ir/error.h"
#include "runtime/jit.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>

namespace ampfuse::runtime {

struct KernelCache::Entry {
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

std::shared_ptr<const CompiledKernel> jit_compile(const codegen::KernelSpec& spec, std::string key) {
  const auto start = std::chrono::steady_clock::now();
  auto kernel = std::make_shared<CompiledKernel>();
  kernel->symbol = next_symbol();
  kernel->fn = reinterpret_cast<codegen::KernelFn>(
      Jit::global().compile(codegen::build_kernel_module(spec, kernel->symbol)));
  kernel->key = std::move(key);
  kernel->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return kernel;
}

KernelCache::KernelCache() : KernelCache(jit_compile) {}
KernelCache::KernelCache(Compiler compile)
    : compile_(std::move(compile)), target_tag_(codegen::jit_target().cache_tag) {}

KernelCache& KernelCache::global() {
  static KernelCache* cache = new KernelCache();  // never destroyed, like the code it points to
  return *cache;
}

std::shared_ptr<const CompiledKernel> KernelCache::get(const codegen::KernelSpec& spec, bool* compiled_now) {
  std::string key = target_tag_ + '|' + spec.cache_key();  // validates the spec
  std::shared_ptr<Entry> entry;
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = entries_.try_emplace(key);
    if (inserted) it->second = std::make_shared<Entry>();
    entry = it->second;
    first = inserted;
    if (!inserted) ++stats_.hits;
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
        stats_.compile_seconds += kernel->compile_seconds;
      } else {
        ++stats_.failures;
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

KernelCacheStats KernelCache::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace ampfuse::runtime
