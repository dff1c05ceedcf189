// AMPFUSE_DUMP: a comma-separated list of things to print to stderr as they are made
// (ir, plan, code, asm). Read from the environment on every call, so tests can set it.
#pragma once

#include <string_view>

namespace ampfuse::codegen {

bool dump_requested(std::string_view what);

}  // namespace ampfuse::codegen
