#include "codegen/dump.h"

#include <cstdlib>

namespace ampfuse::codegen {

bool dump_requested(std::string_view what) {
  const char* env = std::getenv("AMPFUSE_DUMP");
  if (!env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == what) return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace ampfuse::codegen
