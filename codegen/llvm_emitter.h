// LLVM IR for a kernel signature: one function over a flat index range.
//
// The function is `void symbol(i64 begin, i64 end, const KernelArgs* args)`
// (codegen/kernel_abi.h). Loop shapes (codegen/flat_loops.cpp, strided_loops.cpp):
//   flat     every operand contiguous or scalar: one loop over [begin, end) whose body the
//            loop vectorizer widens; a second copy with non-temporal stores, taken when
//            args->streaming is set, for outputs too large to be worth caching;
//   strided  some operand permuted or broadcast along a dimension: `begin` is split into a
//            multi-index once, then an outer loop walks rows of the innermost dimension
//            and an inner loop (the vectorized one) runs along a row. Offsets are int32 or
//            int64 as the signature's wide_index says;
//   tiled    a transpose (an operand with a large innermost stride but unit stride one
//            dimension out): whole [rows, columns] slabs. When every output is contiguous,
//            blocks of each slab are transposed in registers into stack buffers and then
//            computed by a flat loop, with non-temporal stores under args->streaming
//            (codegen/tiled_loops.cpp); otherwise the two loops are interchanged. Partial
//            slabs take the strided rows;
//   rows     a row kernel (KernelSpec::row, codegen/row_loops.cpp): `begin` and `end` are
//            row indices; per row, three vectorized passes over its columns.
// Operands are assumed not to overlap (scoped noalias metadata), which is what lets loops
// with many operands vectorize without run-time alias checks: an output must not share
// memory with an input or another output. Flags are or-reduced in registers and stored
// once per call, after the loop.
#pragma once

#include "codegen/kernel_spec.h"
#include "codegen/llvm_module.h"

#include <string>

namespace ampfuse::codegen {

// The kernel as unoptimized IR in a fresh module.
LlvmModule emit_kernel_module(const KernelSignature& sig, const std::string& symbol);

// emit_kernel_module + optimize_for_target. With AMPFUSE_DUMP containing "code", prints the
// spec and the optimized IR to stderr; with "asm", the target assembly too.
LlvmModule build_kernel_module(const KernelSpec& spec, const std::string& symbol);

}  // namespace ampfuse::codegen
