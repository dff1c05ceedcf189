// Data-parallel loops on the process's OpenMP threads.
//
// oneDNN (Debian's build) runs its primitives on OpenMP's threads. A second pool of our own
// would fight them for the cores: OpenMP workers spin for a while after each primitive,
// waiting for the next one, while our workers wait for the cores they hold. On a busy
// 2-core machine that made the default model take 66 ms instead of 0.33 ms unless
// OMP_WAIT_POLICY=passive was set. So kernels run as OpenMP parallel regions too: one set
// of threads, which go straight from a oneDNN primitive to the next fused kernel.
//
// A parallel_for hands each thread one contiguous chunk of [0, n); the calling thread runs
// a chunk too. Small ranges run inline on the caller: waking threads costs more than a few
// thousand elements of work, and so does everything in a run that goes solo because its
// teams waited for cores (runtime/team_policy.h).
#pragma once

#include <cstdint>
#include <functional>

namespace ampfuse::runtime {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller.
  explicit ThreadPool(int threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool: AMPFUSE_THREADS threads if set, else OpenMP's default
  // (OMP_NUM_THREADS, or one per hardware thread), the count oneDNN uses too.
  static ThreadPool& global();

  int threads() const { return threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n): at most threads() chunks, at
  // least `min_chunk` elements each (except the last), boundaries at multiples of `align`
  // elements so that chunks do not share cache lines or split vector loops needlessly.
  // Returns when every chunk is done. An exception thrown by fn is rethrown here (the
  // first one; the other chunks still run). Calls from inside a parallel region (ours or
  // oneDNN's) run inline; calls from different threads at once each get their own team.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1,
                    int64_t align = 1);

 private:
  int threads_;
};

}  // namespace ampfuse::runtime
