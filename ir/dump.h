// AMPFUSE_DUMP: which internal stages print what they produce, to stderr.
//
//   ir      the graph after every pass (engine/passes/pipeline.h)
//   plan    the fusion plan (engine/planning/fusion_plan.h print_plan)
//   memory  the memory plan: each buffer's offset, size and live steps
//   code    generated code: each kernel's spec and LLVM IR, or its CUDA source
//   asm     the host assembly of each CPU kernel
//   all     every one of them
#pragma once

#include <string_view>

namespace ampfuse {

// True when the comma-separated AMPFUSE_DUMP environment variable names `what` or is
// "all". Read on every call (it is asked once per compile, and tests set it). Throws
// ampfuse::Error naming the variable when it holds anything but the items above.
bool dump_enabled(std::string_view what);

}  // namespace ampfuse
