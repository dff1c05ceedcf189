#include "runtime/memory_maps.h"

#include "runtime/env_count.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ampfuse::runtime {

namespace {

// Reads a whole /proc file in fixed chunks (no allocation: the caller may be short of maps),
// calling `chunk` on each piece; false where it cannot be opened or read.
template <class Chunk>
bool read_proc_file(const char* path, Chunk chunk) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[16384];
  bool ok = true;
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    chunk(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return ok;
}

// The limit leaves this share of vm.max_map_count to everything but the JIT, and at least
// kMinOtherMaps.
constexpr int64_t kOtherMapsShare = 8;
constexpr int64_t kMinOtherMaps = 1024;
// Counted again after this many loads even when the estimate is far from the limit, so that
// maps the rest of the process made since are seen.
constexpr int64_t kMaxLoadsBetweenCounts = 256;

}  // namespace

int64_t process_map_count() {
  int64_t lines = 0;
  if (!read_proc_file("/proc/self/maps", [&](const char* p, size_t n) { lines += std::count(p, p + n, '\n'); }))
    return -1;
  return lines;
}

int64_t system_max_map_count() {
  char text[32] = {};
  size_t used = 0;
  if (!read_proc_file("/proc/sys/vm/max_map_count", [&](const char* p, size_t n) {
        const size_t take = std::min(n, sizeof text - 1 - used);
        std::memcpy(text + used, p, take);
        used += take;
      }))
    return -1;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (end == text || v <= 0) return -1;
  return v;
}

int64_t jit_map_limit() {
  static const int64_t limit = [] {
    if (const std::optional<int64_t> maps = env_count("AMPFUSE_JIT_MAX_MAPS", "a map count", 1)) return *maps;
    const int64_t cap = system_max_map_count();
    if (cap < 0) return int64_t{-1};
    return std::max<int64_t>(1, cap - std::max(kMinOtherMaps, cap / kOtherMapsShare));
  }();
  return limit;
}

JitMapBudget::JitMapBudget(int64_t limit, int64_t (*count)()) : limit_(limit), count_(count) {}

bool JitMapBudget::allows_load(int64_t* maps) {
  if (limit_ >= 0) {
    const bool near = last_count_ < 0 || loads_since_count_ >= kMaxLoadsBetweenCounts ||
                      last_count_ + (loads_since_count_ + 1) * kMapsPerLoad >= limit_;
    if (near) {
      last_count_ = count_();
      loads_since_count_ = 0;
    }
  }
  if (maps) *maps = last_count_;
  return limit_ < 0 || last_count_ < 0 || last_count_ < limit_;
}

}  // namespace ampfuse::runtime
