#include "ir/dump.h"

#include "ir/error.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>

namespace ampfuse {

namespace {
constexpr std::array<std::string_view, 6> kItems = {"ir", "plan", "memory", "code", "asm", "all"};
}  // namespace

bool dump_enabled(std::string_view what) {
  const char* env = std::getenv("AMPFUSE_DUMP");
  if (!env) return false;
  bool found = false;
  std::string_view rest(env);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    if (std::find(kItems.begin(), kItems.end(), item) == kItems.end())
      fail("AMPFUSE_DUMP='{}': unknown item '{}' (expected a comma-separated list of ir, plan, memory, code, asm, or all)",
           env, item);
    found = found || item == what || item == "all";
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return found;
}

}  // namespace ampfuse
