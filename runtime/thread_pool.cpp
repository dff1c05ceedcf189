#include "runtime/thread_pool.h"

#include "ir/error.h"
#include "runtime/env_count.h"
#include "runtime/team_policy.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <mutex>

namespace ampfuse::runtime {

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const std::optional<int64_t> threads = env_count("AMPFUSE_THREADS", "a thread count", 1, 1024))
      return static_cast<int>(*threads);
    return omp_get_max_threads();
  }());
  return pool;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk,
                              int64_t align) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  align = std::max<int64_t>(1, align);
  const int64_t wanted = std::clamp<int64_t>(n / min_chunk, 1, threads_);
  int64_t chunk = (n + wanted - 1) / wanted;
  chunk = (chunk + align - 1) / align * align;
  const int64_t count = (n + chunk - 1) / chunk;
  // Inside a parallel region a nested one would get a team of one anyway (OpenMP's default
  // of one active level); run inline without the region's overhead. So does a run that goes
  // solo because its teams waited for cores (runtime/team_policy.h).
  if (count <= 1 || omp_in_parallel() || run_solo()) {
    fn(0, n);
    return;
  }
  team_starting();

  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(static_cast<int>(count))
  {
    // The team may be smaller than asked for (OMP_THREAD_LIMIT, nested calls): every chunk
    // still runs, some threads taking several.
    const int64_t team = omp_get_num_threads();
    for (int64_t c = omp_get_thread_num(); c < count; c += team) {
      try {
        fn(c * chunk, std::min(n, (c + 1) * chunk));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ampfuse::runtime
