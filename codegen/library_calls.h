// Library calls in generated CPU kernels: the scalar ops ir::is_library_call names, lowered to
// a call per element of the very function the reference interpreter calls (sinf for f32, sin
// for f64, ir/special_functions.h's helpers for erfinv and lgamma), so that fused results are
// bit-equal to the interpreter's (ir/scalar_program.h, "library calls"). The call itself is
// emitted by emit_library_call (codegen/vector_math.h).
#pragma once

#include "ir/scalar_program.h"

#include <string>

namespace ampfuse::codegen {

// The symbol a kernel calls for `op` in f32 or f64 ("sinf", "sin", "ampfuse_erfinv"...).
std::string library_symbol(ir::ScalarOp op, bool f64);

}  // namespace ampfuse::codegen
