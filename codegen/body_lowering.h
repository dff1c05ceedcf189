// Lowers a scalar program (ir/scalar_program.h) to LLVM IR for one element.
#pragma once

#include "ir/scalar_program.h"

#include <llvm/IR/IRBuilder.h>

#include <vector>

namespace ampfuse::codegen {

// Emits `p` at the builder's position. `inputs` are the program's inputs already in the
// compute type (float or double); `element_index` (i64) is the element's flat iteration
// index, which philox_bits24 reads (nullptr when the program has none); returns one value
// per result. Semantics are those of
// ir/scalar_program.h: NaN-propagating max/min, IEEE compares giving 1 or 0, select on
// "a != 0" (so NaN selects b), transcendental functions per codegen/vector_math.h.
std::vector<llvm::Value*> lower_scalar_program(llvm::IRBuilder<>& b, const ir::ScalarProgram& p,
                                               llvm::ArrayRef<llvm::Value*> inputs, llvm::Value* element_index,
                                               llvm::Type* compute);

}  // namespace ampfuse::codegen
