// AMPFUSE_DUMP: which internal stages print what they produce.
#pragma once

#include <string_view>

namespace ampfuse {

// True when the comma-separated AMPFUSE_DUMP environment variable names `what`
// ("ir", "plan", "code", "asm"), or is "all". Read once per process.
bool dump_enabled(std::string_view what);

}  // namespace ampfuse
