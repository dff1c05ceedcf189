// A persistent pool of worker threads for data-parallel loops.
//
// Threads are created once; a parallel_for wakes them, hands each one contiguous chunk of
// [0, n) and waits. The calling thread runs the first chunk itself, so a pool of N
// threads owns N-1 workers. Small ranges run inline on the caller: waking threads costs
// more than a few thousand elements of work.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace ampfuse::runtime {

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The process's pool: AMPFUSE_THREADS threads if set, else one per hardware thread.
  static ThreadPool& global();

  int threads() const { return threads_; }

  // Calls fn(begin, end) on disjoint chunks covering [0, n): at most threads() chunks, at
  // least `min_chunk` elements each (except the last), boundaries at multiples of `align`
  // elements so that chunks do not share cache lines or split vector loops needlessly.
  // Returns when every chunk is done. An exception thrown by fn is rethrown here (the
  // first one; the other chunks still run). Calls from inside fn run inline; concurrent
  // calls from different threads take turns.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1,
                    int64_t align = 1);

 private:
  struct State;
  int threads_;
  std::unique_ptr<State> state_;
};

}  // namespace ampfuse::runtime
