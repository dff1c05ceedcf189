// A count read from an environment variable (AMPFUSE_THREADS, AMPFUSE_KERNELS_IN_MEMORY,
// AMPFUSE_JIT_MAX_MAPS).
#pragma once

#include "ir/error.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

namespace ampfuse::runtime {

// The value of `name`: nullopt when unset or empty; an Error naming the variable and its
// value ("AMPFUSE_THREADS='x' is not a thread count from 1 to 1024") unless it is a whole
// number from `min` to `max`. `what`: "a thread count".
inline std::optional<int64_t> env_count(const char* name, std::string_view what, int64_t min,
                                        int64_t max = std::numeric_limits<int64_t>::max()) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || v < min || v > max) {
    if (max == std::numeric_limits<int64_t>::max()) fail("{}='{}' is not {} of at least {}", name, text, what, min);
    fail("{}='{}' is not {} from {} to {}", name, text, what, min, max);
  }
  return static_cast<int64_t>(v);
}

}  // namespace ampfuse::runtime
