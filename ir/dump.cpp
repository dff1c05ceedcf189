#include "ir/dump.h"

#include <cstdlib>
#include <string>

namespace ampfuse {

bool dump_enabled(std::string_view what) {
  static const std::string spec = [] {
    const char* v = std::getenv("AMPFUSE_DUMP");
    return std::string(v ? v : "");
  }();
  if (spec == "all") return true;
  std::string_view rest = spec;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    if (rest.substr(0, comma) == what) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace ampfuse
