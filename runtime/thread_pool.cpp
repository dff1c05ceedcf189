#include "runtime/thread_pool.h"

#include "ir/error.h"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ampfuse::runtime {

namespace {
// Set while a thread runs a chunk: a nested parallel_for would wait for workers that are
// busy with the outer one, so it runs inline instead.
thread_local bool t_in_chunk = false;

void run_chunk(const std::function<void(int64_t, int64_t)>& fn, std::pair<int64_t, int64_t> chunk,
               std::exception_ptr& error, std::mutex& error_mutex) {
  t_in_chunk = true;
  try {
    fn(chunk.first, chunk.second);
  } catch (...) {
    std::lock_guard lock(error_mutex);
    if (!error) error = std::current_exception();
  }
  t_in_chunk = false;
}
}  // namespace

struct ThreadPool::State {
  std::mutex call_mutex;  // one parallel_for at a time
  std::mutex mutex;       // everything below
  std::condition_variable wake, finished;
  uint64_t generation = 0;
  bool stop = false;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks;  // chunk t runs on thread t; 0 is the caller
  int pending = 0;
  std::exception_ptr error;
  std::vector<std::thread> workers;

  void work(size_t index) {
    uint64_t seen = 0;
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || generation != seen; });
      if (stop) return;
      seen = generation;
      if (index >= chunks.size()) continue;  // a job with fewer chunks than threads
      const std::pair<int64_t, int64_t> chunk = chunks[index];
      const auto* job = fn;
      lock.unlock();
      run_chunk(*job, chunk, error, mutex_for_errors);
      lock.lock();
      if (--pending == 0) finished.notify_one();
    }
  }
  std::mutex mutex_for_errors;
};

ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)), state_(std::make_unique<State>()) {
  for (int t = 1; t < threads_; ++t)
    state_->workers.emplace_back([s = state_.get(), t] { s->work(static_cast<size_t>(t)); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stop = true;
  }
  state_->wake.notify_all();
  for (std::thread& w : state_->workers) w.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool* pool = [] {
    int threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("AMPFUSE_THREADS")) {
      char* end = nullptr;
      const long v = std::strtol(env, &end, 10);
      if (end == env || *end != '\0' || v < 1 || v > 1024)
        fail("AMPFUSE_THREADS='{}' is not a thread count from 1 to 1024", env);
      threads = static_cast<int>(v);
    }
    return new ThreadPool(std::max(1, threads));  // never destroyed: workers may outlive statics
  }();
  return *pool;
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
  if (count <= 1 || t_in_chunk) {
    fn(0, n);
    return;
  }

  std::lock_guard call(state_->call_mutex);
  {
    std::lock_guard lock(state_->mutex);
    state_->fn = &fn;
    state_->chunks.clear();
    for (int64_t c = 0; c < count; ++c) state_->chunks.emplace_back(c * chunk, std::min(n, (c + 1) * chunk));
    state_->pending = static_cast<int>(count - 1);
    state_->error = nullptr;
    ++state_->generation;
  }
  state_->wake.notify_all();
  run_chunk(fn, state_->chunks[0], state_->error, state_->mutex_for_errors);
  std::exception_ptr error;
  {
    std::unique_lock lock(state_->mutex);
    state_->finished.wait(lock, [&] { return state_->pending == 0; });
    error = state_->error;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ampfuse::runtime
